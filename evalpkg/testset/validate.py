"""`evalpkg testset validate`: schema, manifest, uniqueness, coverage, and gold SQL on the snapshot."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from evalpkg.errors import DataError
from evalpkg.expectations import ValidationReport, load_suite, validate_frames
from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.sql import fingerprint
from evalpkg.sql.gold import GoldRunner, agent_connection, gold_runner, snapshot_version
from evalpkg.testset import premises, readings, release, traps, worlds
from evalpkg.testset.gold_checks import check_golds
from evalpkg.testset.models import Difficulty, Task, TaskType

if TYPE_CHECKING:
    import pandas as pd

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
    gold_findings: list[str] = field(default_factory=list)  # what the data decided (GoldProblem.data_decided)
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
            f"applicable): {bites or 'no trap tags'}; {len(self.gold_findings)} gold and {len(self.premise_findings)} "
            f"premise finding(s) ({held})"
        )

    def findings(self) -> list[str]:
        """Each gold the data leaves without rows, ties or undecided points, each tagged trap that does not bite
        (or cannot be checked) and each failed premise, one line each."""
        unbitten = [f"trap {o.line()}" for o in self.trap_outcomes if o.status != "bites"]
        return (
            [f"gold {g}" for g in self.gold_findings]
            + unbitten
            + [f"premise {f.line()}" for f in self.premise_findings]
        )


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


def validate(
    settings: Settings,
    version: str | None = None,
    *,
    min_tasks: int = MIN_TASKS,
    hold_findings: bool = False,
    progress: Progress = quiet,
) -> TestsetReport:
    """Every check on the current snapshot. Trap bites, premises and what a gold finds (rows, ties, answer
    points: GoldProblem.data_decided) depend on the data: they are problems only with ``hold_findings`` (a
    reference world) for a release from TRAP_BITE_REQUIRED_FROM on, and reported otherwise. A gold that
    fails or returns the wrong columns is a problem on any snapshot."""
    rel = release.load(settings.tasks_dir, version)  # schema + manifest: raises on the first bad file
    report = TestsetReport(rel.version, len(rel.tasks), held=hold_findings and traps.required(rel.version))
    report.problems += structural_problems(rel.tasks, min_tasks=min_tasks)
    report.problems += readings.problems(rel.tasks, rel.version)
    report.tabular = validate_tabular(settings, rel.tasks)
    report.problems += [
        f"GX {f.batch}: {f.expectation}({f.column or ''}) observed {f.observed}" for f in report.tabular.failures
    ]
    with agent_connection(settings) as conn:  # ServiceError here, not one failure per task
        report.snapshot_version = snapshot_version(conn)
    with gold_runner(settings) as golds:
        for i, task in enumerate(rel.tasks, 1):
            report.gold_queries += sum(len(task.turn_task(t).gold_sql) for t in task.graded_turns())
            found = check_golds(task, golds)
            report.nondeterministic_golds += len({(p.turn, p.gold) for p in found if p.code == "nondeterministic"})
            report.undetermined_points += sum(p.code == "undetermined" for p in found)
            path = rel.root / "tasks" / f"{task.id}.json"
            report.problems += [
                f"{path}: field gold_sql: {p}" if p.code == "fails" else str(p) for p in found if not p.data_decided
            ]
            report.gold_findings += [str(p) for p in found if p.data_decided]
            if i % 50 == 0:
                progress(f"checked {i}/{len(rel.tasks)} tasks")
        progress("running the trap mutations and premise checks")
        report.trap_outcomes, report.premise_findings = discrimination(golds, rel.tasks)
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
    """validate in each reference world, findings held (from TRAP_BITE_REQUIRED_FROM on); two worlds at a time."""
    in_world = partial(validate, version=version, hold_findings=True)
    return worlds.map_each(settings, in_world, reference, progress=progress)


def discrimination(golds: GoldRunner, tasks: list[Task]) -> tuple[list[traps.Outcome], list[premises.Finding]]:
    """Each tagged trap's mutation graded against its gold, and the premise findings, on the runner's snapshot."""
    return traps.measure(tasks, golds), premises.check(tasks, golds.result)


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
