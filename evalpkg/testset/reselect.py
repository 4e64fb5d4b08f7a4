"""`evalpkg testset reselect`: the next release with every tagged trap biting and every premise holding
in every reference world (evalpkg.testset.worlds).

Every candidate (each template task of the latest release, and other parameter choices of its
template) is checked in each world. A candidate is usable when, in every world, its gold is usable
(`build.check_gold`) and no premise fails. Per template the release keeps as many tasks as before:
usable candidates whose trap tags bite in every world first (its current tasks before new choices),
never two with the same answer in any world. A chosen task keeps only the trap tags that bite in
every world; the CHANGELOG says which it lost and why, and why each task that is not kept went.
Ticket tasks keep or lose tags the same way, or are dropped.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from evalpkg.errors import DataError
from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.sql.gold import agent_connection, gold_runner, snapshot_version
from evalpkg.testset import premises, release, traps, worlds
from evalpkg.testset.build import check_gold, instantiate, load_templates
from evalpkg.testset.models import ADMITS_FORMAT, TURN_GOLDS_FORMAT, QuestionVariant, Task
from evalpkg.testset.params import chosen, domains

if TYPE_CHECKING:
    from evalpkg.sql.executor import QueryResult

CANDIDATES_PER_TEMPLATE = 24  # other parameter choices tried per template, besides its current tasks
Key = tuple[str, tuple[tuple[str, str], ...]]  # (template id or ticket task id, parameters)


@dataclass
class Verdict:
    """One candidate over the worlds checked so far."""

    failures: list[str] = field(default_factory=list)  # unusable gold or a failed premise, with the world
    misses: Counter[str] = field(default_factory=Counter)  # trap tag -> worlds where it did not bite
    answers: list[QueryResult] = field(default_factory=list)  # the gold result in each world


@dataclass
class Candidate:
    group: str  # the template id, or a ticket task's id
    params: tuple[tuple[str, str], ...]
    task: Task
    previous: Task | None  # the source release's task with these parameters
    retired: str = ""  # why its parameters may no longer be used (Template.retired): never chosen

    @property
    def key(self) -> Key:
        return (self.group, self.params)


@dataclass
class Reselection:
    source: str
    worlds: tuple[worlds.World, ...]
    tasks: list[Task] = field(default_factory=list)
    changes: release.ChangeSet = field(default_factory=release.ChangeSet)
    joined: dict[str, int] = field(default_factory=dict)  # template added by this release -> its tasks

    def summary(self) -> str:
        kept = sum(1 for t in self.tasks if t.id not in self.changes.added)
        replacing = len(self.changes.added) - sum(self.joined.values())
        joined = (
            f" {sum(self.joined.values())} tasks from {len(self.joined)} templates new in this release."
            if self.joined
            else ""
        )
        return (
            f"Every tagged trap bites and every premise holds in each of {len(self.worlds)} reference worlds "
            f"({'; '.join(w.label() for w in self.worlds)}; built by `evalpkg testset reselect`): {len(self.tasks)} "
            f"tasks, {kept} kept from {self.source} ({len(self.changes.changed)} of them with a trap tag dropped), "
            f"{replacing} new parameter choices replacing {len(self.changes.removed)} tasks whose trap "
            "did not bite, whose premise failed, whose answer repeated another task's, whose template keeps fewer "
            "copies or whose parameters the clinical review withdrew (fasting glucose cut-offs are 5.6, 6.1 and "
            "7.0 mmol/L; 7.8 and 11.1 are the 2-hour and random-glucose ones)." + joined
        )


def reselect(
    settings: Settings,
    source: str,
    *,
    reference: tuple[worlds.World, ...] = worlds.WORLDS,
    per_template: int | None = None,
    progress: Progress = quiet,
) -> tuple[release.Release, Reselection]:
    """`per_template`: at most this many tasks per template (more shapes, fewer parameter copies); a
    template with no task in SOURCE (added after it, or left before) gets its count, within the same bound."""
    tasks_dir = settings.tasks_dir
    src = release.load_source(tasks_dir, source, "reselect from")
    with agent_connection(settings) as conn:
        snap = snapshot_version(conn)  # the user's snapshot, which the release notes name
    target = release.next_version(tasks_dir)
    joining = joining_templates(tasks_dir, src.tasks, target)
    verdicts: dict[Key, Verdict] = {}
    groups: dict[str, list[Candidate]] = {}
    for n, (world, scratch) in enumerate(worlds.each(settings, reference, progress=progress), 1):
        if not groups:
            groups = _candidates(scratch, src.tasks, joining)
        everyone = [c for group in groups.values() for c in group]
        _check_world(scratch, world, everyone, verdicts)
        usable = sum(not verdicts[c.key].failures for c in everyone)
        progress(f"world {n}/{len(reference)}: {usable} of {len(everyone)} candidates usable so far")
    plan = Reselection(source, reference)
    for candidates in groups.values():
        _choose(plan, candidates, verdicts, src.tasks, len(reference), joining, per_template)
    rel = release.write(tasks_dir, target, plan.tasks, snap, plan.changes)
    release.add_changelog_summary(tasks_dir, target, plan.summary())
    return rel, plan


def joining_templates(tasks_dir: Path, tasks: list[Task], target: str) -> dict[str, int]:
    """Templates that join the target release with their count: those it adds, and those an earlier release
    held that the source does not (they left when no reference world held their premises or traps, and return
    where the worlds now do), unless they left the test set for good. The others keep their tasks' number."""
    held = {t.provenance.template_id for t in tasks}
    # a template's task is <type prefix>-<template id>-<number>
    ever = {task_id.split("-", 1)[-1].rsplit("-", 1)[0] for task_id in release.first_released_in(tasks_dir)}
    return {
        t.id: t.count
        for t in load_templates().templates
        if not t.left and (t.since == target or (t.id in ever and t.id not in held))
    }


def _candidates(scratch: Settings, tasks: list[Task], joining: dict[str, int]) -> dict[str, list[Candidate]]:
    """Per template with tasks in the source, or joining: its current tasks' parameters first (a retired
    value marks one unusable, with the reason), then other choices in a fixed order; per ticket task:
    itself."""
    with agent_connection(scratch) as conn, conn.transaction():
        domain = domains(conn)
    groups: dict[str, list[Candidate]] = {}
    for t in load_templates().templates:
        current = {_params(task): task for task in tasks if task.provenance.template_id == t.id}
        if not current and t.id not in joining:
            continue
        combos = t.choices(domain)
        random.Random(f"reselect:{t.id}").shuffle(combos)
        by_params = {tuple(sorted((k, v.key) for k, v in c.items())): c for c in combos}
        for p in current:
            if p not in by_params:  # a retired value (or one this snapshot lacks): named, never chosen
                with suppress(DataError):
                    by_params[p] = chosen(domain, dict(p))
        order = [p for p in by_params if p in current] + [p for p in by_params if p not in current]
        order = order[: len(current) + CANDIDATES_PER_TEMPLATE]
        left = f"template {t.id} left the test set: {t.left}" if t.left else ""
        groups[t.id] = [
            Candidate(t.id, p, instantiate(t, by_params[p], 0), current.get(p), left or t.retired(by_params[p]))
            for p in order
        ]
    for task in tasks:
        if task.provenance.source == "ticket":
            groups[task.id] = [Candidate(task.id, (), task, task)]
    return groups


def _params(task: Task) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(task.provenance.params.items()))


def _check_world(
    scratch: Settings, world: worlds.World, candidates: list[Candidate], verdicts: dict[Key, Verdict]
) -> None:
    templates = {t.id: t for t in load_templates().templates}
    with gold_runner(scratch) as golds:
        for c in candidates:
            v = verdicts.setdefault(c.key, Verdict(failures=[c.retired] if c.retired else []))
            if v.failures:
                continue  # out already; a missed trap is still counted (its tag may be dropped)
            min_counts = templates[c.group].min_counts if c.group in templates else {}
            if reason := check_gold(golds, c.task, set(), min_counts):
                v.failures.append(f"{world.label()}: {reason}")
                continue
            v.failures += [f"{world.label()}: {f.line()}" for f in premises.check([c.task], golds.result)]
            # a kept task carries its arbitrated golds too: its traps must bite against every one
            released = c.task.model_copy(update={"gold_sql": c.previous.gold_sql}) if c.previous else c.task
            for o in traps.measure([released], golds):
                v.misses[o.tag] += o.status != "bites"
            if c.task.gold_sql:
                v.answers.append(golds.result(c.task.gold_sql[0]))


def _biting(c: Candidate, verdicts: dict[Key, Verdict]) -> list[str]:
    """The candidate's trap tags that bite in every world."""
    v = verdicts[c.key]
    return [t for t in c.task.tags if t in traps.TRAP_TAGS and not v.misses[t]]


def _choose(
    plan: Reselection,
    candidates: list[Candidate],
    verdicts: dict[Key, Verdict],
    source: list[Task],
    n_worlds: int,
    joining: dict[str, int],
    per_template: int | None,
) -> None:
    group = candidates[0].group
    current = [t for t in source if group in (t.provenance.template_id, t.id)]
    wanted = len(current) or joining.get(group, 0)
    if per_template is not None:
        wanted = min(wanted, per_template)
    if not current:
        plan.joined[group] = 0
    traps_of = [t for t in candidates[0].task.tags if t in traps.TRAP_TAGS]
    chosen = _pick(candidates, verdicts, wanted)
    next_number = max((int(t.id.rsplit("-", 1)[1]) for t in current), default=0) + 1
    kept: set[str] = set()
    for c in chosen:
        task, reworded, lost = _as_released(c, verdicts, traps_of, n_worlds)
        if c.previous is None:
            task = task.model_copy(update={"id": f"{task.id.rsplit('-', 1)[0]}-{next_number:03d}"})
            next_number += 1
        plan.tasks.append(task)
        if group in plan.joined:
            plan.joined[group] += 1
        if c.previous is None:
            params = ", ".join(f"{k}={v}" for k, v in c.params) or "no parameters"
            plan.changes.added[task.id] = f"template {group} with {params}" + (
                f" ({lost}: tag dropped)" if lost else ""
            )
            continue
        kept.add(task.id)
        said = [f"{lost}: tag dropped"] if lost else []
        if reworded:
            said.append("reworded as its template now asks")
        if said:
            plan.changes.changed[task.id] = "; ".join(said)
    capped = len(chosen) == wanted < len(current)
    for task in (t for t in current if t.id not in kept):
        plan.changes.removed[task.id] = _why_removed(task, candidates, verdicts, n_worlds, per_template, capped)


def _pick(candidates: list[Candidate], verdicts: dict[Key, Verdict], wanted: int) -> list[Candidate]:
    """Up to `wanted` usable candidates: most traps biting first, among equals the current tasks, then new
    choices in their fixed order; none that repeats the answer of one chosen before it."""
    usable = [c for c in candidates if not verdicts[c.key].failures]
    ranked = sorted(usable, key=lambda c: (-len(_biting(c, verdicts)), c.previous is None))
    chosen: list[Candidate] = []
    for c in ranked:
        if len(chosen) == wanted:
            break
        if not _repeats(c, chosen, verdicts):
            chosen.append(c)
    return chosen


def _as_released(
    c: Candidate, verdicts: dict[Key, Verdict], traps_of: Sequence[str], n_worlds: int
) -> tuple[Task, bool, str]:
    """The task as the new release holds it, whether it was reworded, and why trap tags were dropped ('' for
    none): a kept task asks and asserts what its template now does (checked in every world), and loses
    each tag whose trap did not bite in every world."""
    task = c.previous or c.task
    reworded = c.previous is not None and c.previous.variants != c.task.variants
    if c.previous is not None and (reworded or c.previous.premise != c.task.premise):
        variants = _admitting_kept_golds(c.task, task.gold_sql)
        update: dict[str, object] = {"premise": c.task.premise, "variants": variants}
        if c.task.premise is not None:
            update["format_version"] = max(task.format_version, TURN_GOLDS_FORMAT)
        if any(v.admits for v in variants):  # a wording names the golds it admits
            update["format_version"] = ADMITS_FORMAT
        task = Task.model_validate(task.model_copy(update=update).model_dump())
    lost = [t for t in traps_of if t not in _biting(c, verdicts)]
    why = "; ".join(
        f"the {t} trap did not bite in {verdicts[c.key].misses[t]} of {n_worlds} reference worlds" for t in lost
    )
    if lost:
        notes = traps.notes_with_dropped(task.maintenance_notes, why)
        task = task.model_copy(update={"tags": [t for t in task.tags if t not in lost], "maintenance_notes": notes})
    return task, reworded, why


def _admitting_kept_golds(rendered: Task, kept: list[str]) -> list[QuestionVariant]:
    """The template's wordings for a task that keeps its own golds: each admitted gold found by its text among
    the kept ones (their order or number may differ from the template's)."""
    variants = []
    for v in rendered.variants:
        if v.admits:
            wanted = [rendered.gold_sql[i] for i in v.admits]
            if missing := [sql for sql in wanted if sql not in kept]:
                raise DataError(
                    f"{rendered.id}: {v.language.value}/{v.complexity.value} admits a gold the kept task lacks: "
                    f"{missing[0][:80]}"
                )
            v = v.model_copy(update={"admits": [kept.index(sql) for sql in wanted]})
        variants.append(v)
    return variants


def _why_removed(
    task: Task,
    candidates: list[Candidate],
    verdicts: dict[Key, Verdict],
    n_worlds: int,
    per_template: int | None,
    capped: bool,
) -> str:
    mine = {c.params: c for c in candidates}.get(_params(task))
    if mine is not None and not verdicts[mine.key].failures and capped:
        return f"at most {per_template} tasks per template: more shapes, fewer copies"
    return _why_not(mine, verdicts, n_worlds)


def _repeats(c: Candidate, chosen: list[Candidate], verdicts: dict[Key, Verdict]) -> bool:
    """Its gold result equals a chosen task's in some world (the comparator's equality, as
    premises.same_answers)."""
    mine = verdicts[c.key].answers
    return any(
        premises.same_answers([(o.task, a), (c.task, b)])
        for o in chosen
        for a, b in zip(verdicts[o.key].answers, mine, strict=False)
    )


def _why_not(c: Candidate | None, verdicts: dict[Key, Verdict], n_worlds: int) -> str:
    if c is None:
        return "its parameters are not in the template's domain on this snapshot"
    v = verdicts[c.key]
    if v.failures:
        return v.failures[0]
    if missed := [t for t in c.task.tags if t in traps.TRAP_TAGS and v.misses[t]]:
        return (
            f"replaced by parameters where more of the template's traps bite (here the {missed[0]} trap did not "
            f"bite in {v.misses[missed[0]]} of {n_worlds} reference worlds)"
        )
    return "its answer equals another kept task's of the template in some reference world"
