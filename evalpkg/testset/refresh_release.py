"""Releasing the review queue: every approved candidate that is ready (each wording approved by a
reviewer, a second annotation that agrees with the gold) and holds in the reference worlds goes into the
next version; one that fails there is refused, recorded in the queue with the world and the reason."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.sql.gold import agent_connection, snapshot_version
from evalpkg.testset import release, worlds
from evalpkg.testset.models import Annotator, Review
from evalpkg.testset.review_queue import Candidate, Decision, Wording, load_queue, save

RELEASE_CHECKS = "release-checks"  # who refuses a candidate that fails in a reference world
# In a candidate's maintenance notes: mining checked it in the reference worlds and it held in each.
MINED_IN_WORLDS = "held in the reference worlds at mining"
AFTER_MINING = "mining passed it; now refused:"  # a refusal of such a candidate: itself a finding


def recover_release(settings: Settings) -> None:
    """Finish or undo what an interrupted release left (release.recover), and mark the candidates a
    release killed outright after its rename had shipped, so that they are not released twice."""
    release.recover(settings.tasks_dir)
    waiting = [(p, c) for p, c in load_queue(settings) if c.status == "approved" and not c.released_in]
    shipped = release.first_released_in(settings.tasks_dir) if waiting else {}
    for path, cand in waiting:
        if cand.task.id in shipped:
            save(path, cand.model_copy(update={"released_in": shipped[cand.task.id]}))


def held_because(cand: Candidate) -> str | None:
    """Why an approved candidate is not ready for a release yet (None: it is)."""
    if missing := cand.unapproved():
        how = f"`evalpkg testset review {cand.task.id} --wording ...`"
        return f"wordings no reviewer approved: {', '.join(missing)} ({how})"
    second = cand.second_annotation
    if second is None:
        return "no second annotation measured (`evalpkg testset annotate --queue --file ...`)"
    if second.voided:
        return f"the second annotation by {second.annotator.id} no longer stands ({second.voided}): annotate it again"
    if second.agreement < 1.0:
        return f"the second annotation by {second.annotator.id} disagrees ({second.detail}): fix or reject it"
    return None


@dataclass
class QueueRelease:
    release: release.Release | None = None
    held: dict[str, str] = field(default_factory=dict)  # task id -> what it still needs
    refused: dict[str, list[str]] = field(default_factory=dict)  # task id -> the checks it failed
    passed: list[str] = field(default_factory=list)  # released, or (a dry run) would be

    def lines(self) -> list[str]:
        return [f"held {tid}: {why}" for tid, why in self.held.items()] + [
            f"refused {tid}: {'; '.join(why)}" for tid, why in self.refused.items()
        ]


def release_queue(
    settings: Settings,
    *,
    reference: tuple[worlds.World, ...] = worlds.WORLDS,
    dry_run: bool = False,
    progress: Progress = quiet,
) -> QueueRelease:
    """The next version: the latest release plus every approved, ready candidate that holds in every
    reference world; those that fail are refused (recorded in the queue with the reasons). A dry run
    checks the same and writes nothing: no version, no refusal in the queue."""
    from evalpkg.testset.refresh_checks import candidate_problems

    recover_release(settings)
    out = QueueRelease()
    ready = []
    for path, cand in load_queue(settings):
        if cand.status != "approved" or cand.released_in:
            continue
        if why := held_because(cand):
            out.held[cand.task.id] = why
        else:
            ready.append((path, cand))
    if not (ready or out.held):
        return out
    base = release.load(settings.tasks_dir)  # what the release adds to, and the snapshot: before the checks
    with agent_connection(settings) as conn:
        snap = snapshot_version(conn)
    problems = candidate_problems(settings, [c.task for _, c in ready], reference, progress=progress)
    for path, cand in ready:
        if found := problems[cand.task.id]:
            if MINED_IN_WORLDS in cand.task.maintenance_notes:  # the worlds or the checks changed since
                found = [f"{AFTER_MINING} {found[0]}", *found[1:]]
            out.refused[cand.task.id] = found
            if dry_run:
                continue
            refusal = Decision(
                decision="reject",
                reviewer=RELEASE_CHECKS,
                role="generator",
                at=datetime.now(UTC).isoformat(timespec="seconds"),
                note=found[0],
            )
            save(path, cand.model_copy(update={"decisions": [*cand.decisions, refusal]}))
    for line in out.lines():
        progress(line)
    passed = [(p, c) for p, c in ready if c.task.id not in out.refused]
    out.passed = [c.task.id for _, c in passed]
    if passed and not dry_run:
        out.release = _write(settings, base, snap, passed, len(reference))
    return out


def release_approved(
    settings: Settings, *, reference: tuple[worlds.World, ...] = worlds.WORLDS, progress: Progress = quiet
) -> release.Release | None:
    return release_queue(settings, reference=reference, progress=progress).release


def _write(
    settings: Settings,
    base: release.Release,
    snap: str,
    passed: list[tuple[Path, Candidate]],
    worlds_checked: int,
) -> release.Release:
    tasks_dir = settings.tasks_dir
    version = release.next_version(tasks_dir)
    changes = release.ChangeSet()
    new_tasks = []
    for _, cand in passed:
        d, second = cand.decisions[-1], cand.second_annotation
        assert second is not None  # held_because
        annotators = [*cand.task.review.annotators, second.annotator, Annotator(role=d.role, id=d.reviewer)]
        review = Review(annotators=annotators, agreement=second.agreement, status="approved")
        new_tasks.append(cand.task.model_copy(update={"review": review}))
        changes.added[cand.task.id] = (
            f"from query ticket #{cand.ticket_id} ({cand.month}), approved by {d.role} {d.reviewer}; "
            f"{len(cand.wordings)} wordings approved ({_origins(cand.wordings)}); second annotation by "
            f"{second.annotator.id}: agreement {second.agreement:.2f}; holds in the {worlds_checked} reference "
            "world(s) checked"
        )
    rel = release.write(tasks_dir, version, [*base.tasks, *new_tasks], snap, changes)
    release.add_changelog_summary(tasks_dir, version, changelog_prose([c for _, c in passed], worlds_checked))
    for path, cand in passed:
        save(path, cand.model_copy(update={"released_in": version}))
    return rel


def changelog_prose(released: list[Candidate], worlds_checked: int) -> str:
    """The CHANGELOG paragraph of a release from the review queue: which ticket months its tasks came from."""
    months = Counter(c.month for c in released)
    named = ", ".join(f"{n} from {month}" for month, n in sorted(months.items()))
    which = "the query tickets of " + _and(sorted(months))
    return (
        f"Monthly refresh: {len(released)} task(s) mined from {which} ({named}), each reviewed (every wording "
        f"approved, a second annotation that agrees) and holding in the {worlds_checked} reference world(s) checked."
    )


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _origins(wordings: list[Wording]) -> str:
    """Who wrote the wordings, counted: '1 drafted from the ticket, 5 written by a reviewer'."""
    counts = Counter(w.origin for w in wordings)
    return ", ".join(f"{n} {origin}" for origin, n in sorted(counts.items())) or "none"
