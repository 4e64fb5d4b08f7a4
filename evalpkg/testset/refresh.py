"""The monthly refresh: mine query tickets -> review queue -> reviewed release.

A mined ticket becomes a task with the parts of a curated one (ticket_task). Before it can be released a
reviewer approves (or rewrites) each of its wordings, a second annotation is measured against its gold
(annotate_queue, as for curated tasks: agreement is never typed in), a reviewer approves the task, and
the release checks it in the reference worlds (refresh_checks): a candidate that fails is refused, with
the world and the reason, and the rest are released."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Literal

from evalpkg.db import connect
from evalpkg.errors import ConfigError, DataError, UsageError
from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.sql import fingerprint, guard
from evalpkg.sql.gold import GoldError, GoldRunner, agent_connection, gold_runner
from evalpkg.sql.vocabulary import MONTH
from evalpkg.testset import release, same_meaning, ticket_task, traps, worlds
from evalpkg.testset.annotate import Annotation, measure_in_worlds
from evalpkg.testset.gold_checks import check_golds
from evalpkg.testset.models import Task
from evalpkg.testset.refresh_checks import findings
from evalpkg.testset.refresh_release import MINED_IN_WORLDS, recover_release, release_approved, release_queue
from evalpkg.testset.review_queue import (
    Candidate,
    Decision,
    Role,
    SecondAnnotation,
    Wording,
    load_queue,
    queue_dir,
    save,
)

__all__ = ["Candidate", "Decision", "load_queue", "queue_dir", "recover_release", "release_approved", "release_queue"]


@dataclass
class RefreshReport:
    month: str
    tickets: int = 0
    added: list[str] = field(default_factory=list)
    queued: list[str] = field(default_factory=list)  # candidates this month's tickets made already: unchanged
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count
    dropped_tickets: dict[int, str] = field(default_factory=dict)  # ticket id -> why it was not queued
    tags_dropped: dict[str, list[str]] = field(default_factory=dict)  # candidate -> each trap tag removed, why
    reference_worlds: int = 0  # how many reference worlds the candidates were checked in
    drafted_by_model: int = 0
    draft_failures: list[str] = field(default_factory=list)  # the model's, one line each

    def summary(self) -> str:
        drops = ", ".join(f"{n} {why}" for why, n in sorted(self.dropped.items())) or "none"
        model = f"; wordings drafted by the model for {self.drafted_by_model}" if self.drafted_by_model else ""
        failed = f" ({len(self.draft_failures)} drafts failed: {self.draft_failures[0]})" if self.draft_failures else ""
        queued = f", {len(self.queued)} already in the queue (unchanged)" if self.queued else ""
        worlds_checked = (
            f" (checked in {self.reference_worlds} reference worlds)"
            if self.reference_worlds
            else " (no reference worlds checked)"
        )
        return (
            f"refresh {self.month}: {self.tickets} tickets, {len(self.added)} new candidates{worlds_checked}{queued}"
            f"{model}{failed}; dropped: {drops}"
        )

    def details(self) -> list[str]:
        """One line per candidate queued before, per ticket dropped (with its reason) and per tag dropped."""
        return [
            *(f"in the queue already, unchanged: {tid}" for tid in self.queued),
            *(f"dropped ticket #{tid}: {why}" for tid, why in sorted(self.dropped_tickets.items())),
            *(f"{tid}: {note}" for tid, notes in self.tags_dropped.items() for note in notes),
        ]

    def drop(self, why: str, ticket_id: int, detail: str = "") -> None:
        """Count `why` (the reason's kind) and keep it for the ticket with its `detail`."""
        self.dropped[why] = self.dropped.get(why, 0) + 1
        self.dropped_tickets[ticket_id] = f"{why} ({detail})" if detail else why


@dataclass(frozen=True)
class Ticket:
    id: int
    created: datetime
    request: str
    sql: str


Rows = list[list[Any]]


@dataclass
class Mined:
    """A ticket that passed the checks on its own, as a candidate, with its answer on the snapshot (`rows`)
    and wherever else mining ran it (`answers`: the snapshot's, then each reference world's; None where the
    gold failed)."""

    ticket: Ticket
    candidate: Candidate
    rows: Rows
    columns: list[str]
    answers: list[Rows | None]

    @property
    def sturdiness(self) -> tuple[int, float]:
        return sturdiness(self.answers)


def sturdiness(answers: list[Rows | None]) -> tuple[int, float]:
    """How sturdy an answer is, larger first: in how many of the places it ran (the snapshot, each reference
    world) it holds (a number that is not NULL, not all 0), then its smallest number where it holds (a count
    of 42 outlasts one of 10 on another snapshot). Of two tickets asking the same, the sturdier is kept."""
    held = [rows for rows in answers if rows and ticket_task.answer_points(rows) and not ticket_task.all_zero(rows)]
    numbers = [abs(float(v)) for rows in held for row in rows for v in row if ticket_task.is_number(v)]
    return len(held), min(numbers, default=0.0)


def _month_bounds(month: str) -> tuple[date, date]:
    m = MONTH.fullmatch(month)
    if not m:
        raise ConfigError(f"--month: {month!r} is not YYYY-MM")
    y, mo = int(m.group(1)), int(m.group(2))
    return date(y, mo, 1), date(y + (mo == 12), mo % 12 + 1, 1)


def ticket_sql_accepted(sql: str) -> bool:
    """A ticket's SQL can become gold only if an agent's execute_sql would run it: the same guard decides."""
    return guard.is_single_select(sql)


def released_tasks(settings: Settings) -> list[Task]:
    """The latest release's tasks (none before the first release)."""
    return release.load(settings.tasks_dir).tasks if release.versions(settings.tasks_dir) else []


def covered_questions(settings: Settings, queue: list[Candidate], released: list[Task] | None = None) -> dict[str, str]:
    """The questions (fingerprint.question: the same tables, filters, measure and the same drug, code,
    department or threshold literals; another period is the same question) a new ticket would repeat, each
    with who asks it: every released task, and every candidate still in the running (a rejected or refused
    one covers nothing, so a ticket asking the same is mined)."""
    owners: dict[str, str] = {}
    for task in released_tasks(settings) if released is None else released:
        for sql in task.gold_sql:
            owners.setdefault(fingerprint.question(sql), f"released task {task.id}")
    for c in queue:
        if c.status != "rejected":
            owners.setdefault(fingerprint.question(c.task.gold_sql[0]), _owner(c))
    return owners


def _owner(cand: Candidate) -> str:
    return f"ticket #{cand.ticket_id}, candidate {cand.task.id}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# Where mining checks each candidate unless told not to: the release's own worlds. The CLI and the
# testset_refresh DAG both mine through mine(), so both check there by default.
MINING_WORLDS: tuple[worlds.World, ...] = worlds.WORLDS


def mine(
    settings: Settings,
    month: str,
    *,
    reference_worlds: bool = True,
    drafter: ticket_task.ModelDrafter | None = None,
    auto_approve: bool = False,
    progress: Progress = quiet,
) -> RefreshReport:
    """refresh() as `evalpkg testset refresh` and the testset_refresh DAG run it: each candidate checked in
    MINING_WORLDS (a missing one built first) unless `reference_worlds` is False."""
    reference = MINING_WORLDS if reference_worlds else ()
    return refresh(settings, month, drafter=drafter, auto_approve=auto_approve, reference=reference, progress=progress)


def refresh(
    settings: Settings,
    month: str,
    *,
    drafter: ticket_task.ModelDrafter | None = None,
    auto_approve: bool = False,
    reference: tuple[worlds.World, ...] = (),
    progress: Progress = quiet,
) -> RefreshReport:
    """Mine a month of done tickets into the queue; `drafter`: the model that drafts the wordings;
    `reference`: the worlds each candidate is checked in as the release will check it (mine()'s default, the
    CLI's and the DAG's: MINING_WORLDS; none: not checked, the release still checks).

    Idempotent: a ticket queued before (whatever became of it) is reported as queued, and every other
    ticket meets the same checks in the same order, so a rerun with nothing changed queues nothing and
    drops the same tickets for the same reasons."""
    start, end = _month_bounds(month)
    report = RefreshReport(month, reference_worlds=len(reference))
    queue = [c for _, c in load_queue(settings)]
    latest = released_tasks(settings)
    owners = covered_questions(settings, queue, latest)
    negations = same_meaning.released_negations(latest)
    queued = {c.ticket_id: c for c in queue}  # whatever became of them, decisions stay
    tickets = done_tickets(settings, start, end)
    report.tickets = len(tickets)
    with agent_connection(settings) as conn:
        meanings = ticket_task.dictionary(conn)
    mined: list[Mined] = []
    with gold_runner(settings) as golds:
        for ticket in tickets:
            if ticket.id in queued:
                report.queued.append(queued[ticket.id].task.id)
            elif found := _mine(report, golds, ticket, owners, negations, month, meanings):
                mined.append(found)
    held = _in_worlds(settings, report, mined, reference, progress)
    # of two tickets asking the same question, the sturdier (its answer holding in more of the places it ran,
    # then the larger) is kept, whichever was mined first
    for m in sorted(held, key=lambda m: (-m.sturdiness[0], -m.sturdiness[1], m.ticket.id)):
        key = fingerprint.question(m.ticket.sql)
        if key in owners:
            report.drop("already covered", m.ticket.id, f"the same question as {owners[key]}")
            continue
        cand = _drafted(report, drafter, m, meanings).model_copy(update={"pattern": key})
        if auto_approve:  # the task decision only: its wordings still need a reviewer
            note = "synthetic ticket, approved by --auto-approve"
            cand.decisions.append(Decision(decision="approve", reviewer="auto", role="generator", at=_now(), note=note))
        save(queue_dir(settings) / month / f"{cand.task.id}.json", cand)
        owners[key] = _owner(cand)
        report.added.append(cand.task.id)
    progress(report.summary())
    return report


def _mine(
    report: RefreshReport,
    golds: GoldRunner,
    ticket: Ticket,
    owners: dict[str, str],
    negations: list[tuple[Task, same_meaning.Asked]],
    month: str,
    meanings: ticket_task.Meanings,
) -> Mined | None:
    """The ticket as a candidate that holds on the snapshot, or None with the reason reported. The answer
    is checked before the repeat tests (the same question; the meaning of a released negation task): a
    ticket whose answer is NULL or 0 is dropped for that."""
    tid, sql = ticket.id, ticket.sql
    if not ticket_sql_accepted(sql):
        report.drop("not one read-only query", tid)
        return None
    if why := ticket_task.relative_anchor(ticket.request, sql, ticket.created):
        report.drop("a relative period on a fixed date", tid, why)
        return None
    try:
        got = golds.result(sql)
    except GoldError:
        report.drop("SQL fails on the snapshot", tid)
        return None
    rows, columns = got.rows, got.columns
    points = ticket_task.answer_points(rows)
    if not rows:
        report.drop("no rows", tid)
    elif not points:  # e.g. an average over no admissions: one NULL row
        report.drop("no number in the result to check", tid, "its answer is NULL on the snapshot")
    elif ticket_task.all_zero(rows):
        report.drop("its answer is 0 on the snapshot: a query that finds nothing would agree", tid)
    elif why := ticket_task.withdrawn_threshold(sql):
        report.drop(f"a withdrawn threshold: {why}", tid)
    elif (key := fingerprint.question(sql)) in owners:
        report.drop("already covered", tid, f"the same question as {owners[key]}")
    else:
        cand = _candidate(report, None, month, tid, ticket.created, ticket.request, sql, rows, columns, meanings)
        if why := same_meaning.meaning_repeat(cand.task, negations):
            report.drop("already covered", tid, why)
            return None
        if problems := check_golds(cand.task, golds):  # the checks a release holds it to, here first
            report.drop(f"its gold does not hold on the snapshot ({problems[0].code.replace('_', ' ')})", tid)
            return None
        task = biting_tags_only(cand.task, golds)
        return Mined(ticket, cand.model_copy(update={"task": task}), rows, columns, [rows])
    return None


def _in_worlds(
    settings: Settings,
    report: RefreshReport,
    mined: list[Mined],
    reference: tuple[worlds.World, ...],
    progress: Progress,
) -> list[Mined]:
    """The mined candidates that hold in every reference world, as the release will check them: one whose
    gold or premise fails there is dropped with the reason; a trap tag that does not bite in a world is
    removed from the candidate and noted (its gold holds), never a reason to drop it. Each keeps its answer
    in every world, which its sturdiness reads."""
    if not reference or not mined:
        return mined
    answers: dict[str, list[Rows | None]] = {}
    found = findings(settings, [m.candidate.task for m in mined], reference, progress=progress, answers=answers)
    held = []
    for m in mined:
        task = m.candidate.task
        if fails := [f.message for f in found[task.id] if f.tag is None]:
            report.drop("fails in a reference world", m.ticket.id, fails[0])
            continue
        missed = {f.tag: f.message for f in reversed(found[task.id]) if f.tag is not None}  # the first per tag
        notes = [f"tag {tag} dropped: {why}" for tag, why in sorted(missed.items())]
        if notes:
            report.tags_dropped[task.id] = notes
        kept = [t for t in task.tags if t not in missed]
        checked = f"{MINED_IN_WORLDS} ({len(reference)} checked)"
        update = {"tags": kept, "maintenance_notes": "; ".join([task.maintenance_notes, *notes, checked])}
        cand = m.candidate.model_copy(update={"task": task.model_copy(update=update)})
        held.append(Mined(m.ticket, cand, m.rows, m.columns, [m.rows, *answers.get(task.id, [])]))
    return held


def done_tickets(settings: Settings, start: date, end: date) -> list[Ticket]:
    """The month's done tickets, read as the curator: the agents' role cannot read the ticket log, whose
    SQL is the gold of every task mined from it. A ticket's SQL then runs as an agent's query would."""
    with connect(settings.curator_url()) as conn:
        rows = conn.execute(
            "select ticket_id, created_at, request_text, sql_text from ops.query_ticket "
            "where status = 'done' and created_at >= %s and created_at < %s order by ticket_id",
            (start, end),
        ).fetchall()
    return [Ticket(int(i), c, str(r), str(q)) for i, c, r, q in rows]


def biting_tags_only(task: Task, golds: GoldRunner) -> Task:
    """The task without the trap tags the SQL's shape suggested but whose trap does not bite on the snapshot
    (or has nothing to rewrite), each noted with the reason; the release checks the rest in every world."""
    missed = [o for o in traps.measure([task], golds) if o.status != "bites"]
    if not missed:
        return task
    notes = "; ".join(f"tag {o.tag} dropped: {o.status.replace('_', ' ')} on the snapshot ({o.detail})" for o in missed)
    lost = {o.tag for o in missed}
    return task.model_copy(
        update={
            "tags": [t for t in task.tags if t not in lost],
            "maintenance_notes": f"{task.maintenance_notes}; {notes}",
        }
    )


def _drafted(
    report: RefreshReport, drafter: ticket_task.ModelDrafter | None, m: Mined, meanings: ticket_task.Meanings
) -> Candidate:
    """The candidate with its wordings drafted by the model: only for one that is queued (the checks read no
    wording, so a ticket dropped on the way costs no draft)."""
    if drafter is None:
        return m.candidate
    t = m.ticket
    drafted = _candidate(
        report, drafter, m.candidate.month, t.id, t.created, t.request, t.sql, m.rows, m.columns, meanings
    )
    task = m.candidate.task.model_copy(update={"variants": drafted.task.variants})
    return m.candidate.model_copy(update={"task": task, "wordings": drafted.wordings})


def _candidate(
    report: RefreshReport,
    drafter: ticket_task.ModelDrafter | None,
    month: str,
    ticket_id: int,
    created: datetime,
    request: str,
    sql: str,
    rows: list[list[Any]],
    columns: list[str],
    meanings: ticket_task.Meanings,
) -> Candidate:
    declared = ticket_task.outputs(sql, columns, meanings)
    drafts = ticket_task.rule_drafts(request)
    if drafter is not None:
        try:
            for key, text in drafter.draft(request, sql, declared).items():
                drafts[key] = (text, f"model {drafter.model}")
            report.drafted_by_model += 1
        except Exception as exc:  # an endpoint down or a reply that is not the wordings: the rule drafts stand
            report.draft_failures.append(f"ticket #{ticket_id}: {type(exc).__name__}: {str(exc)[:120]}")
    task = ticket_task.candidate_task(ticket_id, created, sql, drafts, declared, rows)
    wordings = [Wording(language=lang, complexity=level, drafted_by=by) for (lang, level), (_, by) in drafts.items()]
    return Candidate(month=month, ticket_id=ticket_id, request=request, pattern="", task=task, wordings=wordings)


def _queued(settings: Settings, ids: list[str]) -> dict[str, tuple[Path, Candidate]]:
    queue = {c.task.id: (p, c) for p, c in load_queue(settings)}
    if unknown := [i for i in ids if i not in queue]:
        raise ConfigError(f"not in the review queue: {', '.join(unknown)}")
    if released := [f"{i} (in {queue[i][1].released_in})" for i in ids if queue[i][1].released_in]:
        raise DataError(f"already released, decisions are final: {', '.join(released)}")
    return queue


def review(
    settings: Settings,
    ids: list[str],
    decision: Literal["approve", "reject"],
    reviewer: str,
    role: Role,
    note: str = "",
) -> int:
    queue = _queued(settings, ids)
    if decision == "approve" and (own := [i for i in ids if _second_annotator(queue[i][1]) == reviewer]):
        raise UsageError(
            f"--reviewer {reviewer}: wrote the second annotation of {', '.join(own)}; another person approves"
        )
    for tid in ids:
        path, cand = queue[tid]
        cand.decisions.append(Decision(decision=decision, reviewer=reviewer, role=role, at=_now(), note=note))
        save(path, cand)
    return len(ids)


def _second_annotator(cand: Candidate) -> str | None:
    return cand.second_annotation.annotator.id if cand.second_annotation else None


def review_wording(
    settings: Settings, task_id: str, key: str, reviewer: str, role: Role, text: str | None = None
) -> Wording:
    """Approve one wording (`key`: language/complexity) as drafted, or with `text`, the reviewer's own."""
    path, cand = _queued(settings, [task_id])[task_id]
    return _approve_all(path, cand, {key: text}, reviewer, role)[0]


def review_wordings(
    settings: Settings,
    task_id: str,
    texts: dict[str, str | None],
    reviewer: str,
    role: Role,
    *,
    source: str = "--wordings",
) -> list[Wording]:
    """Approve every wording of one candidate at once (key -> the reviewer's text, or None: as drafted): all
    of them, or none when one is missing or refused (a file holding some would approve them by accident)."""
    path, cand = _queued(settings, [task_id])[task_id]
    if missing := [w.key for w in cand.wordings if w.key not in texts]:
        raise UsageError(
            f"{source}: holds {len(texts)} of the {len(cand.wordings)} wordings of {task_id}, without "
            f"{', '.join(missing)} (each its text, or null to keep the draft); nothing was approved"
        )
    return _approve_all(path, cand, texts, reviewer, role)


def _approve_all(path: Path, cand: Candidate, texts: dict[str, str | None], reviewer: str, role: Role) -> list[Wording]:
    done = []
    for key, text in texts.items():
        cand, wording = _approved(cand, key, reviewer, role, text)
        done.append(wording)
    save(path, cand)
    return done


def _approved(cand: Candidate, key: str, reviewer: str, role: Role, text: str | None) -> tuple[Candidate, Wording]:
    wording = cand.wording(key)
    if wording is None:
        raise UsageError(f"--wording: {key!r} is not one of {', '.join(w.key for w in cand.wordings) or 'none'}")
    if text is None and wording.drafted_by == ticket_task.NEEDS_WORDING:
        raise UsageError(f"--wording {key}: needs wording, no draft was written; give it with --text 'the question'")
    if text is not None and len(text.strip()) < 4:
        raise UsageError(f"--text: {text!r} is too short for a question")
    final = text.strip() if text is not None else cand.task.question(wording.language, wording.complexity)
    same = [f"{v.language.value}/{v.complexity.value}" for v in cand.task.variants if v.text == final]
    done = {w.key for w in cand.wordings if w.approved_by}
    if twin := [k for k in same if k != key and k in done and k.startswith(f"{wording.language.value}/")]:
        why = "each complexity needs its own wording (--text)"
        raise UsageError(f"--wording {key}: the same text as {twin[0]}, approved already; {why}")
    variants = [
        v.model_copy(update={"text": text.strip()})
        if text is not None and (v.language, v.complexity) == (wording.language, wording.complexity)
        else v
        for v in cand.task.variants
    ]
    approved = wording.model_copy(update={"approved_by": f"{role} {reviewer}", "edited": text is not None})
    wordings = [approved if w.key == key else w for w in cand.wordings]
    task = cand.task.model_copy(update={"variants": variants})
    second = cand.second_annotation
    if second and not second.voided and final != cand.task.question(wording.language, wording.complexity):
        # the annotator read the questions as they were: the agreement stands again once annotated anew
        why = f"{key} rewritten by {role} {reviewer} after it was measured"
        second = second.model_copy(update={"voided": why})
    return cand.model_copy(update={"task": task, "wordings": wordings, "second_annotation": second}), approved


def annotate_queue(
    settings: Settings,
    annotation: Annotation,
    *,
    reference: tuple[worlds.World, ...] = (),
    progress: Progress = quiet,
) -> list[Candidate]:
    """Measure a second annotation (its `tasks` entries) against the gold of each unreleased candidate it
    covers, as `testset annotate` does for a release: on the snapshot and in each `reference` world, agreeing
    only where it agrees in all (a number the snapshot alone gives is no reading); recorded on the candidate."""
    queue = [(p, c) for p, c in load_queue(settings) if not c.released_in and c.task.id in annotation.tasks]
    if not queue:
        raise UsageError("the annotation covers no unreleased candidate of the review queue (its `tasks` keys)")
    who = annotation.annotator.id
    if approved := [c.task.id for _, c in queue if c.status == "approved" and c.decisions[-1].reviewer == who]:
        raise UsageError(f"annotator {who}: approved {', '.join(approved)}; the second annotation is another person's")
    tasks = [c.task for _, c in queue]
    (measured,) = measure_in_worlds(settings, [(annotation, tasks)], "review queue", reference, progress=progress)
    out = []
    for (path, cand), result in zip(queue, measured.tasks, strict=True):
        second = SecondAnnotation(
            annotator=annotation.annotator,
            sql=annotation.tasks[cand.task.id].sql,
            agreement=result.agreement,
            detail=result.detail,
            snapshot_version=measured.snapshot_version,
            measured_at=measured.measured_at,
            worlds=measured.worlds or ["snapshot"],
        )
        out.append(cand.model_copy(update={"second_annotation": second}))
        save(path, out[-1])
    return out
