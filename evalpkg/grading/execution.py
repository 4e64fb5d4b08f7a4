"""A prediction's SQL against the task's golds on the same snapshot: the gold cache and
`execution_match`, graded on the columns the question variant asks for."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from evalpkg.errors import DataError, QueryError
from evalpkg.grading import ties
from evalpkg.grading.comparator import match, order_key_columns, tie_groups
from evalpkg.grading.labels import Labels
from evalpkg.grading.pivot import relayouts
from evalpkg.grading.relabel import relabelled
from evalpkg.grading.summary import additive_columns, unchecked_columns, without_summary_rows
from evalpkg.grading.values import Row
from evalpkg.sql.executor import ReadOnlyExecutor, jsonable, stated_decimals
from evalpkg.sql.gold import GoldRunner
from evalpkg.sql.vocabulary import RATE
from evalpkg.testset.models import Complexity, Language, Task

KEPT_PREDICTION_ROWS = 1000  # a re-run prediction is kept for the next instance that sends it up to this size


class GoldCache:
    """Gold results on the run's snapshot (each gold query run once, by its GoldRunner), and the golds a grader
    accepts in their place (tie orders, the tied rows a LIMIT may keep); predictions run on the same executor."""

    def __init__(self, golds: GoldRunner) -> None:
        self.golds = golds
        self.executor = golds.executor
        self._acceptable: dict[tuple[str, bool], list[ties.Ordered]] = {}
        self._labels: Labels | None = None
        self._predictions: dict[str, Prediction] = {}
        self._additive: dict[str, list[int]] = {}

    @property
    def labels(self) -> Labels:
        """What the snapshot's labels mean (codes and their names, periods): read once, when a pivot needs them."""
        if self._labels is None:
            self._labels = Labels.from_executor(self.executor)
        return self._labels

    def prediction(self, sql: str | None) -> Prediction:
        """An agent's SQL re-run on this snapshot, once per distinct query (the variants and repeats of a
        task often send the same one); large results are not kept."""
        if sql is not None and sql in self._predictions:
            return self._predictions[sql]
        if sql is not None and self.golds.ran(sql):  # a gold's own text, a mutation: what it returned here
            got = self.golds.result(sql)
            return prediction_of(got.columns, got.rows, decimals=got.decimals)  # a gold is never capped
        pred = run_prediction(sql, self.executor)
        if sql is not None and len(pred.rows or ()) <= KEPT_PREDICTION_ROWS:
            self._predictions[sql] = pred
        return pred

    def get(self, sql: str) -> tuple[list[str], list[list[Any]]]:
        got = self.golds.result(sql)
        return got.columns, got.rows

    def decimals(self, sql: str) -> list[int | None]:
        """Per gold column, the decimals its own SQL rounded to (round(avg(zyts), 1): one), None where not known."""
        got = self.golds.result(sql)
        return got.decimals or [None] * len(got.columns)

    def additive(self, sql: str) -> list[int]:
        """The gold's columns whose total is the sum of its rows (summary.additive_columns), read once."""
        if sql not in self._additive:
            self._additive[sql] = additive_columns(sql, self.get(sql)[0])
        return self._additive[sql]

    def acceptable(self, sql: str, order_matters: bool) -> list[ties.Ordered]:
        """The gold's rows with their tie groups (groups None where order does not matter), and where its
        LIMIT cuts through a tie, every choice of the tied rows."""
        key = (sql, order_matters)
        if key not in self._acceptable:
            self._acceptable[key] = self._acceptable_now(sql, order_matters)
        return self._acceptable[key]

    def _acceptable_now(self, sql: str, order_matters: bool) -> list[ties.Ordered]:
        columns, rows = self.get(sql)
        rewrite = ties.keyed(sql, columns)
        found = None
        if rewrite is not None and (order_matters or rewrite.limit is not None):
            try:
                found = ties.acceptable(rows, len(columns), rewrite, lambda q: self.golds.result(q).rows)
            except DataError:
                found = None  # the rewrite did not run here: the gold as it is
        if found is None:
            keys = order_key_columns(sql, columns) if order_matters else None
            groups = tie_groups([tuple(r[k] for k in keys) for r in rows]) if keys else list(range(len(rows)))
            found = [ties.Ordered(rows, groups)]  # unknown keys: every row in its place
        return found if order_matters else [ties.Ordered(o.rows, None) for o in found]


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


def _graded_view(rows: list[list[Any]], columns: list[str], keep: list[int]) -> tuple[list[list[Any]], list[str]]:
    """The gold as graded for a variant: only the columns it asks for."""
    if keep == list(range(len(columns))):
        return rows, columns
    return [[r[j] for j in keep] for r in rows], [columns[j] for j in keep]


def rate_columns(task: Task, columns: list[str]) -> list[int]:
    """The columns whose name, or whose output's meaning, says rate or percentage."""
    meanings = {o.column.lower(): " ".join([o.name, *o.meaning.values()]) for o in task.outputs}
    return [j for j, c in enumerate(columns) if RATE.search(f"{c} {meanings.get(c.lower(), '')}")]


def _unclaimed(pred: Prediction, columns: list[str], keep: list[int]) -> Prediction:
    """The prediction without columns named like a gold column the variant does not ask for: such a column
    claims that meaning, so it cannot stand for an asked one."""
    asked = {columns[j].lower() for j in keep}
    other = {c.lower() for c in columns} - asked
    stay = [i for i, c in enumerate(pred.columns) if c.lower() not in other]
    if pred.rows is None or len(stay) == len(pred.columns):
        return pred
    rows = [[r[i] for i in stay] for r in pred.rows]
    decimals = [pred.decimals[i] for i in stay] if pred.decimals else []
    return Prediction(pred.status, rows, [pred.columns[i] for i in stay], pred.capped, decimals)


@dataclass(frozen=True)
class Prediction:
    """An agent's final SQL as re-run at scoring time."""

    status: str  # success | success_empty | failure
    rows: list[list[Any]] | None = None
    columns: list[str] = field(default_factory=list)
    capped: bool = False  # a sample of a larger result: never a match
    decimals: list[int | None] = field(default_factory=list)  # per column, as its query wrote them


def run_prediction(sql: str | None, executor: ReadOnlyExecutor) -> Prediction:
    if not sql:
        return Prediction("failure")
    try:
        result = executor.run(sql)
    except QueryError:
        return Prediction("failure")
    return prediction_of(result.columns, result.rows, capped=result.capped, decimals=result.decimals)


def prediction_of(
    columns: list[str], rows: list[Any], *, capped: bool = False, decimals: list[int | None] | None = None
) -> Prediction:
    """A query's result as the scorer reads an agent's: JSON values, the decimals its numerics were written
    with kept apart (given, or read from the values), empty told apart from failed."""
    kept = [[jsonable(v) for v in r] for r in rows]
    stated = stated_decimals(rows) if decimals is None else decimals
    return Prediction("success" if kept else "success_empty", kept, columns, capped, stated)


def execution_match(
    task: Task, sql: str | None, gold: GoldCache, asked: list[str] | None = None
) -> tuple[str, bool, list[list[Any]] | None, list[str]]:
    """(status of the agent's SQL re-run now, whether it matches a gold on the columns the variant asks
    for (asked; None: all), the gold rows answer points are read from: the matching gold's, else the
    first's that answers the variant, and that gold's columns)."""
    for gold_sql in task.gold_sql:  # gold_match runs each anyway: first, so a gold's own text is not run twice
        gold.get(gold_sql)
    pred = gold.prediction(sql)
    return (pred.status, *gold_match(task, pred, gold, asked))


def gold_match(
    task: Task, pred: Prediction, gold: GoldCache, asked: list[str] | None = None
) -> tuple[bool, list[list[Any]] | None, list[str]]:
    """Whether the prediction matches a gold of the task, and the gold rows and columns answer points
    are read from (see execution_match)."""
    first: tuple[list[list[Any]], list[str]] | None = None
    for gold_sql in task.gold_sql:
        columns, rows = gold.get(gold_sql)
        keep = positions(columns, asked)
        if keep is None:
            continue
        first = first or (rows, columns)
        if pred.rows is None or pred.capped:
            continue
        seen = _unclaimed(pred, columns, keep)
        assert seen.rows is not None
        kept = _Kept(gold.decimals(gold_sql), gold.additive(gold_sql), keep)
        for ordered in gold.acceptable(gold_sql, task.result.order_matters):
            graded, graded_columns = _graded_view(ordered.rows, columns, keep)
            if _matches(task, seen, graded, graded_columns, ordered.groups, kept):
                return True, ordered.rows, columns
            named = _relabelled(task, seen, graded, graded_columns, gold, gold_sql, kept)
            if named is not None and _matches(
                task, replace(seen, rows=named), graded, graded_columns, ordered.groups, kept
            ):
                return True, ordered.rows, columns
        # a pivot compares no row order, but where a LIMIT cuts a tie the rows themselves are a choice
        for ordered in gold.acceptable(gold_sql, task.result.order_matters):
            graded, graded_columns = _graded_view(ordered.rows, columns, keep)
            if _pivot_matches(task, seen.rows, seen.columns, graded, graded_columns, gold.labels):
                return True, ordered.rows, columns
    rows_read, columns_read = first if first is not None else (None, [])
    return False, rows_read, columns_read


def _relabelled(
    task: Task,
    seen: Prediction,
    graded: list[list[Any]],
    graded_columns: list[str],
    gold: GoldCache,
    gold_sql: str,
    kept: _Kept,
) -> list[list[Any]] | None:
    """The prediction's rows labelled as the gold labels them; where its summary rows (a total the gold does
    not have) stop that, the rows without them, as _matches would set them aside."""
    assert seen.rows is not None
    limited = ties.has_limit(gold_sql)
    named = relabelled(seen.rows, seen.columns, graded, graded_columns, gold.labels, limited=limited)
    if named is not None or (detailed := _detail_rows(task, seen.rows, graded, kept)) is None:
        return named
    return relabelled(detailed, seen.columns, graded, graded_columns, gold.labels, limited=limited)


def _detail_rows(task: Task, rows: list[list[Any]], gold: list[list[Any]], kept: _Kept) -> list[Row] | None:
    """The prediction's rows without the summary rows the gold does not have, where that leaves as many rows
    as the gold has; None where there are none to set aside."""
    if len(rows) <= len(gold) or without_summary_rows(gold) is not None:
        return None
    free = unchecked_columns(rows, kept.checked(gold))
    detailed = without_summary_rows(rows, task.result.numeric_tolerance, free=free)
    return detailed if detailed is not None and len(detailed) == len(gold) else None


@dataclass(frozen=True)
class _Kept:
    """What the gold's SQL says beyond its rows, per column of the gold as graded."""

    decimals: list[int | None]  # per gold column (all of them): the decimals its SQL rounded to
    additive: list[int]  # gold columns (all of them) whose total is the sum of the rows
    keep: list[int]  # the gold columns graded

    def rounded_to(self) -> list[int | None]:
        return [self.decimals[j] if j < len(self.decimals) else None for j in self.keep]

    def checked(self, gold: list[list[Any]]) -> list[list[Any]]:
        """The graded gold's columns whose total it can check, as columns."""
        return [[r[k] for r in gold] for k, j in enumerate(self.keep) if j in self.additive]


def _matches(
    task: Task,
    pred: Prediction,
    gold: list[list[Any]],
    gold_columns: list[str],
    groups: list[int] | None,
    kept: _Kept,
) -> bool:
    """The prediction as laid out, then without the summary rows the gold does not have."""
    assert pred.rows is not None
    options: dict[str, Any] = {
        "order_matters": groups is not None,
        "groups": groups,
        "rel_tol": task.result.numeric_tolerance,
        "rates": rate_columns(task, gold_columns),
        "pinned": _pinned(gold_columns, pred.columns),
        "stated": pred.decimals,
        "gold_stated": kept.rounded_to(),
    }
    if match(pred.rows, gold, **options):
        return True
    detailed = _detail_rows(task, pred.rows, gold, kept)
    return detailed is not None and match(detailed, gold, **options)


def output_names(task: Task, columns: list[str]) -> list[list[str]]:
    """What each gold column is known by besides its name: its output's name and meanings."""
    by_column = {o.column.lower(): o for o in task.outputs}
    return [[o.name, *o.meaning.values()] if (o := by_column.get(c.lower())) else [] for c in columns]


def _pivot_matches(
    task: Task,
    pred: list[list[Any]],
    pred_columns: list[str],
    gold: list[list[Any]],
    gold_columns: list[str],
    labels: Labels,
) -> bool:
    """The long form of a wide gold, or the wide form of a long one, where labels name the outputs (row order
    is not compared after a pivot)."""
    rates = set(rate_columns(task, gold_columns))
    for r in relayouts(pred, pred_columns, gold, gold_columns, output_names(task, gold_columns), labels):
        chosen = [k for k, j in enumerate(r.sources) if j in rates]
        if match(r.pred, r.gold, pinned=r.pinned, rel_tol=task.result.numeric_tolerance, rates=chosen):
            return True
    return False
