"""SQL fingerprints with sqlglot: `exact` ignores formatting and case; `pattern` also ignores literals."""

from __future__ import annotations

import hashlib

from sqlglot import exp

from evalpkg.sql.guard import is_single_select
from evalpkg.sql.parse import DIALECT, parse_statement

# Gold code reaches parsing and the read-only test through this module; both are defined elsewhere.
__all__ = ["exact", "is_single_select", "normalized", "parse_statement", "pattern", "tables", "tables_in"]


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
    return tree.sql(dialect=DIALECT, normalize=True, pretty=False).lower()


def exact(sql: str) -> str:
    return hashlib.sha256(normalized(sql).encode()).hexdigest()[:16]


def pattern(sql: str) -> str:
    return hashlib.sha256(normalized(sql, literals=False).encode()).hexdigest()[:16]


def tables(sql: str) -> list[str]:
    return tables_in(parse_statement(sql))


def tables_in(tree: exp.Expr) -> list[str]:
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    return sorted({t.name for t in tree.find_all(exp.Table) if t.name not in ctes})
