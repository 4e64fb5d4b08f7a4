"""`evalpkg testset reselect`: the next release with every tagged trap biting and every premise holding,
in every reference world.

A trap that bites on one snapshot can miss on another: the de-identification key shifts each
patient's dates, so which rows a month or a year holds changes with the key, and a thin slice may
hold no trap row at all. So every candidate (each template task of the latest release, and other
parameter choices of its template) is checked in WORLDS, built one after the other in a scratch
cluster (the README's world under several fixed keys, another seed, another size), never in the
user's own. A candidate is kept when, in every world, its gold is usable (`build.check_gold`), no
premise fails and each trap tag bites. Per template the release keeps its tasks that pass and
replaces the others with passing parameter choices whose answers differ; a tag that cannot bite for
enough choices is dropped from the template's tasks, with the reason. Ticket tasks keep or lose tags
the same way, or are dropped. Every change goes to the CHANGELOG with its reason.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evalpkg.errors import DataError
from evalpkg.progress import Progress, quiet
from evalpkg.settings import PROD_DB, Settings
from evalpkg.testset import premises, release, traps
from evalpkg.testset.build import Template, check_gold, instantiate, load_templates
from evalpkg.testset.gold import agent_connection, snapshot_version
from evalpkg.testset.params import Value, combinations, domains
from evalpkg.testset.validate import gold_executor

if TYPE_CHECKING:
    from evalpkg.sql.executor import QueryResult
    from evalpkg.testset.models import Task

CANDIDATES_PER_TEMPLATE = 24  # other parameter choices tried per template, besides its current tasks
Key = tuple[str, tuple[tuple[str, str], ...]]  # (template id or ticket task id, parameters)


@dataclass(frozen=True)
class World:
    patients: int
    seed: int
    key: int  # which fixed key: worlds are the same every time

    def label(self) -> str:
        return f"{self.patients} patients, seed {self.seed}, key #{self.key}"

    def key_bytes(self) -> bytes:
        return hashlib.sha256(f"evalpkg reference world key {self.key}".encode()).digest()


WORLDS: tuple[World, ...] = (
    *(World(2000, 7, k) for k in range(4)),  # the README's world (and the tests') under four keys
    World(2000, 8, 4),
    World(3000, 5, 5),
)


@dataclass
class Verdict:
    """One candidate over the worlds checked so far."""

    failures: list[str] = field(default_factory=list)  # unusable gold or a failed premise, with the world
    misses: Counter[str] = field(default_factory=Counter)  # trap tag -> worlds where it did not bite
    answer: QueryResult | None = None  # the gold result in the first world, to tell answers apart


@dataclass
class Candidate:
    group: str  # the template id, or a ticket task's id
    params: tuple[tuple[str, str], ...]
    task: Task
    previous: Task | None  # the source release's task with these parameters

    @property
    def key(self) -> Key:
        return (self.group, self.params)


@dataclass
class Reselection:
    source: str
    worlds: tuple[World, ...]
    tasks: list[Task] = field(default_factory=list)
    changes: release.ChangeSet = field(default_factory=release.ChangeSet)
    dropped_tags: dict[str, dict[str, str]] = field(default_factory=dict)  # group -> tag -> why

    def summary(self) -> str:
        kept = sum(1 for t in self.tasks if t.id not in self.changes.added)
        return (
            f"Every tagged trap bites and every premise holds in each of {len(self.worlds)} reference worlds "
            f"({'; '.join(w.label() for w in self.worlds)}; built by `evalpkg testset reselect`): {len(self.tasks)} "
            f"tasks, {kept} kept from {self.source} ({len(self.changes.changed)} of them with a trap tag dropped), "
            f"{len(self.changes.added)} new parameter choices replacing {len(self.changes.removed)} tasks whose trap "
            "did not bite, whose premise failed, whose answer repeated another task's or whose parameters the "
            "clinical review withdrew (fasting glucose cut-offs are 5.6, 6.1 and 7.0 mmol/L; 7.8 and 11.1 are the "
            "2-hour and random-glucose ones). The world itself now carries every documented trap in every year."
        )


def reselect(
    settings: Settings, source: str, *, worlds: tuple[World, ...] = WORLDS, progress: Progress = quiet
) -> tuple[release.Release, Reselection]:
    tasks_dir = settings.tasks_dir
    if source != (latest := release.latest(tasks_dir)):
        raise DataError(f"--from {source}: reselect from the latest release ({latest})")
    src = release.load(tasks_dir, source)
    with agent_connection(settings) as conn:
        snap = snapshot_version(conn)  # the user's snapshot, which the release notes name
    verdicts: dict[Key, Verdict] = {}
    groups: dict[str, list[Candidate]] = {}
    for n, (world, scratch) in enumerate(_worlds(worlds, progress), 1):
        if not groups:
            groups = _candidates(scratch, src.tasks)
        everyone = [c for group in groups.values() for c in group]
        _check_world(scratch, world, everyone, verdicts, first=n == 1)
        progress(f"world {n}/{len(worlds)} ({world.label()}): {sum(_passes(verdicts[c.key]) for c in everyone)} "
                 f"of {len(everyone)} candidates pass so far")  # fmt: skip
    plan = Reselection(source, worlds)
    templates = {t.id: t for t in load_templates().templates}
    for group, candidates in groups.items():
        _choose(plan, templates.get(group), candidates, verdicts, src.tasks, len(worlds))
    target = release.next_version(tasks_dir)
    rel = release.write(tasks_dir, target, plan.tasks, snap, plan.changes)
    release.add_changelog_summary(tasks_dir, target, plan.summary())
    return rel, plan


def _worlds(worlds: tuple[World, ...], progress: Progress) -> Iterator[tuple[World, Settings]]:
    from evalpkg.prod.generator import generate
    from evalpkg.services.stack import scratch_cluster
    from evalpkg.sync import bootstrap
    from evalpkg.sync.runner import run_sync

    with scratch_cluster() as scratch:
        made: tuple[int, int] | None = None
        for world in worlds:
            progress(f"building world {world.label()}")
            if made != (world.patients, world.seed):
                generate(scratch.db_url(PROD_DB), world.patients, world.seed)
                made = (world.patients, world.seed)
            bootstrap.set_key(scratch, world.key_bytes(), replace=True)
            run_sync(scratch, full_refresh=True, validate=False)
            yield world, scratch


def _candidates(scratch: Settings, tasks: list[Task]) -> dict[str, list[Candidate]]:
    """Per template: its current tasks' parameters first, then other choices in a fixed order; per
    ticket task: itself. Parameters the template no longer offers are not candidates."""
    with agent_connection(scratch) as conn, conn.transaction():
        domain = domains(conn)
    groups: dict[str, list[Candidate]] = {}
    for t in load_templates().templates:
        current = {_params(task): task for task in tasks if task.provenance.template_id == t.id}
        combos = combinations(domain, t.params)
        random.Random(f"reselect:{t.id}").shuffle(combos)
        by_params = {tuple(sorted((k, v.key) for k, v in c.items())): c for c in combos}
        order = [p for p in by_params if p in current] + [p for p in by_params if p not in current]
        order = order[: len(current) + CANDIDATES_PER_TEMPLATE]
        groups[t.id] = [Candidate(t.id, p, _instantiate(t, by_params[p]), current.get(p)) for p in order]
    for task in tasks:
        if task.provenance.source == "ticket":
            groups[task.id] = [Candidate(task.id, (), task, task)]
    return groups


def _params(task: Task) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(task.provenance.params.items()))


def _instantiate(t: Template, combo: dict[str, Value]) -> Task:
    return instantiate(t, combo, 0)  # numbered when chosen


def _check_world(
    scratch: Settings, world: World, candidates: list[Candidate], verdicts: dict[Key, Verdict], *, first: bool
) -> None:
    templates = {t.id: t for t in load_templates().templates}
    executor = gold_executor(scratch)
    try:
        with agent_connection(scratch) as conn:
            for c in candidates:
                v = verdicts.setdefault(c.key, Verdict())
                if v.failures:
                    continue  # out already; a missed trap is still counted (its tag may be dropped)
                min_counts = templates[c.group].min_counts if c.group in templates else {}
                if reason := check_gold(conn, c.task, set(), min_counts):
                    v.failures.append(f"{world.label()}: {reason}")
                    continue
                v.failures += [f"{world.label()}: {f.line()}" for f in premises.check([c.task], executor.run)]
                for o in traps.measure([c.task], executor):
                    v.misses[o.tag] += o.status != "bites"
                if first and c.task.gold_sql:
                    v.answer = executor.run(c.task.gold_sql[0])
    finally:
        executor.close()


def _passes(v: Verdict, tags: list[str] | None = None) -> bool:
    return not v.failures and all(not v.misses[t] for t in (v.misses if tags is None else tags))


def _choose(
    plan: Reselection,
    template: Template | None,
    candidates: list[Candidate],
    verdicts: dict[Key, Verdict],
    source: list[Task],
    n_worlds: int,
) -> None:
    group = candidates[0].group
    current = [t for t in source if (t.provenance.template_id == group or t.id == group)]
    needed = len(current)
    tags: list[str] = [t for t in candidates[0].task.tags if t in traps.TRAP_TAGS]
    dropped: dict[str, str] = {}
    while True:
        passing = [c for c in candidates if _passes(verdicts[c.key], tags)]
        if len(passing) >= needed or not tags:
            break
        counts = {
            t: sum(not verdicts[c.key].failures and not verdicts[c.key].misses[t] for c in candidates) for t in tags
        }
        worst = min(tags, key=lambda t: counts[t])
        dropped[worst] = (
            f"the {worst} trap bites in all {n_worlds} reference worlds for only {counts[worst]} of "
            f"{len(candidates)} parameter choices"
        )
        tags.remove(worst)
    if dropped:
        plan.dropped_tags[group] = dropped
    chosen: list[Candidate] = []
    for c in passing:
        if _repeats(c, chosen, verdicts):
            continue
        chosen.append(c)
        if len(chosen) == needed:
            break
    numbers = [int(t.id.rsplit("-", 1)[1]) for t in current]
    next_number = max(numbers, default=0) + 1
    kept_ids = set()
    for c in chosen:
        task = c.previous or c.task
        if c.previous is None:
            assert template is not None
            task = task.model_copy(update={"id": task.id.rsplit("-", 1)[0] + f"-{next_number:03d}"})
            next_number += 1
        if dropped:
            note = " ".join(dropped[t] + "." for t in dropped if t in task.tags)
            task = task.model_copy(
                update={
                    "tags": [t for t in task.tags if t not in dropped],
                    "maintenance_notes": f"{task.maintenance_notes} Tags dropped in reselection: {note}".strip(),
                }
            )
        plan.tasks.append(task)
        if c.previous is None:
            plan.changes.added[task.id] = f"parameters {dict(c.params)} of template {group}, checked in every world"
        else:
            kept_ids.add(task.id)
            if dropped and task.tags != c.previous.tags:
                plan.changes.changed[task.id] = "; ".join(dropped.values())
    by_params = {c.params: c for c in candidates}
    for task in current:
        if task.id not in kept_ids:
            plan.changes.removed[task.id] = _why_not(by_params.get(_params(task)), verdicts, tags, chosen)


def _repeats(c: Candidate, chosen: list[Candidate], verdicts: dict[Key, Verdict]) -> bool:
    """Its gold result equals a chosen task's (the comparator's equality, as premises.same_answers)."""
    answer = verdicts[c.key].answer
    if answer is None:
        return False
    others = [(o.task, a) for o in chosen if (a := verdicts[o.key].answer) is not None]
    return any(premises.same_answers([pair, (c.task, answer)]) for pair in others)


def _why_not(c: Candidate | None, verdicts: dict[Key, Verdict], tags: list[str], chosen: list[Candidate]) -> str:
    if c is None:
        return "its parameters are no longer offered by the template (clinical review)"
    v = verdicts[c.key]
    if v.failures:
        return v.failures[0]
    if missed := [t for t in tags if v.misses[t]]:
        return f"the {missed[0]} trap did not bite in {v.misses[missed[0]]} reference world(s)"
    if c in chosen:
        return "kept"
    return "its answer repeats another task's of the template"
