"""The reference-world checks a release from the review queue must pass, per candidate task: the same as
`testset validate --reference-worlds` holds a release to (the gold runs and answers, its order and
answer points are decided by the data, its outputs are the gold's columns, every tagged trap bites,
every premise holds), in each world, each failure named with the world it failed in."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.sql.gold import GoldError, GoldRunner, gold_runner
from evalpkg.testset import premises, traps, worlds
from evalpkg.testset.gold_checks import check_golds
from evalpkg.testset.models import Task


def candidate_problems(
    settings: Settings,
    tasks: list[Task],
    reference: tuple[worlds.World, ...] = worlds.WORLDS,
    *,
    progress: Progress = quiet,
) -> dict[str, list[str]]:
    """Task id -> why it cannot be released (empty: it holds in every world)."""
    # Candidates alike in all the checks read (a ticket asked again under another number) are checked once.
    first: dict[str, Task] = {}
    for t in tasks:
        first.setdefault(_checked(t), t)
    found = _problems(settings, list(first.values()), reference, progress)
    return {t.id: found[first[_checked(t)].id] for t in tasks}


# What the checks read of a task: the rest (id, wording texts, review) cannot change their outcome.
CHECKED_FIELDS = {"type", "gold_sql", "outputs", "result", "answer_points", "tags", "premise", "maintenance_notes"}


def _checked(task: Task) -> str:
    graded = json.dumps([(v.asks, v.admits) for v in task.variants])  # what each wording is graded on
    return f"{task.model_dump_json(include=CHECKED_FIELDS)} {task.provenance.template_id} {graded}"


@dataclass(frozen=True)
class Finding:
    """One check a task failed in one world; `tag`: the trap tag that did not bite (None: the gold or a
    premise, which no tag removal mends)."""

    message: str
    tag: str | None = None


def _problems(
    settings: Settings, tasks: list[Task], reference: tuple[worlds.World, ...], progress: Progress
) -> dict[str, list[str]]:
    found = findings(settings, tasks, reference, progress=progress)
    return {tid: [f.message for f in fs] for tid, fs in found.items()}


def findings(
    settings: Settings,
    tasks: list[Task],
    reference: tuple[worlds.World, ...],
    *,
    progress: Progress = quiet,
    answers: dict[str, list[list[list[Any]] | None]] | None = None,
) -> dict[str, list[Finding]]:
    """Task id -> every check it fails in each reference world (mining and the release read the same).
    `answers`, when given, receives task id -> its first gold's rows in each world, in order (None where it
    fails): what mining weighs two tickets asking the same question by (the checks ran it already)."""
    out: dict[str, list[Finding]] = {t.id: [] for t in tasks}
    if not tasks:
        return out
    for world, scratch in worlds.each(settings, reference, progress=progress):
        where = f"in the reference world {world.label()}"
        with gold_runner(scratch) as golds:
            for task in tasks:
                out[task.id] += [Finding(f"{p.message} {where}") for p in check_golds(task, golds)]
                if answers is not None:
                    answers.setdefault(task.id, []).append(_rows(golds, task.gold_sql[0]))
            for outcome in traps.measure(tasks, golds):
                if outcome.status != "bites":
                    why = f"trap {outcome.tag} {outcome.status.replace('_', ' ')} {where}: {outcome.detail}"
                    out[outcome.task_id].append(Finding(why, outcome.tag))
            for finding in premises.check(tasks, golds.result):
                out[finding.task_id].append(Finding(f"premise {finding.check} fails {where}: {finding.detail}"))
    return out


def _rows(golds: GoldRunner, sql: str) -> list[list[Any]] | None:
    try:
        return [list(row) for row in golds.result(sql).rows]
    except GoldError:
        return None
