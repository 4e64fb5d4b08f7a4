"""Premise and discrimination checks on the snapshot: what a question asserts holds in the data (a top N
returns N rows, an asserted change meets the criterion its template states), and its answer can tell agents
apart (not every number 0, not the same answer as another task of its template).

validate reports the findings on any snapshot; in the reference worlds (testset.worlds) it fails them for
releases from traps.TRAP_BITE_REQUIRED_FROM on.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Final, Literal

from sqlglot import exp

from evalpkg.errors import QueryError, SqlParseError
from evalpkg.grading.comparator import match, order_key_columns
from evalpkg.sql.parse import parse_statement
from evalpkg.testset.models import TaskType

if TYPE_CHECKING:
    from evalpkg.sql.executor import QueryResult
    from evalpkg.testset.models import Task

# Tags that say a 0 answer is the point of a task. models.Tag has none yet: add it there and here.
ZERO_ANSWER_TAGS: Final[frozenset[str]] = frozenset()
# A column of one period of a change: prev_x / this_x / cur_x, or x_prev / x_this / x_cur.
PERIOD_COLUMN: Final = re.compile(r"^(?:(prev|prior|this|cur|current)_(\w+)|(\w+?)_(prev|prior|this|cur|current))$")
EARLIER: Final = frozenset({"prev", "prior"})
# The change an anomaly question released before v7 (no stated premise) asserts: (column stem, rows) where it
# is not the first prev/this pair summed over the rows; templates now state it (models.Premise).
# "*": every pair; "first": the first row (a total row); "series": first vs last row of stem.
ASSERTED_CHANGE: Final = {
    "anomaly_visits_month_by_type": ("*", "sum"),  # total visits, split by type
    "anomaly_lab_abnormal_rate_month": ("pct", "sum"),  # the rate, not the volumes
    "anomaly_los_change_quarter": ("avg_los", "first"),  # hospital ALOS (the grouping-sets total row)
    "anomaly_glu_mean_unit_switch": ("raw_mean", "series"),  # the raw monthly mean over the period
}
Check = Literal["top_n", "change", "premise", "all_zero", "same_answer"]
# A stated change of a count (Premise.counts_events) must lie beyond chance: at least this many standard
# errors of the difference of two Poisson counts, |after - before| / sqrt(before + after). Two is the
# usual line; below it, a fall of 20% over 30 visits is what two quiet months give by themselves.
CHANCE_SIGMAS: Final = 2.0


@dataclass(frozen=True)
class Finding:
    task_id: str
    check: Check
    detail: str

    def line(self) -> str:
        return f"{self.task_id} [{self.check}] {self.detail}"


def check(tasks: Iterable[Task], run: Callable[[str], QueryResult]) -> list[Finding]:
    """Every check on every task with a gold; a gold that fails to run is validate's problem, skipped here."""
    results: dict[str, tuple[Task, list[QueryResult]]] = {}
    for task in tasks:
        try:
            results[task.id] = (task, [run(sql) for sql in task.gold_sql])
        except QueryError:
            continue
    findings: list[Finding] = []
    for task, golds in results.values():
        if not golds:
            continue
        findings += top_n(task, golds)
        if task.premise is not None:
            findings += stated(task, golds[0].columns, golds[0].rows)
        elif task.type is TaskType.anomaly:
            findings += change(task, golds[0].columns, golds[0].rows)
        findings += all_zero(task, golds[0].rows)
    return findings + same_answers([(t, g[0]) for t, g in results.values() if g])


def limit_of(sql: str) -> int | None:
    try:
        limit = parse_statement(sql).args.get("limit")
    except SqlParseError:
        return None
    value = limit.args.get("expression") if isinstance(limit, exp.Limit) else None
    return int(value.this) if isinstance(value, exp.Literal) and value.is_int else None


def top_n(task: Task, golds: Sequence[QueryResult]) -> list[Finding]:
    """A top N that returns fewer rows; where the task says fewer are expected (Task.fewer_rows_expected),
    one that returns none, unless an empty result is the task's answer: the list the question asks for
    is empty on this snapshot."""
    if task.result.empty_expected:
        return []
    fewer = task.fewer_rows_expected()
    out = []
    for k, (sql, got) in enumerate(zip(task.gold_sql, golds, strict=True)):
        n = limit_of(sql)
        if fewer and not got.rows:
            out.append(Finding(task.id, "top_n", f"gold #{k + 1} returns no row: none qualifies on this snapshot"))
        elif not fewer and n is not None and len(got.rows) < n:
            out.append(
                Finding(task.id, "top_n", f"gold #{k + 1} asks for the top {n} and returns {len(got.rows)} row(s)")
            )
    return out


def _number(v: Any) -> float | None:
    # Decimal: build.check_gold reads the driver's rows, whose numeric columns are not converted
    return float(v) if isinstance(v, int | float | Decimal) and not isinstance(v, bool) else None


def _pairs(columns: Sequence[str]) -> dict[str, tuple[int, int]]:
    """stem -> (earlier period's column, later period's column), in the order the stems first appear."""
    earlier: dict[str, int] = {}
    later: dict[str, int] = {}
    for i, name in enumerate(columns):
        m = PERIOD_COLUMN.match(name.lower())
        if m:
            period, stem = (m[1], m[2]) if m[1] else (m[4], m[3])
            (earlier if period in EARLIER else later).setdefault(stem, i)
    return {s: (earlier[s], later[s]) for s in sorted(earlier.keys() & later.keys(), key=earlier.__getitem__)}


def periods(
    stem: str, how: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]
) -> tuple[float | None, float | None, str] | None:
    """(earlier, later, what was read) for a measure of the gold; None: the gold has no such measure."""
    pairs = _pairs(columns)
    names = [c.lower() for c in columns]
    if how == "series" and stem in names and rows:
        before, after = _number(rows[0][names.index(stem)]), _number(rows[-1][names.index(stem)])
        return before, after, f"{stem} from the first to the last row"
    if stem in pairs or (stem == "*" and pairs):
        chosen = list(pairs.values()) if stem == "*" else [pairs[stem]]
        picked = rows[:1] if how == "first" else rows
        if any(_number(r[p[side]]) is None for r in picked for p in chosen for side in (0, 1)):
            return None, None, f"{stem} ({how} of {len(picked)} row(s))"
        before, after = (sum(_number(r[p[side]]) or 0.0 for r in picked for p in chosen) for side in (0, 1))
        return before, after, f"{'every prev/this pair' if stem == '*' else stem} ({how} of {len(picked)} row(s))"
    return None


def sigmas(before: float, after: float) -> float:
    """The change between two event counts in standard errors of chance (both Poisson)."""
    total = before + after
    return abs(after - before) / math.sqrt(total) if total > 0 else 0.0


def change(task: Task, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[Finding]:
    """An anomaly question without a stated premise (released before v7) asserts a change between two
    periods: the two must differ."""
    pairs = _pairs(columns)
    default = (next(iter(pairs)), "sum") if pairs else ("", "sum")
    stem, how = ASSERTED_CHANGE.get(task.provenance.template_id or "", default)
    got = periods(stem, how, columns, rows)
    if got is None:
        return [Finding(task.id, "change", "asserts a change, but the gold has no prev/this column pair to check")]
    before, after, what = got
    if before is None or after is None or math.isclose(before, after, rel_tol=1e-9, abs_tol=1e-9):
        same = f"{before:g} in both periods" if before is not None and after is not None else "NULL in a period"
        return [Finding(task.id, "change", f"asserts a change, but {what} is {same}")]
    return []


def stated(task: Task, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[Finding]:
    """The task's stated premise (models.Premise) on its first gold's result: each unmet part, with the
    numbers."""
    premise = task.premise
    if premise is None or premise.kind == "none":
        return []
    criterion = premise.describe()
    got = periods(premise.measure, premise.rows, columns, rows)
    if got is None:
        return [Finding(task.id, "premise", f"states {criterion}, but the gold has no such measure to check")]
    before, after, what = got
    if before is None or after is None:
        return [Finding(task.id, "premise", f"states {criterion}, but {what} is NULL in a period")]
    diff = after - before
    relative = abs(diff) / abs(before) if before else (math.inf if diff else 0.0)
    moved = f"{what} went from {before:g} to {after:g} ({diff:+g} {premise.unit}".rstrip()
    moved += f", {diff / before:+.1%})" if before else ")"
    unmet = []
    if (premise.direction == "down" and diff >= 0) or (premise.direction == "up" and diff <= 0):
        unmet.append(f"not {premise.direction}")
    if relative < premise.min_relative - 1e-9:
        unmet.append(f"under {premise.min_relative:.0%}")
    if abs(diff) < premise.min_absolute - 1e-9 or math.isclose(before, after, rel_tol=1e-9, abs_tol=1e-9):
        unmet.append(f"under {premise.min_absolute:g} {premise.unit}".rstrip() if premise.min_absolute else "no change")
    if premise.counts_events and (z := sigmas(before, after)) < CHANCE_SIGMAS:
        unmet.append(f"within chance ({z:.1f} < {CHANCE_SIGMAS:g} standard errors)")
    if unmet:
        return [Finding(task.id, "premise", f"states {criterion}, but {moved}: {', '.join(unmet)}")]
    return []


def all_zero(task: Task, rows: Sequence[Sequence[Any]]) -> list[Finding]:
    if ZERO_ANSWER_TAGS & set(task.tags):
        return []
    cells = [
        rows[p.row][p.col]
        for p in task.answer_points
        if p.kind == "number"
        and p.row is not None
        and p.col is not None
        and p.row < len(rows)
        and p.col < len(rows[p.row])
    ]
    if cells and all(_number(c) == 0 for c in cells):
        whole = all(_number(v) in (None, 0) for r in rows for v in r)
        where = "and so is every number of the gold" if whole else "(the gold has other numbers)"
        return [Finding(task.id, "all_zero", f"every number answer point ({len(cells)}) is 0 {where}")]
    return []


def same_answers(results: Iterable[tuple[Task, QueryResult]]) -> list[Finding]:
    """Two tasks of one template with the same gold result (the comparator's equality) test the same thing."""
    by_template: dict[str, list[tuple[Task, QueryResult]]] = defaultdict(list)
    for task, got in results:
        if task.provenance.template_id:
            by_template[task.provenance.template_id].append((task, got))
    out = []
    for template, group in by_template.items():
        for j, (b, got_b) in enumerate(group):
            for a, got_a in group[:j]:
                keys = order_key_columns(a.gold_sql[0], got_a.columns) if a.result.order_matters else None
                order, tol = a.result.order_matters, a.result.numeric_tolerance
                if got_a.columns == got_b.columns and match(
                    got_b.rows, got_a.rows, order_matters=order, rel_tol=tol, order_keys=keys
                ):
                    out.append(
                        Finding(
                            b.id,
                            "same_answer",
                            f"the same gold result as {a.id}, template {template} (the comparator's equality)",
                        )
                    )
                    break
    return out
