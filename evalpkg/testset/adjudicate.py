"""`evalpkg testset adjudicate`: the next release with every task's review record naming both annotators,
the measured agreement and, where they disagreed, the arbitration; the outcomes applied (a fixed gold
replaces the old one, an alternative gold is added, a dropped task goes). Nothing is typed in: the
agreement comes from `testset annotate`, the outcomes from `testset review --arbitrate`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from evalpkg.errors import DataError
from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.sql import fingerprint
from evalpkg.sql.gold import agent_connection, gold_runner, snapshot_version
from evalpkg.testset import release, traps, worlds
from evalpkg.testset.annotate import ANNOTATIONS, AgreementFile, Decision, TaskAgreement, decisions
from evalpkg.testset.gold_checks import check_golds
from evalpkg.testset.models import Annotator, Review, Task


@dataclass
class Adjudication:
    source: str
    annotators: list[str]
    tasks: list[Task] = field(default_factory=list)
    changes: release.ChangeSet = field(default_factory=release.ChangeSet)
    agreements: list[float] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        n = len(self.agreements)
        full = sum(a == 1.0 for a in self.agreements)
        mean = sum(self.agreements) / n if n else 0.0
        applied = ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())) or "none"
        return (
            f"Second annotation of every {self.source} task by {', '.join(self.annotators)}, written from the "
            "colloquial and plain questions only (never the technical wording or the gold) and measured by "
            f"running both SQL on the snapshot with the scorer's comparator: before arbitration {full} of {n} "
            f"tasks ({full / n:.1%}) agree on every non-technical variant (mean per-variant agreement {mean:.3f}). "
            f"Arbitration of the {n - full} others: {applied}. Every task's review record names both annotators, "
            "its measured agreement and, where they disagreed, the arbitration with who decided and why. "
            f"{sum('tag dropped' in why for why in self.changes.changed.values())} task(s) lost a trap tag "
            "whose rewrite an added gold accepts in some reference world."
        )


def adjudicate(
    settings: Settings,
    source: str,
    *,
    reference: tuple[worlds.World, ...] = worlds.WORLDS,
    progress: Progress = quiet,
) -> tuple[release.Release, Adjudication]:
    tasks_dir = settings.tasks_dir
    src = release.load_source(tasks_dir, source, "adjudicate")
    measured = _agreements(tasks_dir, source)
    decided = decisions(tasks_dir)
    # each annotation covers the templates its annotator wrote for: a task takes the one that annotated it
    by_task = {t.task_id: (f.annotator, t) for f in measured for t in f.annotated()}
    if missing := [t.id for t in src.tasks if t.id not in by_task]:
        raise DataError(f"{len(missing)} task(s) of {source} have no second annotation; first: {missing[0]}")
    undecided = [tid for tid, (_, a) in by_task.items() if a.agreement < 1.0 and tid not in decided]
    if undecided:
        raise DataError(
            f"{len(undecided)} disagreement(s) without an arbitration; first: {undecided[0]} "
            "(`evalpkg testset review --arbitrate TASK --outcome ...`)"
        )
    plan = Adjudication(source, sorted({f.annotator.id for f in measured}))
    for task in src.tasks:
        annotator, agreement = by_task[task.id]
        decision = decided.get(task.id) if agreement.agreement < 1.0 else None
        plan.agreements.append(agreement.agreement)
        if decision:
            plan.outcomes[decision.outcome] = plan.outcomes.get(decision.outcome, 0) + 1
        _apply(plan, task, annotator, agreement, decision)
    before = src.by_id()
    regolded = [t for t in plan.tasks if t.gold_sql != before[t.id].gold_sql]
    _check_new_golds(settings, regolded, before)
    _drop_tags_that_stop_biting(settings, plan, regolded, reference, progress)
    progress(f"{len(plan.tasks)} tasks reviewed; {len(plan.changes.removed)} dropped by arbitration")
    target = release.next_version(tasks_dir)
    with agent_connection(settings) as conn:
        snap = snapshot_version(conn)
    rel = release.write(tasks_dir, target, plan.tasks, snap, plan.changes)
    release.add_changelog_summary(tasks_dir, target, plan.summary())
    return rel, plan


def _agreements(tasks_dir: Path, version: str) -> list[AgreementFile]:
    found = [
        AgreementFile.model_validate_json(p.read_text(encoding="utf-8"))
        for p in sorted((tasks_dir / ANNOTATIONS).glob("*.agreement.json"))
    ]
    if not (of_version := [f for f in found if f.version == version]):
        raise DataError(f"no second annotation of {version}: run `evalpkg testset annotate --file ...` first")
    return of_version


def _apply(
    plan: Adjudication, task: Task, annotator: Annotator, agreement: TaskAgreement, decision: Decision | None
) -> None:
    if decision and decision.outcome == "dropped":
        plan.changes.removed[task.id] = f"arbitration by {decision.by}: {decision.note}"
        return
    if decision and decision.outcome == "reworded":
        raise DataError(f"{task.id}: reworded: change the wording in its template first, then arbitrate again")
    gold = task.gold_sql
    if decision and decision.sql:
        # applied once: a task kept from a release that applied it already has this gold
        gold = (
            [decision.sql] if decision.outcome == "gold_fixed" else list(dict.fromkeys([*task.gold_sql, decision.sql]))
        )
    annotators = [a for a in task.review.annotators if a != annotator] + [annotator]
    arbitration = f"{decision.outcome} by {decision.by}: {decision.note}" if decision else None
    review = Review(annotators=annotators, agreement=agreement.agreement, arbitration=arbitration, status="approved")
    plan.tasks.append(task.model_copy(update={"gold_sql": gold, "review": review}))
    what = f"second annotation by {annotator.id}: agreement {agreement.agreement:.2f}"
    plan.changes.changed[task.id] = what + (f"; arbitration {arbitration}" if arbitration else "")


def _check_new_golds(settings: Settings, tasks: list[Task], before: dict[str, Task]) -> None:
    """A fixed or added gold must be one read-only query that runs, answers, is decided by the data
    and returns the task's outputs (the build's thinness margins are for drawing parameters, not this)."""
    with gold_runner(settings) as golds:
        for task in tasks:
            added = [s for s in task.gold_sql if s not in before[task.id].gold_sql]
            for sql in added:
                if not fingerprint.is_single_select(sql):
                    raise DataError(f"{task.id}: the arbitrated gold is not one read-only query")
            if added and (problems := check_golds(task.model_copy(update={"gold_sql": added}), golds)):
                raise DataError(f"{task.id}: the arbitrated gold cannot be used: {problems[0].message}")


def _drop_tags_that_stop_biting(
    settings: Settings,
    plan: Adjudication,
    regolded: list[Task],
    reference: tuple[worlds.World, ...],
    progress: Progress,
) -> None:
    """A second accepted gold can accept what a trap-blind rewrite returns: such a tag no longer holds in
    every reference world, so it goes, with the reason (as `reselect` drops it)."""
    if not regolded:
        return
    misses: dict[tuple[str, str], int] = {}
    for _, scratch in worlds.each(settings, reference, progress=progress):
        with gold_runner(scratch) as golds:
            for o in traps.measure(regolded, golds):
                misses[(o.task_id, o.tag)] = misses.get((o.task_id, o.tag), 0) + (o.status != "bites")
    for i, task in enumerate(plan.tasks):
        lost = [tag for tag in task.tags if misses.get((task.id, tag))]
        if not lost:
            continue
        why = "; ".join(
            f"with the added gold the {t} trap no longer changes the answer in {misses[(task.id, t)]} of "
            f"{len(reference)} reference worlds"
            for t in lost
        )
        plan.tasks[i] = task.model_copy(
            update={
                "tags": [t for t in task.tags if t not in lost],
                "maintenance_notes": f"{task.maintenance_notes} Tag(s) dropped: {why}.".strip(),
            }
        )
        plan.changes.changed[task.id] += f"; {why}: tag dropped"
