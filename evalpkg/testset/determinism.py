"""Is a gold's answer decided by the data alone?

The de-identification key decides pseudonyms and every patient's date shift, so it decides how ties
fall. A gold whose rows tie on its ORDER BY keys (inside the result or at its LIMIT cut), or an answer
point that names a cell the data does not decide, passes for some keys and fails for others. These
checks run the gold once more without its LIMIT, with its ordering keys as extra output columns, and
look at the ties on the current snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from evalpkg.grading.ties import order_keys
from evalpkg.sql.parse import DIALECT, parse_statement
from evalpkg.testset.models import Task

Row = Sequence[Any]
KEY_ALIAS = "__order_key_"


@dataclass(frozen=True)
class OrderProbe:
    """The gold without LIMIT/OFFSET, its ORDER BY keys appended as output columns where they are
    not outputs already."""

    sql: str
    width: int  # output columns of the gold itself
    keys: tuple[int, ...]  # positions of the ordering keys in the probe's rows
    limit: int | None
    offset: int


def _int_arg(node: exp.Expr | None) -> int | None:
    value = node.args.get("expression") if node is not None else None
    if isinstance(value, exp.Literal) and value.is_int:
        return int(value.this)
    return None


def order_probe(sql: str) -> OrderProbe | None:
    """None when the gold does not order its output or orders it in a way this cannot rewrite."""
    tree = parse_statement(sql).copy()
    order = tree.args.get("order")
    if order is None or not isinstance(tree, exp.Select):
        return None
    outputs = tree.expressions
    keys, extra = order_keys(tree, [e.alias_or_name.lower() for e in outputs], KEY_ALIAS)
    limit, offset = _int_arg(tree.args.get("limit")), _int_arg(tree.args.get("offset")) or 0
    if tree.args.get("limit") is not None and limit is None:
        return None  # LIMIT ALL or a computed limit: nothing to check at a cut
    tree.set("limit", None)
    tree.set("offset", None)
    tree.set("expressions", [*outputs, *extra])
    return OrderProbe(tree.sql(dialect=DIALECT), len(outputs), tuple(keys), limit, offset)


def _tie_groups(rows: Sequence[Row], keys: tuple[int, ...]) -> list[tuple[int, int]]:
    """[start, end) of each run of consecutive rows with equal ordering keys."""
    groups, start = [], 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or tuple(rows[i][k] for k in keys) != tuple(rows[start][k] for k in keys):
            groups.append((start, i))
            start = i
    return groups


def ordering_problems(probe: OrderProbe, probe_rows: Sequence[Row]) -> list[str]:
    """Ties that change the gold's result: rows that differ yet share their ordering keys, inside the
    returned rows or across the LIMIT cut."""
    end = len(probe_rows) if probe.limit is None else min(len(probe_rows), probe.offset + probe.limit)
    problems = []
    for start, stop in _tie_groups(probe_rows, probe.keys):
        if start >= end or stop <= probe.offset:
            continue
        outputs = {tuple(r[: probe.width]) for r in probe_rows[start:stop]}
        if len(outputs) < 2:
            continue  # identical rows: any order gives the same result
        tied = tuple(probe_rows[start][k] for k in probe.keys)
        where = (
            "at the LIMIT cut" if stop > end else "at the OFFSET cut" if start < probe.offset else "inside the result"
        )
        problems.append(f"rows {start + 1}-{stop} tie on the ORDER BY keys {tied} {where}")
        if len(problems) == 3:
            break
    return problems


def point_problems(task: Task, rows: Sequence[Row], probe: OrderProbe | None, probe_rows: Sequence[Row]) -> list[str]:
    """Number answer points must name a cell the data decides: it exists (or lies past the end of a list
    the data may shorten: absent here), is not NULL, and every row that could stand at that position
    carries the same value."""
    problems = []
    for n, point in enumerate(task.answer_points):
        if point.kind == "text" or point.row is None or point.col is None:
            continue
        where = f"answer_points[{n}] (row {point.row}, col {point.col})"
        if point.row >= len(rows) or point.col >= len(rows[point.row]):
            if point.row >= len(rows) and task.fewer_rows_expected():
                continue  # a shorter list on this snapshot: the point is absent, and the scorer leaves it out
            problems.append(f"{where}: the gold returns {len(rows)} row(s)")
            continue
        if rows[point.row][point.col] is None:
            problems.append(f"{where}: the cell is NULL")
            continue
        if probe is not None:
            start = probe.offset + point.row
            group = next(((a, b) for a, b in _tie_groups(probe_rows, probe.keys) if a <= start < b), (start, start + 1))
            candidates = [r[point.col] for r in probe_rows[group[0] : group[1]]]
        else:
            candidates = [r[point.col] for r in rows]  # no ORDER BY: any row may come first
        if len(set(candidates)) > 1:
            problems.append(f"{where}: the rows that may stand there hold {sorted(set(map(str, candidates)))[:4]}")
    return problems


def check(
    task: Task, sql: str, rows: Sequence[Row], run: Callable[[str], Sequence[Row]]
) -> tuple[list[str], list[str]]:
    """(ordering problems, answer-point problems) of one gold query whose result is ``rows``;
    ``run`` executes SQL the way gold SQL runs."""
    probe = order_probe(sql)
    probe_rows = run(probe.sql) if probe is not None else []
    ordering = ordering_problems(probe, probe_rows) if probe is not None else []
    return ordering, point_problems(task, rows, probe, probe_rows)
