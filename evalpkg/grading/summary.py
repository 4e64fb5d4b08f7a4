"""Summary rows: a total, subtotal or "whole hospital" row a careful analyst adds to a breakdown.

A grader ignores such a row where the question did not ask for it, and only where it truly summarizes:
its label is NULL or a total word, and each of its numbers is the sum of the rows it covers (a count, a
sum), a value they all share (a key, a year), or, for a fractional column, a value within their range
(an overall rate or mean). A row whose numbers are not the sum is an extra row like any other, with one
exception: a row whose label says in words that it is a summary (合计, 全院, 'Total', 'Hospital-wide') may
hold any number where the gold cannot check it (`free`: a distinct count, a rate, a mean, whose total is no
sum of the rows), since the label says what it is; a number the gold can check (a count or sum of a
countable unit, which adds up: `additive_columns`) must still be the sum.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

from sqlglot import exp

from evalpkg.errors import SqlParseError
from evalpkg.sql.parse import parse_statement

TOTAL_WORDS = frozenset(
    {
        "合计", "总计", "小计", "总数", "汇总", "全院", "全院合计", "全院总计", "全部", "总体", "所有科室", "全部科室",
        "total", "totals", "subtotal", "sub-total", "grand total", "all", "overall", "sum", "whole hospital",
        "hospital total", "hospital", "all departments", "all patients", "all months",
    }
)  # fmt: skip
# A label made only of these words is a total too ('Hospital-wide', 'All departments combined', 'Entire
# hospital'), if one of them says "all of it" (SUMMARY_CORE): 'departments' alone names no total.
SUMMARY_WORDS = frozenset(
    {"total", "totals", "subtotal", "grand", "all", "overall", "sum", "whole", "entire", "combined", "hospital", "wide",
     "departments", "depts", "patients", "months", "years", "of", "the"}
)  # fmt: skip
SUMMARY_CORE = frozenset(
    {"total", "totals", "subtotal", "all", "overall", "sum", "whole", "entire", "combined", "hospital"}
)
_WORD = re.compile(r"[a-z]+")
Row = Sequence[Any]


def is_total_label(value: Any) -> bool:
    if value is None:
        return True
    if not isinstance(value, str):
        return False
    text = unicodedata.normalize("NFKC", value).strip().casefold().strip("()（）[]【】:：* ")
    if text in TOTAL_WORDS or text.startswith(("total ", "合计", "总计", "全院")) or text.endswith(" total"):
        return True
    words = _WORD.findall(text)
    latin = "".join(words) == re.sub(r"[\s\-_/,&]", "", text)  # nothing but these words and separators
    return latin and bool(words) and set(words) <= SUMMARY_WORDS and bool(set(words) & SUMMARY_CORE)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    try:
        return float(value) if not isinstance(value, str) else None
    except (TypeError, ValueError):  # Decimal converts; anything else is not a number
        return None


def _close(a: float, b: float, rel_tol: float) -> bool:
    return math.isclose(a, b, rel_tol=max(rel_tol, 1e-9), abs_tol=1e-9)


def _summarizes(row: Row, covered: list[Row], rel_tol: float, subtotal: bool, free: Collection[int] = ()) -> bool:
    """Every number of `row` is the sum of the covered rows' values, their common value, or (fractional)
    within their range, or is in a `free` column (a row labelled in summary words: the gold cannot check
    it); and at least one is a sum, a range or free, so a copy of one row is no summary, except the subtotal
    of a group of one row."""
    aggregated = subtotal and len(covered) == 1
    for col, cell in enumerate(row):
        value = _number(cell)
        if value is None:
            continue
        if col in free:
            aggregated = True
            continue
        known = [v for r in covered if (v := _number(r[col])) is not None]  # aggregates skip NULLs
        if not known:
            return False
        if len(covered) > 1 and _close(value, math.fsum(known), rel_tol):
            aggregated = True
        elif all(_close(value, v, rel_tol) for v in known):
            continue
        elif isinstance(cell, float) or any(isinstance(r[col], float) for r in covered):
            if not min(known) - 1e-9 <= value <= max(known) + 1e-9:
                return False
            aggregated = True
        else:
            return False
    return aggregated


def _kept_labels(row: Row) -> list[tuple[int, str]]:
    return [(col, cell) for col, cell in enumerate(row) if isinstance(cell, str) and not is_total_label(cell)]


def _is_summary(row: Row, leaves: list[Row], rel_tol: float, free: Collection[int]) -> bool:
    """Whether the row summarizes the rows that agree with it on every text label it keeps. A label no leaf
    holds in its column describes the row ('GI + new departments' beside 合计) and names no group. Only a
    row labelled in summary words holds the `free` columns freely."""
    kept = [(col, cell) for col, cell in _kept_labels(row) if any(leaf[col] == cell for leaf in leaves)]
    covered = [leaf for leaf in leaves if all(leaf[col] == cell for col, cell in kept)]
    free = free if labelled_in_words(row) else ()
    return bool(covered) and _summarizes(row, covered, rel_tol, subtotal=bool(kept), free=free)


def labelled_in_words(row: Row) -> bool:
    """A text of the row says it is a summary (合计, 'Hospital-wide'): more than a NULL label, which may be a
    group of its own."""
    return any(isinstance(cell, str) and is_total_label(cell) for cell in row)


def without_summary_rows(rows: Sequence[Row], rel_tol: float = 1e-6, free: Collection[int] = ()) -> list[Row] | None:
    """The rows without their summary rows, or None where there is none. A row with a NULL or total label
    that summarizes nothing is an ordinary row (a NULL department is a group of its own). free: columns
    whose number on a row labelled in summary words the gold cannot check (see unchecked_columns)."""
    texts = {j for r in rows for j, c in enumerate(r) if isinstance(c, str)}  # a NULL labels only a text column
    labelled = [i for i, r in enumerate(rows) if any(is_total_label(r[j]) for j in texts)]
    if not labelled or len(labelled) == len(rows):
        return None
    summaries = set(labelled)
    for _ in range(2):  # a candidate that summarizes nothing is a leaf; check the rest against all leaves
        leaves = [r for i, r in enumerate(rows) if i not in summaries]
        summaries = {i for i in summaries if _is_summary(rows[i], leaves, rel_tol, free)}
    if not summaries:
        return None
    return [list(r) for i, r in enumerate(rows) if i not in summaries]


def unchecked_columns(rows: Sequence[Row], checked: Sequence[Sequence[Any]]) -> frozenset[int]:
    """The prediction's columns whose number on a row labelled in summary words the gold cannot check: every
    column but those whose values on the other rows are the values of a `checked` gold column (a count or
    sum that adds up, whose total is the sum of the rows). An extra column is not graded, so its total is free
    too."""
    if not rows:
        return frozenset()
    detail = [r for r in rows if not labelled_in_words(r)]
    bags = [Counter(_number(v) for v in column) for column in checked]
    found = {j for j in range(len(rows[0])) if Counter(_number(r[j]) for r in detail) in bags}
    return frozenset(j for j in range(len(rows[0])) if j not in found)


def additive_columns(sql: str, columns: Sequence[str]) -> list[int]:
    """The gold's outputs whose total over its rows is their sum, so that the gold can check a total row: a
    count of rows or a sum (count(*), count(x), sum(x), with or without FILTER or COALESCE), followed by name
    through CTEs and subqueries. A distinct count (a patient counted in two departments), a mean, a rate, a
    key, or anything not read is none."""
    try:
        tree = parse_statement(sql)
    except SqlParseError:
        return []
    if not isinstance(tree, exp.Select) or len(tree.expressions) != len(columns):
        return []
    inner = [e for select in tree.find_all(exp.Select) if select is not tree for e in select.expressions]
    return [j for j, e in enumerate(tree.expressions) if _adds_up(e, inner, depth=0)]


def _adds_up(node: exp.Expr, inner: list[exp.Expr], depth: int) -> bool:
    while isinstance(node, exp.Alias | exp.Paren | exp.Cast | exp.Filter | exp.Coalesce):
        node = node.this
    if isinstance(node, exp.Column) and depth < 5:
        named = [e for e in inner if e.alias_or_name.lower() == node.name.lower() and e is not node]
        return len(named) == 1 and _adds_up(named[0], inner, depth + 1)
    if isinstance(node, exp.Count | exp.Sum):
        return not isinstance(node.this, exp.Distinct)
    return False
