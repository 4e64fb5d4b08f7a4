"""Execution match (SPEC §9): "correct" means what a careful human grader accepts, and nothing more lenient. Rules
of COMPARATOR_VERSION 7: every gold column needs its own prediction column (extra columns, column order and
names don't matter; found by assignment, identical columns interchangeable); rows are bags, in the gold's ORDER
BY order only where order matters (ties on the keys in any order); integers exact; fractional numbers within the
task's relative tolerance, rows paired by a proper matching, and a gold written to more decimals than a
prediction with at least one is rounded to the prediction's (the question rarely says how to round) where no
value becomes 0 and, unless the prediction's query stated its decimals (a numeric's scale: round(x, 1)), its
largest value keeps two significant figures (12.3 for 12.34, 0.7 for 0.74 from round(x, 1), not 0.1 for 0.12
from a float; a gold ending in 5 may round either way); a gold column of fractions (a rate, a mean) is never
stood for by whole numbers (a count); a period as one period however written (a month or quarter number within
the one year the other side's labels name, 'YYYY-MM', 'Jan 2024', '2020-Q1', a date or midnight on the 1st);
booleans = 't'/'f'/'true'/ 'false'; text trimmed and NFKC-normalised; NULL equals only NULL; empty matches only
empty; a failed or truncated result never matches. Several golds (layout alternatives): the caller tries each.
Added in 4: rows tied on the gold's ORDER BY keys (hidden key columns included) match in any order, and where
its LIMIT cuts a tie any choice of the tied rows is accepted (ties.py); a summary row (a total of the rows it
covers) may be added or left out (summary.py); summation noise below 1e-9 is no difference; a rate may be
written as a fraction or a percentage. Changed in 5: whole numbers never stand for a column of fractions,
however close within the task's tolerance; periods are compared as period ids however written (quarters too).
Added in 6: a comparison of two periods may be answered as a period series (one row per period under one column
of the measure's kind: the months '2022-03', '2022-04' for zy_prev, zy_this; cross.py); row labels are read
through the label normaliser as the gold's labels (an entry's code, its name in the other language, the name
decorated with either or written as two names of one entry ('男 male'), a quarter labelled by its first month, a
year), and a row of a group the gold does not list with every number 0 or NULL is neutral unless the gold is a
top N (relabel.py); a long form may carry other numbers per cell (the count beside each asked mean; pivot.py);
in a cross the header holding more of a column's words names it, and a header it outdid names the label's one
fact left (cross.py); a coarser prediction is read at the decimals its query wrote (the numeric's scale, kept
beside the float). Added in 7: a comparison of two periods in one wide row (prev_X, cur_X beside the period
it is of) is read as its period rows, the earlier period's numbers and the later one's; a prediction whose label
column holds two consecutive periods is compared so, its measures found by their values as in any layout and
its rows by their periods (series.py). A pivot is compared with every choice of rows a LIMIT that cuts a tie
allows, as the wide form is. Added in 8: a label made only of summary words ('Hospital-wide', 'All departments')
is a total, and a total label names the gold's one total row (全院) (summary.py, relabel.py); where a LIMIT cuts
a tie, the list of every tied row (FETCH FIRST n ROWS WITH TIES) is accepted as any choice of them is (ties.py).
Added in 9: a label or header that names one period among other words ('admissions_nov_2024': what was
counted, then when) speaks of that period, as the period alone does (cross.py).
Changed in 10: the words beside a period say only what was counted (no number, no period of their own)
wherever a label or name is read as holding one, so a day holds no month ('2018-02-02' names neither '2018-02'
nor '2018-02-01'; periods.py, labels.py); a row of labels with no number is never neutral, so a list of names
with an extra name is an extra row (relabel.py); a prediction whose SQL is a gold's own text keeps the decimals
its query wrote (execution.GoldCache), as when it runs afresh.
Added in 11: a text on a total row that no other row holds in its column describes the total ('GI + new
departments' beside 合计) and names no group it would subtotal (summary.py).
"""

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

COMPARATOR_VERSION = 11


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
) -> MatchResult:
    """Whether pred matches this gold, and why not. pred None: the agent has no successful result;
    truncated: either result hit the fetch cap, so only a sample of it is at hand; pinned: gold column ->
    the prediction column that carries its name; groups: per gold row, its tie group under the ORDER BY
    (else read from order_keys); rates: gold columns that are a rate, given alike as a fraction or a
    percentage; stated: per prediction column, the decimals its query wrote (None: not known)."""
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
