"""An independent reference grader, deliberately simpler than the comparator and sharing none of its rules:
same column order, rows sorted (in order where the task says order matters, ties on its keys in any order),
integers exact, other numbers within the task's tolerance. The suite (tests/pipeline/test_pipeline.py) and
benchmarks/random_keys.py check the scorer's verdict on each perturbed gold against it."""

from __future__ import annotations

import math
import re
from typing import Any

from evalpkg.errors import QueryError
from evalpkg.grading.execution import GoldCache
from evalpkg.testset.models import Complexity, Language, Task

# The perturbation agents whose defect is in the SQL (traps.perturb_sql): what the reference is asked about.
SQL_PERTURBATIONS = ("wrong_time_field", "dropped_null_handling", "wrong_column")


def _integer(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)  # rows are JSON values: a numeric is a float


def _reference_equal(
    a: list[tuple[Any, ...]], b: list[tuple[Any, ...]], rel_tol: float, ordered: bool, ties: list[int] | None = None
) -> bool:
    """A careful, independent reference: same column order (perturbations keep it), rows in order where
    the task says order matters (a ranking asked as names only) and sorted otherwise, integers exact,
    other numbers with the task's relative tolerance; NULL equals only NULL. `ties`: the tie group of
    each of b's rows (rows its ORDER BY leaves tied may come in any order; grading/ties.py says which
    rows tie and is tested on its own)."""

    def key(row: tuple[Any, ...]) -> tuple[str, ...]:
        return tuple("" if v is None else f"{v}" for v in row)

    def in_order(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        if not ordered:
            return sorted(rows, key=key)
        if ties is None:
            return rows
        return [r for _, r in sorted(zip(ties, rows, strict=True), key=lambda p: (p[0], key(p[1])))]

    if len(a) != len(b):
        return False
    for x, y in zip(in_order(a), in_order(b), strict=True):
        for u, v in zip(x, y, strict=True):
            if u is None or v is None or isinstance(u, str) or isinstance(v, str):
                if str(u) != str(v):
                    return False
            elif _integer(u) and _integer(v):  # counts and ids: exact, tolerance is for fractions
                if u != v:
                    return False
            elif not math.isclose(float(u), float(v), rel_tol=rel_tol, abs_tol=1e-9):
                return False
    return True


def _without_empty_groups(
    rows: list[tuple[Any, ...]], gold: list[tuple[Any, ...]], limited: bool
) -> list[tuple[Any, ...]]:
    """The rows without those of a group the gold does not list whose numbers are all 0 or NULL: a group the
    question covers with nothing in it (the department with no stay that a LEFT JOIN lists with 0), which
    a grader lets an answer add or leave out (docs/scoring.md), except in a top N (a LIMIT keeps its N)."""

    def labels(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(v for v in row if isinstance(v, str))

    def empty(row: tuple[Any, ...]) -> bool:
        numbers = [v for v in row if not isinstance(v, str)]
        return bool(numbers) and all(v is None or v == 0 for v in numbers)

    listed = {labels(r) for r in gold}
    if limited or len(rows) <= len(gold):
        return rows
    return [r for r in rows if not (empty(r) and labels(r) not in listed)]


def _project(columns: list[str], rows: list[Any], asked: list[str] | None) -> list[tuple[Any, ...]] | None:
    if asked is None:
        return [tuple(r) for r in rows]
    names = [c.lower() for c in columns]
    if not all(c.lower() in names for c in asked):
        return None
    keep = [names.index(c.lower()) for c in asked]
    return [tuple(row[i] for i in keep) for row in rows]


def reference_reads(
    cache: GoldCache, task: Task, changed: str
) -> tuple[bool, tuple[list[tuple[Any, ...]] | None, list[list[tuple[Any, ...]] | None]]]:
    """Whether the independent reference calls `changed` (a perturbed gold) right for the zh/plain variant, the
    one the perturbation runs, and what it read: the perturbed rows and each gold's (those the variant admits)."""
    task = task.graded_for(Language.zh, Complexity.plain)
    asked = task.graded_columns(Language.zh, Complexity.plain)
    try:
        ran = cache.golds.result(changed)
    except QueryError:
        ran = None
    perturbed = None if ran is None else _project(ran.columns, ran.rows, asked)
    tol, ordered = task.result.numeric_tolerance, task.result.order_matters
    # each gold, and where its LIMIT cuts a tie each choice of the tied rows, with its tie groups
    choices = [(cache.get(g)[0], o) for g in task.gold_sql for o in cache.acceptable(g, ordered)]
    golds = [(_project(columns, o.rows, asked), o.groups) for columns, o in choices]
    limited = any(re.search(r"\blimit\b", g, re.IGNORECASE) for g in task.gold_sql)
    right = perturbed is not None and any(
        g is not None and _reference_equal(_without_empty_groups(perturbed, g, limited), g, tol, ordered, groups)
        for g, groups in golds
    )
    return right, (perturbed, [g for g, _ in golds])
