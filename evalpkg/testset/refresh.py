"""The monthly refresh: mine query tickets -> review queue -> reviewed release (seed 000 §5.4)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from evalpkg.errors import ConfigError, DataError
from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.sql import fingerprint, guard
from evalpkg.testset import release
from evalpkg.testset.build import TYPE_PREFIX
from evalpkg.testset.classify import classify, describe_en
from evalpkg.testset.gold import GoldError, agent_connection, run_gold, snapshot_version
from evalpkg.testset.models import (
    Annotator,
    AnswerPoint,
    ArgConstraint,
    Complexity,
    ExpectedToolCall,
    Language,
    Provenance,
    QuestionVariant,
    Review,
    Task,
    Turn,
)

MONTH_RE = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
FILLER = re.compile(r"^(麻烦|请|帮忙|想看下|想看一下|帮我)+|一下|麻烦")
Role = Literal["clinician", "analyst", "dba", "generator"]


class Decision(BaseModel):
    decision: Literal["approve", "reject"]
    reviewer: str
    role: Role
    at: str
    note: str = ""


class Candidate(BaseModel):
    format_version: Literal[1] = 1
    month: str
    ticket_id: int
    pattern: str
    task: Task
    decisions: list[Decision] = []
    released_in: str | None = None

    @property
    def status(self) -> str:
        return "pending" if not self.decisions else self.decisions[-1].decision + "d"


@dataclass
class RefreshReport:
    month: str
    tickets: int = 0
    added: list[str] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count

    def summary(self) -> str:
        drops = ", ".join(f"{n} {why}" for why, n in sorted(self.dropped.items())) or "none"
        return f"refresh {self.month}: {self.tickets} tickets, {len(self.added)} new candidates; dropped: {drops}"


def _month_bounds(month: str) -> tuple[date, date]:
    m = MONTH_RE.match(month)
    if not m:
        raise ConfigError(f"--month: {month!r} is not YYYY-MM")
    y, mo = int(m.group(1)), int(m.group(2))
    return date(y, mo, 1), date(y + (mo == 12), mo % 12 + 1, 1)


def queue_dir(settings: Settings) -> Path:
    return settings.tasks_dir / "review"


def load_queue(settings: Settings) -> list[tuple[Path, Candidate]]:
    out = []
    for path in sorted(queue_dir(settings).glob("*/*.json")):
        try:
            out.append((path, Candidate.model_validate_json(release.read_text(path))))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(map(str, err["loc"])) or "(file)"
            raise DataError(f"{path}: field {loc}: {err['msg']}") from exc
    return out


def _save(path: Path, cand: Candidate) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(cand.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def _candidate_task(ticket_id: int, created: datetime, request: str, sql: str, rows: list[tuple[object, ...]]) -> Task:
    kind, difficulty, tags = classify(sql)
    tables = fingerprint.tables(sql)
    plain_zh = FILLER.sub("", request).strip(" ，,。") or request
    short_en, full_en = describe_en(sql)
    time_cols = sorted(c for c in tags if c == "time_semantics")
    technical_zh = f"{plain_zh}（口径：数据来自{'、'.join(tables)}{'，注意时间字段' if time_cols else ''}）"
    variants = [
        QuestionVariant(language=Language.zh, complexity=Complexity.colloquial, text=request),
        QuestionVariant(language=Language.zh, complexity=Complexity.plain, text=plain_zh),
        QuestionVariant(language=Language.zh, complexity=Complexity.technical, text=technical_zh),
        QuestionVariant(language=Language.en, complexity=Complexity.colloquial, text=short_en),
        QuestionVariant(language=Language.en, complexity=Complexity.plain, text=short_en.rstrip("?") + ", please."),
        QuestionVariant(language=Language.en, complexity=Complexity.technical, text=full_en),
    ]
    single_value = len(rows) == 1 and len(rows[0]) == 1
    return Task(
        id=f"{TYPE_PREFIX[kind]}-ticket_{ticket_id}-001",
        type=kind,
        difficulty=difficulty,
        variants=variants,
        turns=[
            Turn(
                expected_tool_calls=[
                    ExpectedToolCall(name="query_schema", required=False),
                    ExpectedToolCall(
                        name="execute_sql", args={"sql": ArgConstraint(contains_all=tables)}, after=["query_schema"]
                    ),
                ]
            )
        ],
        gold_sql=[sql],
        result={"order_matters": " order by " in sql.lower()},
        answer_points=[AnswerPoint(kind="number", row=0, col=0)] if single_value else [],
        tags=tags,
        tables=tables,
        provenance=Provenance(
            source="ticket",
            ticket_id=ticket_id,
            params={"created_at": created.isoformat()},
            generator_version="refresh-v1",
        ),
        review=Review(annotators=[Annotator(role="generator", id="refresh-v1")], agreement=1.0, status="pending"),
        maintenance_notes=f"mined from query ticket #{ticket_id}; English variants are described from the SQL "
        "and should be rewritten by the reviewer",
    )


def ticket_sql_accepted(sql: str) -> bool:
    """A ticket's SQL can become gold only if an agent's execute_sql would run it: the same guard decides."""
    return guard.is_single_select(sql)


def covered_patterns(settings: Settings) -> set[str]:
    patterns = {c.pattern for _, c in load_queue(settings)}
    if release.versions(settings.tasks_dir):
        for task in release.load(settings.tasks_dir).tasks:
            patterns.update(fingerprint.pattern(sql) for sql in task.gold_sql)
    return patterns


def refresh(settings: Settings, month: str, *, auto_approve: bool = False, progress: Progress = quiet) -> RefreshReport:
    start, end = _month_bounds(month)
    report = RefreshReport(month)
    seen = covered_patterns(settings)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    with agent_connection(settings) as conn:
        with conn.transaction():
            tickets = conn.execute(
                "select ticket_id, created_at, request_text, sql_text from ops.query_ticket "
                "where status = 'done' and created_at >= %s and created_at < %s order by ticket_id",
                (start, end),
            ).fetchall()
        report.tickets = len(tickets)
        for ticket_id, created, request, sql in tickets:
            if not ticket_sql_accepted(sql):
                report.dropped["not one read-only query"] = report.dropped.get("not one read-only query", 0) + 1
                continue
            pat = fingerprint.pattern(sql)
            if pat in seen:
                report.dropped["already covered"] = report.dropped.get("already covered", 0) + 1
                continue
            try:
                rows = run_gold(conn, sql)
            except GoldError:
                report.dropped["SQL fails on the snapshot"] = report.dropped.get("SQL fails on the snapshot", 0) + 1
                continue
            if not rows:
                report.dropped["no rows"] = report.dropped.get("no rows", 0) + 1
                continue
            task = _candidate_task(ticket_id, created, request, sql, rows)
            cand = Candidate(month=month, ticket_id=ticket_id, pattern=pat, task=task)
            if auto_approve:
                cand.decisions.append(
                    Decision(
                        decision="approve",
                        reviewer="auto",
                        role="generator",
                        at=now,
                        note="synthetic ticket, approved by --auto-approve",
                    )
                )
            _save(queue_dir(settings) / month / f"{task.id}.json", cand)
            seen.add(pat)
            report.added.append(task.id)
    progress(report.summary())
    return report


def review(
    settings: Settings,
    ids: list[str],
    decision: Literal["approve", "reject"],
    reviewer: str,
    role: Role,
    note: str = "",
) -> int:
    queue = {c.task.id: (p, c) for p, c in load_queue(settings)}
    unknown = [i for i in ids if i not in queue]
    if unknown:
        raise ConfigError(f"not in the review queue: {', '.join(unknown)}")
    if released := [f"{i} (in {queue[i][1].released_in})" for i in ids if queue[i][1].released_in]:
        raise DataError(f"already released, decisions are final: {', '.join(released)}")
    now = datetime.now(UTC).isoformat(timespec="seconds")
    for tid in ids:
        path, cand = queue[tid]
        cand.decisions.append(Decision(decision=decision, reviewer=reviewer, role=role, at=now, note=note))
        _save(path, cand)
    return len(ids)


def recover_release(settings: Settings) -> None:
    """Finish or undo what an interrupted release left (release.recover), and mark the candidates a
    release killed outright after its rename had shipped, so that they are not released twice."""
    release.recover(settings.tasks_dir)
    waiting = [(p, c) for p, c in load_queue(settings) if c.status == "approved" and not c.released_in]
    shipped = release.first_released_in(settings.tasks_dir) if waiting else {}
    for path, cand in waiting:
        if cand.task.id in shipped:
            _save(path, cand.model_copy(update={"released_in": shipped[cand.task.id]}))


def release_approved(settings: Settings) -> release.Release | None:
    """The next version: the latest release plus every approved, unreleased candidate (after recovering
    from an interrupted release, for the CLI and the DAG alike)."""
    recover_release(settings)
    approved = [(p, c) for p, c in load_queue(settings) if c.status == "approved" and not c.released_in]
    if not approved:
        return None
    tasks_dir = settings.tasks_dir
    base = release.load(tasks_dir)
    version = release.next_version(tasks_dir)
    new_tasks = []
    changes = release.ChangeSet()
    for _, cand in approved:
        d = cand.decisions[-1]
        reviewed = cand.task.model_copy(
            update={
                "review": Review(
                    annotators=[*cand.task.review.annotators, Annotator(role=d.role, id=d.reviewer)],
                    agreement=1.0,
                    status="approved",
                )
            }
        )
        new_tasks.append(reviewed)
        changes.added[cand.task.id] = (
            f"from query ticket #{cand.ticket_id} ({cand.month}), approved by {d.role} {d.reviewer}"
        )
    with agent_connection(settings) as conn:
        snap = snapshot_version(conn)
    rel = release.write(tasks_dir, version, [*base.tasks, *new_tasks], snap, changes)
    for path, cand in approved:
        _save(path, cand.model_copy(update={"released_in": version}))
    return rel
