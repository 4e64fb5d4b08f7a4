"""A prediction's SQL against the task's golds on the same snapshot: the gold cache and
`execution_match`, graded on the columns the question variant asks for."""

from __future__ import annotations

from typing import Any

from evalpkg.errors import DataError
from evalpkg.grading.comparator import match, order_key_columns
from evalpkg.sql.executor import QueryFailed, ReadOnlyExecutor, jsonable
from evalpkg.sql.guard import SqlRefused
from evalpkg.testset.models import Complexity, Language, Task


class GoldCache:
    """Gold results, computed once per gold query on the run's snapshot."""

    def __init__(self, executor: ReadOnlyExecutor) -> None:
        self.executor = executor
        self._rows: dict[str, tuple[list[str], list[list[Any]]]] = {}

    def get(self, sql: str) -> tuple[list[str], list[list[Any]]]:
        if sql not in self._rows:
            result = self.executor.run(sql)
            if result.capped:  # agents' results stop at the same cap, so no answer could ever match
                raise DataError(f"a gold returns more than the {self.executor.row_cap} row fetch cap: {sql[:80]}")
            self._rows[sql] = (result.columns, result.rows)
        return self._rows[sql]


def _pinned(gold_columns: list[str], pred_columns: list[str]) -> dict[int, int]:
    """Gold column -> the one prediction column with the same name: a column labelled like a gold
    column claims its meaning, so two same-typed counts cannot trade places."""
    names = [c.lower() for c in pred_columns]
    return {j: names.index(c.lower()) for j, c in enumerate(gold_columns) if names.count(c.lower()) == 1}


def asked_columns(task: Task, language: str, complexity: str) -> list[str] | None:
    """The gold columns the instance's variant asks for (None: every gold column)."""
    try:
        return task.graded_columns(Language(language), Complexity(complexity))
    except (KeyError, ValueError):
        return None


def positions(columns: list[str], asked: list[str] | None) -> list[int] | None:
    """Where the asked columns are in a gold's result (all of them when asked is None); None where the
    gold lacks one: that gold does not answer this variant."""
    names = [c.lower() for c in columns]
    if asked is None:
        return list(range(len(columns)))
    wanted = [c.lower() for c in asked]
    return [names.index(c) for c in wanted] if all(c in names for c in wanted) else None


def _graded_view(
    rows: list[list[Any]], columns: list[str], keep: list[int], keys: list[int] | None
) -> tuple[list[list[Any]], list[str], list[int] | None]:
    """The gold as graded for a variant: only the columns it asks for. ORDER BY keys that are dropped leave
    the gold's row order itself as the order (keys None), which validation checked the data decides."""
    if keep == list(range(len(columns))):
        return rows, columns, keys
    kept_keys = [keep.index(k) for k in keys] if keys is not None and all(k in keep for k in keys) else None
    return [[r[j] for j in keep] for r in rows], [columns[j] for j in keep], kept_keys


def _unclaimed(
    pred: list[list[Any]] | None, pred_columns: list[str], columns: list[str], keep: list[int]
) -> tuple[list[list[Any]] | None, list[str]]:
    """The prediction without columns named like a gold column the variant does not ask for: such a column
    claims that meaning, so it cannot stand for an asked one."""
    asked = {columns[j].lower() for j in keep}
    other = {c.lower() for c in columns} - asked
    stay = [i for i, c in enumerate(pred_columns) if c.lower() not in other]
    if pred is None or len(stay) == len(pred_columns):
        return pred, pred_columns
    return [[r[i] for i in stay] for r in pred], [pred_columns[i] for i in stay]


def execution_match(
    task: Task, sql: str | None, gold: GoldCache, executor: ReadOnlyExecutor, asked: list[str] | None = None
) -> tuple[str, bool, list[list[Any]] | None, list[str]]:
    """(status of the agent's SQL re-run now, whether it matches a gold on the columns the variant asks
    for (asked; None: all), the gold rows answer points are read from: the matching gold's, else the
    first's that answers the variant, and that gold's columns)."""
    pred: list[list[Any]] | None = None
    pred_columns: list[str] = []
    capped = False
    status = "failure"
    if sql:
        try:
            result = executor.run(sql)
            pred = [[jsonable(v) for v in r] for r in result.rows]
            pred_columns, capped = result.columns, result.capped
            status = "success" if result.rows else "success_empty"
        except (QueryFailed, SqlRefused):
            pred = None
    first: tuple[list[list[Any]], list[str]] | None = None
    for gold_sql in task.gold_sql:
        columns, rows = gold.get(gold_sql)
        keep = positions(columns, asked)
        if keep is None:
            continue
        first = first or (rows, columns)
        keys = order_key_columns(gold_sql, columns) if task.result.order_matters else None
        graded, graded_columns, graded_keys = _graded_view(rows, columns, keep, keys)
        seen, seen_columns = _unclaimed(pred, pred_columns, columns, keep)
        if match(
            seen,
            graded,
            order_matters=task.result.order_matters,
            rel_tol=task.result.numeric_tolerance,
            order_keys=graded_keys,
            truncated=capped,  # a capped result is a sample, never a match
            pinned=_pinned(graded_columns, seen_columns),
        ):
            return status, True, rows, columns
    rows_read, columns_read = first if first is not None else (None, [])
    return status, False, rows_read, columns_read
