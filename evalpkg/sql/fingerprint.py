"""SQL fingerprints with sqlglot: `exact` ignores formatting and case; `pattern` also ignores literals;
`question` ignores only the literals that say when or how many rows, not what is asked."""

from __future__ import annotations

import hashlib

from sqlglot import exp

from evalpkg.sql.guard import is_single_select
from evalpkg.sql.parse import DIALECT, parse_statement
from evalpkg.sql.vocabulary import DATE_TEXT

# Gold code reaches parsing and the read-only test through this module; both are defined elsewhere.
__all__ = [
    "exact",
    "is_single_select",
    "normalized",
    "parse_statement",
    "pattern",
    "question",
    "tables",
    "tables_in",
]


def _strip_schema(node: exp.Expr) -> exp.Expr:
    """emr.t_zy_visit and t_zy_visit are the same table to an agent whose search_path is emr, meta."""
    if isinstance(node, exp.Table):
        node.set("db", None)
        node.set("catalog", None)
    return node


def normalized(sql: str, *, literals: bool = True, periods: bool = True) -> str:
    """`literals=False`: every literal a placeholder; `periods=False`: only the period and row-count ones."""
    tree = parse_statement(sql).transform(_strip_schema)
    if not literals:
        tree = tree.transform(lambda n: exp.Placeholder() if isinstance(n, exp.Literal) else n)
    elif not periods:
        tree = tree.transform(lambda n: exp.Placeholder() if _period_or_count(n) else n)
    return tree.sql(dialect=DIALECT, normalize=True, pretty=False).lower()


def _period_or_count(node: exp.Expr) -> bool:
    """A date, a timestamp, an interval's length or a LIMIT/OFFSET: when the question is asked for, or how
    many rows it shows, not what it asks (a drug, a code, a department, a threshold)."""
    if not isinstance(node, exp.Literal):
        return False
    if isinstance(node.parent, exp.Interval | exp.Limit | exp.Offset):
        return True
    return node.is_string and DATE_TEXT.fullmatch(str(node.this).strip()) is not None


def exact(sql: str) -> str:
    return hashlib.sha256(normalized(sql).encode()).hexdigest()[:16]


def pattern(sql: str) -> str:
    return hashlib.sha256(normalized(sql, literals=False).encode()).hexdigest()[:16]


def question(sql: str) -> str:
    """What a ticket asks: the same tables, filters and measure with the same drug, code, department and
    threshold literals; two tickets that differ only in their period or row count ask the same question
    (a refresh re-asks it on the snapshot's own period), while a valsartan and an insulin ticket do not."""
    return hashlib.sha256(normalized(sql, periods=False).encode()).hexdigest()[:16]


def tables(sql: str) -> list[str]:
    return tables_in(parse_statement(sql))


def tables_in(tree: exp.Expr) -> list[str]:
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    return sorted({t.name for t in tree.find_all(exp.Table) if t.name not in ctes})
