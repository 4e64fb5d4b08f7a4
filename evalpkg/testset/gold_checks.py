"""Does a task's gold hold on this snapshot? The one definition, asked by build (for each parameter
choice), validate (each release task), the refresh's release checks (each candidate in each reference
world) and adjudication (each arbitrated gold): every gold of every graded turn runs, answers (rows,
unless the task says the data decides how many, and not one row of NULLs), is decided by the data
(determinism), and returns the outputs its variants ask for."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Final, Literal

from evalpkg.sql.gold import GoldError, GoldSource
from evalpkg.testset import determinism
from evalpkg.testset.models import QuestionVariant, Task

ProblemCode = Literal["fails", "empty", "only_null", "nondeterministic", "undetermined", "outputs"]
# What the data decides rather than the task: under another key's date shifts a thin year may hold no row,
# a tie or an empty cell. A release makes these claims for the reference worlds, as it does for its traps.
DATA_DECIDED: Final = frozenset({"empty", "only_null", "nondeterministic", "undetermined"})


@dataclass(frozen=True)
class GoldProblem:
    code: ProblemCode
    task: str
    turn: int  # 0: the task's own gold; n: follow-up turn n's gold
    message: str
    gold: int | None = None  # which of the turn's golds (0-based), None: the task's outputs as a whole
    world: str = ""  # the reference world it was found in; empty: the current snapshot

    @property
    def data_decided(self) -> bool:
        return self.code in DATA_DECIDED

    def __str__(self) -> str:
        where = f" (follow-up turn {self.turn})" if self.turn else ""
        world = f" in the reference world {self.world}" if self.world else ""
        return f"{self.task}{where}: {self.message}{world}"


def check_golds(task: Task, golds: GoldSource, *, world: str = "") -> list[GoldProblem]:
    """Every problem of every gold of every graded turn of `task` (the turns' own golds included)."""
    found = [p for turn in task.graded_turns() for p in _turn_problems(task.turn_task(turn), turn, golds)]
    return [replace(p, world=world) for p in found] if world else found


def _turn_problems(task: Task, turn: int, golds: GoldSource) -> list[GoldProblem]:
    problems: list[GoldProblem] = []
    columns: list[list[str]] | None = []
    for k, sql in enumerate(task.gold_sql):

        def problem(code: ProblemCode, message: str, gold: int | None = k) -> GoldProblem:
            return GoldProblem(code, task.id, turn, message, gold)

        try:
            got = golds.result(sql)
        except GoldError as exc:
            problems.append(problem("fails", f"gold #{k + 1} fails: {exc}"))
            columns = None
            continue
        columns = None if columns is None else [*columns, got.columns]
        if not got.rows and not task.fewer_rows_expected():
            problems.append(
                problem(
                    "empty",
                    f"gold #{k + 1} returns no rows (neither result.empty_expected nor notes saying fewer rows "
                    "are expected)",
                )
            )
        if len(got.rows) == 1 and all(v is None for v in got.rows[0]):
            problems.append(problem("only_null", f"gold #{k + 1} returns only NULL: no number to check"))
        try:
            ordering, points = determinism.check(task, sql, got.rows, lambda probe: golds.result(probe).rows)
        except GoldError as exc:
            problems.append(problem("fails", f"the ORDER BY probe of gold #{k + 1} fails: {exc}"))
            continue
        problems += [problem("nondeterministic", f"nondeterministic gold #{k + 1}: {p}") for p in ordering]
        problems += [problem("undetermined", f"undetermined {p}") for p in points]
    problems += [GoldProblem("outputs", task.id, turn, _unprefixed(task, p)) for p in output_problems(task, columns)]
    return problems


def _unprefixed(task: Task, problem: str) -> str:
    """'st-x-001: output ...' -> 'output ...'; 'st-x-001 variant zh/plain: ...' -> 'variant zh/plain: ...'."""
    return problem.removeprefix(f"{task.id}: ").removeprefix(f"{task.id} ")


def output_problems(task: Task, columns: list[list[str]] | None = None) -> list[str]:
    """What a task's outputs and its variants' asks get wrong: an unknown output, an output no variant asks
    for, duplicates, a gold no variant admits; given each gold's result columns, a variant that no gold it
    admits answers (none returns every column it asks for) and a gold that answers no variant admitting it."""
    names = [o.name for o in task.outputs]
    problems = [f"{task.id}: output {n!r} is declared twice" for n, k in Counter(names).items() if k > 1]
    columns_used = Counter(o.column.lower() for o in task.outputs)
    problems += [f"{task.id}: column {c!r} carries two outputs" for c, k in columns_used.items() if k > 1]
    problems += [
        f"{_label(task, v)}: asks for unknown output {n!r}" for v in task.variants for n in v.asks if n not in names
    ]
    asked = {n for v in task.variants for n in (v.asks or names)}
    problems += [f"{task.id}: output {n!r} is asked for by no variant" for n in names if n not in asked]
    golds = range(len(task.gold_sql))
    admitted = [v.admits or list(golds) for v in task.variants]  # per variant, the golds it is graded against
    problems += [
        f"{task.id}: gold #{k + 1} is admitted by no variant" for k in golds if not any(k in a for a in admitted)
    ]
    if columns is None or not task.outputs:
        return problems
    returned = [{c.lower() for c in cols} for cols in columns]
    # missing[i][k]: the outputs variant i asks for that gold k does not return
    missing = [[[o for o in task.asked(v) if o.column.lower() not in r] for r in returned] for v in task.variants]
    for v, per_gold, admits in zip(task.variants, missing, admitted, strict=True):
        graded = [per_gold[k] for k in admits]
        if graded and all(graded):
            o = min(graded, key=len)[0]
            problems.append(
                f"{_label(task, v)}: asks for output {o.name!r} (column {o.column!r}), "
                "which the gold result does not return"
            )
    for k in range(len(returned)):
        admitting = [per_gold[k] for per_gold, admits in zip(missing, admitted, strict=True) if k in admits]
        if admitting and all(admitting):  # (a gold no variant admits is named above)
            problems.append(f"{task.id}: gold #{k + 1} returns the columns of no variant's asks")
    return problems


def _label(task: Task, v: QuestionVariant) -> str:
    return f"{task.id} variant {v.language.value}/{v.complexity.value}"
