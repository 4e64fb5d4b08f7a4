"""`evalpkg testset validate`: schema, manifest, uniqueness, coverage, and gold SQL on the snapshot."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalpkg.db import first_line
from evalpkg.errors import DataError
from evalpkg.expectations import ValidationReport, load_suite, validate_frames
from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.sql import fingerprint
from evalpkg.sql.executor import QueryFailed, QueryResult, ReadOnlyExecutor
from evalpkg.sql.guard import SqlRefused
from evalpkg.testset import determinism, premises, release, traps, worlds
from evalpkg.testset.gold import GOLD_TIMEOUT_MS, GoldError, agent_connection, run_gold, snapshot_version
from evalpkg.testset.models import Difficulty, QuestionVariant, Task, TaskType

if TYPE_CHECKING:
    import pandas as pd
    import psycopg

MIN_TASKS = 320


@dataclass
class TestsetReport:
    version: str
    tasks: int
    gold_queries: int = 0
    nondeterministic_golds: int = 0
    undetermined_points: int = 0
    snapshot_version: str = ""
    problems: list[str] = field(default_factory=list)
    tabular: ValidationReport | None = None
    trap_outcomes: list[traps.Outcome] = field(default_factory=list)
    premise_findings: list[premises.Finding] = field(default_factory=list)
    held: bool = False  # findings are problems: a reference world, and a release from TRAP_BITE_REQUIRED_FROM on

    def summary(self) -> str:
        state = "ok" if not self.problems else f"{len(self.problems)} problem(s)"
        gx = f"; {self.tabular.summary()}" if self.tabular else ""
        bites = ", ".join(f"{tag} {r.summary()}" for tag, r in traps.rates(self.trap_outcomes).items() if r.tasks)
        held = "failing" if self.held else "reported only: releases are held to them in the reference worlds"
        return (
            f"test set {self.version}: {self.tasks} tasks, {self.gold_queries} gold queries executed on "
            f"snapshot {self.snapshot_version} ({self.nondeterministic_golds} nondeterministic, "
            f"{self.undetermined_points} undetermined answer points): {state}{gx}; trap bite rate (bitten/"
            f"applicable): {bites or 'no trap tags'}; {len(self.premise_findings)} premise finding(s) ({held})"
        )

    def findings(self) -> list[str]:
        """Each tagged trap that does not bite (or cannot be checked) and each failed premise, one line each."""
        unbitten = [f"trap {o.line()}" for o in self.trap_outcomes if o.status != "bites"]
        return unbitten + [f"premise {f.line()}" for f in self.premise_findings]


def structural_problems(tasks: list[Task], *, min_tasks: int = MIN_TASKS) -> list[str]:
    problems = []
    ids = Counter(t.id for t in tasks)
    problems += [f"task id {tid} appears {n} times" for tid, n in ids.items() if n > 1]
    if len(tasks) < min_tasks:
        problems.append(f"{len(tasks)} tasks, fewer than {min_tasks}")
    cells = Counter((t.type, t.difficulty) for t in tasks)
    problems += [f"cell {ty.value} x {d.value} is empty" for ty in TaskType for d in Difficulty if not cells[(ty, d)]]
    owners: dict[tuple[str, tuple[str, ...]], str] = {}
    for t in tasks:
        # a follow-up dialogue may open with another task's question: it repeats that task only if its
        # follow-up golds are the same too
        followups = tuple(fingerprint.exact(t.turns[i].gold_sql[0]) for i in t.graded_turns()[1:])
        for sql in t.gold_sql:
            fp = (fingerprint.exact(sql), followups)
            if fp in owners and owners[fp] != t.id:
                problems.append(f"{t.id}: gold SQL has the same fingerprint as {owners[fp]}")
            owners.setdefault(fp, t.id)
            if not fingerprint.is_single_select(sql):
                problems.append(f"{t.id}: gold SQL is not one read-only query")
    return problems


def gold_columns(conn: psycopg.Connection, sql: str) -> list[str]:
    """The gold result's column names as PostgreSQL reports them, without fetching a row."""
    import psycopg

    try:
        with conn.transaction():
            conn.execute("set transaction read only")
            conn.execute(f"set local statement_timeout = {int(GOLD_TIMEOUT_MS)}")
            cur = conn.execute(f"select * from ({sql.strip().rstrip(';')}) as gold limit 0")  # SQL from task files
            return [d.name for d in cur.description or []]
    except psycopg.Error as exc:
        raise GoldError(first_line(exc)) from exc


def output_problems(task: Task, columns: list[list[str]] | None = None) -> list[str]:
    """What a task's outputs and its variants' asks get wrong: an unknown output, an output no variant asks
    for, duplicates; given each gold's result columns, a variant that no gold answers (none returns every
    column it asks for) and a gold that answers no variant."""
    names = [o.name for o in task.outputs]
    problems = [f"{task.id}: output {n!r} is declared twice" for n, k in Counter(names).items() if k > 1]
    columns_used = Counter(o.column.lower() for o in task.outputs)
    problems += [f"{task.id}: column {c!r} carries two outputs" for c, k in columns_used.items() if k > 1]
    problems += [
        f"{_label(task, v)}: asks for unknown output {n!r}" for v in task.variants for n in v.asks if n not in names
    ]
    asked = {n for v in task.variants for n in (v.asks or names)}
    problems += [f"{task.id}: output {n!r} is asked for by no variant" for n in names if n not in asked]
    if columns is None or not task.outputs:
        return problems
    returned = [{c.lower() for c in cols} for cols in columns]
    # missing[i][k]: the outputs variant i asks for that gold k does not return
    missing = [[[o for o in task.asked(v) if o.column.lower() not in r] for r in returned] for v in task.variants]
    for v, per_gold in zip(task.variants, missing, strict=True):
        if per_gold and all(per_gold):
            o = min(per_gold, key=len)[0]
            problems.append(
                f"{_label(task, v)}: asks for output {o.name!r} (column {o.column!r}), "
                "which the gold result does not return"
            )
    problems += [
        f"{task.id}: gold #{k + 1} returns the columns of no variant's asks"
        for k in range(len(returned))
        if all(per_gold[k] for per_gold in missing)
    ]
    return problems


def _label(task: Task, v: QuestionVariant) -> str:
    return f"{task.id} variant {v.language.value}/{v.complexity.value}"


def validate(
    settings: Settings,
    version: str | None = None,
    *,
    min_tasks: int = MIN_TASKS,
    hold_findings: bool = False,
    progress: Progress = quiet,
) -> TestsetReport:
    """Every check on the current snapshot. Trap bites and premises depend on the data: they are
    problems only with ``hold_findings`` (a reference world) for a release from TRAP_BITE_REQUIRED_FROM
    on, and reported otherwise."""
    rel = release.load(settings.tasks_dir, version)  # schema + manifest: raises on the first bad file
    report = TestsetReport(rel.version, len(rel.tasks), held=hold_findings and traps.required(rel.version))
    report.problems += structural_problems(rel.tasks, min_tasks=min_tasks)
    report.tabular = validate_tabular(settings, rel.tasks)
    report.problems += [
        f"GX {f.batch}: {f.expectation}({f.column or ''}) observed {f.observed}" for f in report.tabular.failures
    ]
    with agent_connection(settings) as conn:
        report.snapshot_version = snapshot_version(conn)
        # each task, and each follow-up with its own gold as a task of its own (its gold runs, declares its outputs)
        turns = [(i, whole.turn_task(t)) for i, whole in enumerate(rel.tasks, 1) for t in whole.graded_turns()]
        for i, task in turns:
            columns: list[list[str]] | None = []
            for sql in task.gold_sql:
                report.gold_queries += 1
                try:
                    rows = run_gold(conn, sql)
                    columns = None if columns is None else [*columns, gold_columns(conn, sql)]
                except GoldError as exc:
                    report.problems.append(f"{rel.root / 'tasks' / (task.id + '.json')}: field gold_sql: {exc}")
                    columns = None
                    continue
                # a list the data decides the length of may be empty on another snapshot: premises.top_n
                # reports that as a finding (held where the release must hold: a reference world)
                if not rows and not task.fewer_rows_expected():
                    report.problems.append(
                        f"{task.id}: gold SQL returned no rows (neither result.empty_expected nor notes saying "
                        "fewer rows are expected)"
                    )
                _check_determinism(report, conn, task, sql, rows)
            report.problems += output_problems(task, columns)
            if i % 50 == 0 and task is rel.tasks[i - 1]:
                progress(f"checked {i}/{len(rel.tasks)} tasks")
    progress("running the trap mutations and premise checks")
    _, report.trap_outcomes, report.premise_findings = discrimination(settings, rel.tasks)
    if report.held:
        report.problems += report.findings()
    return report


def validate_reference(
    settings: Settings,
    version: str | None = None,
    *,
    reference: tuple[worlds.World, ...] = worlds.WORLDS,
    progress: Progress = quiet,
) -> list[tuple[worlds.World, TestsetReport]]:
    """validate in each reference world, findings held (from TRAP_BITE_REQUIRED_FROM on)."""
    return [
        (world, validate(scratch, version, hold_findings=True, progress=progress))
        for world, scratch in worlds.each(settings, reference, progress=progress)
    ]


def discrimination(settings: Settings, tasks: list[Task]) -> tuple[str, list[traps.Outcome], list[premises.Finding]]:
    """(the snapshot, each tagged trap's mutation graded against its gold, the premise findings) on the
    current eval snapshot."""
    with agent_connection(settings) as conn:  # ServiceError here, not one failure per task
        snapshot = snapshot_version(conn)
    executor = gold_executor(settings)
    try:
        return snapshot, traps.measure(tasks, executor), premises.check(tasks, executor.run)
    finally:
        executor.close()


def gold_executor(settings: Settings) -> MemoExecutor:
    return MemoExecutor(settings.agent_url(), GOLD_TIMEOUT_MS)


class MemoExecutor(ReadOnlyExecutor):
    """The agents' read-only path, every row, each statement run once (golds are re-read per mutation)."""

    def __init__(self, url: str, timeout_ms: int) -> None:
        super().__init__(url, timeout_ms=timeout_ms, row_cap=None)
        self._memo: dict[str, QueryResult | QueryFailed | SqlRefused] = {}

    def run(self, sql: str, *, checked: bool = False) -> QueryResult:
        if sql not in self._memo:
            try:
                self._memo[sql] = super().run(sql, checked=checked)
            except (QueryFailed, SqlRefused) as exc:
                self._memo[sql] = exc
        got = self._memo[sql]
        if isinstance(got, Exception):
            raise got
        return got


def _check_determinism(
    report: TestsetReport, conn: psycopg.Connection, task: Task, sql: str, rows: list[tuple[Any, ...]]
) -> None:
    try:
        ordering, points = determinism.check(task, sql, rows, lambda probe: run_gold(conn, probe))
    except GoldError as exc:
        report.problems.append(f"{task.id}: the ORDER BY probe of a gold SQL failed: {exc}")
        return
    report.nondeterministic_golds += bool(ordering)
    report.undetermined_points += len(points)
    report.problems += [f"{task.id}: nondeterministic gold: {p}" for p in ordering]
    report.problems += [f"{task.id}: undetermined {p}" for p in points]


def validate_or_raise(settings: Settings, version: str | None = None, **kw: object) -> TestsetReport:
    return raise_on_problems(validate(settings, version, **kw))  # type: ignore[arg-type]


def raise_on_problems(report: TestsetReport) -> TestsetReport:
    if report.problems:
        raise DataError(f"{report.summary()}; first: {report.problems[0]}")
    return report


def stats(tasks: list[Task]) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {
        "cell": Counter(f"{t.type.value} x {t.difficulty.value}" for t in tasks),
        "type": Counter(t.type.value for t in tasks),
        "difficulty": Counter(t.difficulty.value for t in tasks),
        "tag": Counter(tag for t in tasks for tag in t.tags),
        "language": Counter(v.language.value for t in tasks for v in t.variants),
        "variants_per_task": Counter(str(len(t.variants)) for t in tasks),
        "source": Counter(t.provenance.source for t in tasks),
    }
    return out


def tabular_view(tasks: list[Task]) -> dict[str, pd.DataFrame]:
    """The release as tables for Great Expectations: one row per task, one per type x difficulty cell."""
    import pandas as pd

    rows = [
        {
            "id": t.id,
            "type": t.type.value,
            "difficulty": t.difficulty.value,
            "variants_zh": sum(v.language.value == "zh" for v in t.variants),
            "variants_en": sum(v.language.value == "en" for v in t.variants),
            "turns": len(t.turns),
            "expected_tool_calls": sum(len(turn.expected_tool_calls) for turn in t.turns),
            "tables": len(t.tables),
            "generator_version": t.provenance.generator_version,
            "gold_matches_answerable": t.answerable == bool(t.gold_sql),
            "slots_match_type": (t.type is TaskType.clarification) == bool(t.hidden_slots),
        }
        for t in tasks
    ]
    counts = Counter((t.type, t.difficulty) for t in tasks)
    cells = [{"type": ty.value, "difficulty": d.value, "tasks": counts[(ty, d)]} for ty in TaskType for d in Difficulty]
    return {"tasks": pd.DataFrame(rows), "cells": pd.DataFrame(cells)}


def validate_tabular(settings: Settings, tasks: list[Task]) -> ValidationReport:
    spec = load_suite(settings.expectations_dir / "testset.json")
    return validate_frames(spec, tabular_view(tasks))
