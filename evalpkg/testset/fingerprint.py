"""SQL fingerprints with sqlglot: `exact` ignores formatting and case; `pattern` also ignores literals."""

from __future__ import annotations

import hashlib

import sqlglot
from sqlglot import exp

from evalpkg.errors import ConfigError


def parse_statement(sql: str) -> exp.Expr:
    """Exactly one PostgreSQL statement, or a one-line ConfigError saying why not."""
    try:
        statements = [s for s in sqlglot.parse(sql, dialect="postgres") if s is not None]
    except sqlglot.errors.SqlglotError as exc:
        raise ConfigError(f"SQL does not parse: {str(exc).splitlines()[0][:200]}") from exc
    if len(statements) != 1:
        raise ConfigError(f"exactly one statement is allowed, found {len(statements)}")
    return statements[0]


def _strip_schema(node: exp.Expr) -> exp.Expr:
    """emr.t_zy_visit and t_zy_visit are the same table to an agent whose search_path is emr, meta."""
    if isinstance(node, exp.Table):
        node.set("db", None)
        node.set("catalog", None)
    return node


def normalized(sql: str, *, literals: bool = True) -> str:
    tree = parse_statement(sql).transform(_strip_schema)
    if not literals:
        tree = tree.transform(lambda n: exp.Placeholder() if isinstance(n, exp.Literal) else n)
    return tree.sql(dialect="postgres", normalize=True, pretty=False).lower()


def exact(sql: str) -> str:
    return hashlib.sha256(normalized(sql).encode()).hexdigest()[:16]


def pattern(sql: str) -> str:
    return hashlib.sha256(normalized(sql, literals=False).encode()).hexdigest()[:16]


def is_single_select(sql: str) -> bool:
    """One read-only query (SELECT / set operation / WITH ... SELECT)."""
    try:
        tree = parse_statement(sql)
    except ConfigError:
        return False
    if not isinstance(tree, exp.Query):
        return False
    return not any(
        isinstance(n, exp.Insert | exp.Update | exp.Delete | exp.Merge | exp.Create | exp.Drop) for n in tree.walk()
    )


def tables(sql: str) -> list[str]:
    return tables_in(parse_statement(sql))


def tables_in(tree: exp.Expr) -> list[str]:
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    return sorted({t.name for t in tree.find_all(exp.Table) if t.name not in ctes})
