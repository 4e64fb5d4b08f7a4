"""Execution match, comparator version 12: whether a prediction's rows are a gold's, as a careful human grader
reads them and nothing more lenient. The rules, each with the module that holds it and the audit layout,
mutation or test that proves it, are one current list in rules.py (RULES), and the order in which a
prediction is read against a gold is its ACCEPTANCE table; docs/scoring.md shows both and tells how each
version came to be. This module holds the bag and order comparison itself (`match`, `explain`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from evalpkg.errors import SqlParseError
from evalpkg.grading.columns import Column, columns_of, compatible, plausible
from evalpkg.grading.matching import find_assignment, rows_equal
from evalpkg.grading.values import Row
from evalpkg.sql.order import order_targets
from evalpkg.sql.parse import parse_statement

COMPARATOR_VERSION = 12


@dataclass(frozen=True)
class MatchResult:
    ok: bool
    reason: str


def tie_groups(keys: Sequence[tuple[Any, ...]]) -> list[int]:
    """Per row, its run of equal sort keys: rows of one run may trade places."""
    groups = [0] if keys else []
    for prev, cur in pairwise(keys):
        groups.append(groups[-1] + (prev != cur))
    return groups


def _segments(
    gold: list[Column], n: int, order_matters: bool, order_keys: list[int] | None, groups: Sequence[int] | None
) -> list[int] | None:
    """Per gold row, its run of ties on the ORDER BY keys (None: order ignored; unknown keys: every row)."""
    if not order_matters:
        return None
    if groups is not None:
        return list(groups)
    if not order_keys or not all(0 <= k < len(gold) for k in order_keys):
        return list(range(n))
    return tie_groups(list(zip(*(gold[k].tokens for k in order_keys), strict=True)))


def order_key_columns(gold_sql: str, columns: list[str]) -> list[int] | None:
    """Output positions the gold's final ORDER BY sorts on (None: cannot tell, or it sorts on something
    no output is); read by ties.order_targets, as the tie rules read it."""
    try:
        tree = parse_statement(gold_sql)
    except SqlParseError:
        return None
    if tree.args.get("order") is None:
        return None
    targets = order_targets(tree, [c.lower() for c in columns])
    return None if None in targets else [t for t in targets if t is not None]


def explain(
    pred: Sequence[Row] | None,
    gold: Sequence[Row],
    *,
    order_matters: bool = False,
    rel_tol: float = 1e-6,
    order_keys: list[int] | None = None,
    truncated: bool = False,
    pinned: Mapping[int, int] | None = None,
    groups: Sequence[int] | None = None,
    rates: Collection[int] = (),
    stated: Sequence[int | None] = (),
    gold_stated: Sequence[int | None] = (),
) -> MatchResult:
    """Whether pred matches this gold, and why not. pred None: the agent has no successful result;
    truncated: either result hit the fetch cap, so only a sample of it is at hand; pinned: gold column ->
    the prediction column that carries its name; groups: per gold row, its tie group under the ORDER BY
    (else read from order_keys); rates: gold columns that are a rate, given alike as a fraction or a
    percentage; stated: per prediction column, the decimals its query wrote (None: not known); gold_stated: per
    gold column, the decimals the gold's own SQL rounded to (None: not known)."""
    if truncated:
        return MatchResult(False, "a result was truncated at the fetch cap; a sample is never compared")
    if pred is None:
        return MatchResult(False, "no successful result")
    if len(pred) != len(gold):
        return MatchResult(False, f"{len(pred)} rows, gold has {len(gold)}")
    if not gold:
        return MatchResult(True, "match: both empty")
    width, pred_widths = len(gold[0]), set(map(len, pred))
    if len(pred_widths) != 1 or pred_widths.pop() < width:
        return MatchResult(False, f"fewer columns than the gold's {width}")
    gold_cols, pred_cols = columns_of(gold), columns_of(pred)
    for column, decimals in zip(pred_cols, stated, strict=False):
        column.stated = decimals if column.kind == "float" else None
    for column, decimals in zip(gold_cols, gold_stated, strict=False):
        column.rounded_to = decimals if column.kind == "float" else None
    for j in rates:
        gold_cols[j].rate = True
    likely = [[p for p, pc in enumerate(pred_cols) if plausible(gc, pc, rel_tol)] for gc in gold_cols]
    candidates = [
        c if len(c) < 2 else [p for p in c if compatible(gold_cols[j], pred_cols[p], rel_tol)]
        for j, c in enumerate(likely)
    ]
    if pinned:  # a prediction column named like a gold column claims that meaning: it must be that column
        candidates = [[p for p in c if pinned.get(j, p) == p] for j, c in enumerate(candidates)]

    def search(segments: list[int] | None) -> str:
        def rows_ok(chosen: dict[int, int]) -> bool:
            return rows_equal([(gold_cols[g], pred_cols[p]) for g, p in chosen.items()], segments, rel_tol)

        return find_assignment(candidates, pred_cols, rows_ok)

    segments = _segments(gold_cols, len(gold), order_matters, order_keys, groups)
    missing = [j + 1 for j, c in enumerate(candidates) if not c]
    reason = "" if missing else search(segments)
    if reason.startswith("rows differ"):  # a lone candidate was only plausible: name the column it fails
        missing = [j + 1 for j, c in enumerate(candidates) if not compatible(gold_cols[j], pred_cols[c[0]], rel_tol)]
        if not missing and segments and not search(None):
            reason = "same rows, but not in the gold's order"
    if missing:
        reason = f"no prediction column has the values of gold column(s) {missing}"
    return MatchResult(not reason, reason or "match")


def match(pred: Sequence[Row] | None, gold: Sequence[Row], **options: Any) -> bool:
    """explain(...).ok"""
    return explain(pred, gold, **options).ok
