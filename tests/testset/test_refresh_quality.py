"""The monthly refresh at release quality: a mined ticket becomes a task with outputs, answer points and
wordings a reviewer approved (drafted by a model endpoint here: the stand-in), its agreement measured
from a second annotation, and `release` refuses a candidate that fails in a reference world."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from evalpkg.agent.model_client import ModelClient
from evalpkg.db import connect
from evalpkg.errors import UsageError
from evalpkg.settings import EVAL_DB, PROJECT_ROOT, Settings
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release, worlds
from evalpkg.testset.annotate import Annotation, Written
from evalpkg.testset.models import Annotator, Complexity, Language
from evalpkg.testset.refresh import annotate_queue, load_queue, refresh, release_queue, review, review_wording
from evalpkg.testset.review_queue import Candidate, Wording, save
from evalpkg.testset.ticket_task import NEEDS_WORDING, ModelDrafter
from tests.agent.fake_endpoint import FakeEndpoint, serving

WORLD = worlds.World(2000, 7, 0)  # one reference world keeps the test short; the CLI checks all six
SECOND = Annotator(role="analyst", id="analyst_zhao")
AF_TASK = "neg-af_no_anticoagulant_age_group-001"  # AF patients of an age group without an anticoagulant


class Drafting(FakeEndpoint):
    """Answers a drafting prompt with five wordings naming the ticket they were drafted for."""

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        prompt = str(request["messages"][0]["content"])
        ticket = prompt.split("Request: ", 1)[1].split("\n", 1)[0][:12]
        body = {
            "zh": {"plain": f"请统计{ticket}", "technical": f"按出院日期口径统计{ticket}"},
            "en": {level: f"{level} question for {ticket}" for level in ("colloquial", "plain", "technical")},
        }
        return {"role": "assistant", "content": json.dumps(body, ensure_ascii=False)}


def make_ready(settings: Settings, ids: list[str], *, agreeing: bool = True) -> None:
    """A reviewer approves each wording (rewriting what was only described from the SQL) and the task, and
    a second annotator's SQL (the gold's own, or a different one) is measured against the gold."""
    queue = {c.task.id: c for _, c in load_queue(settings)}
    for tid in ids:
        task = queue[tid].task
        for w in queue[tid].wordings:
            draft = task.question(w.language, w.complexity)
            twins = [v for v in task.variants if v.language == w.language and v.text == draft]
            reword = w.drafted_by == NEEDS_WORDING or (len(twins) > 1 and w.complexity is not Complexity.colloquial)
            text = f"Reworded {w.key} question for {tid}" if reword else None
            review_wording(settings, tid, w.key, "dr_wang", "clinician", text)
    review(settings, ids, "approve", "dr_wang", "clinician")
    written = {tid: Written(sql=queue[tid].task.gold_sql[0] if agreeing else "select -12345 as n") for tid in ids}
    annotate_queue(settings, Annotation(annotator=SECOND, tasks=written))


def ticket_months(settings: Settings) -> list[str]:
    with connect(settings.db_url(EVAL_DB)) as conn:
        rows = conn.execute(
            "select to_char(created_at, 'YYYY-MM') m from ops.query_ticket group by 1 order by count(*) desc, 1"
        ).fetchall()
    return [str(r[0]) for r in rows]


@pytest.fixture
def small(synced: SyncReport, generated: Settings, tmp_path: Path) -> Settings:
    """Three curated tasks and AF_TASK (a ticket may ask what it asks in another shape) as v1, and the
    reference world kept under .evalpkg where it is built already (else the session's own, built once)."""
    committed = release.load(PROJECT_ROOT / "tasks")
    base = [*[t for t in committed.tasks if t.provenance.source == "template"][:3], committed.by_id()[AF_TASK]]
    release.write(tmp_path, "v1", base, "snap", release.ChangeSet(added={t.id: "test" for t in base}))
    kept = generated.model_copy(update={"state_dir": PROJECT_ROOT / ".evalpkg", "tasks_dir": tmp_path})
    return kept if worlds.built(kept, (WORLD,)) else generated.model_copy(update={"tasks_dir": tmp_path})


def test_refresh_review_release_releases_only_approved_measured_tasks_and_refuses_failures(small: Settings) -> None:
    endpoint = Drafting()
    with serving(endpoint) as url:
        drafter = ModelDrafter(ModelClient(url, max_retries=0), "drafter-m")
        added = []
        for month in ticket_months(small):
            added += refresh(small, month, drafter=drafter).added
            golds = [c.task.gold_sql[0] for _, c in load_queue(small)]
            if len(added) >= 6 and any("'HBA1C'" in sql for sql in golds):
                break
    queue = {c.task.id: c for _, c in load_queue(small)}
    assert len(added) >= 6 and endpoint.requests == len(added)
    for cand in queue.values():  # the parts a curated task has; agreement not typed in
        task = cand.task
        assert task.outputs and task.answer_points and task.format_version == 2
        assert task.review.status == "pending" and task.review.agreement == 0.0
        assert {w.drafted_by for w in cand.wordings} == {"ticket", "model drafter-m"}
        assert task.question(Language.en, Complexity.colloquial) != task.question(Language.en, Complexity.plain)
    series = [c.task for c in queue.values() if "group by" in c.task.gold_sql[0].lower()]
    for t in series:  # a monthly series: a point on each month's number (column 1), row by row
        assert [(p.row, p.col) for p in t.answer_points] == [(r, 1) for r in range(len(t.answer_points))]

    # HbA1c above a threshold over all years: never 0, so it holds in any world once it claims no trap (the
    # trap tags of the others depend on the session's de-identification key: released or refused, with reasons)
    hba1c = next(tid for tid in added if "'HBA1C'" in queue[tid].task.gold_sql[0])
    counts = [
        t for t in added if t != hba1c and re.match(r"select count\((?!.*\bunit\b)", queue[t].task.gold_sql[0], re.I)
    ]
    zero, untagged = counts[0], counts[1]  # a premise that fails (all zero), a trap that cannot bite
    unworded, disagreeing = [t for t in added if t not in (hba1c, zero, untagged)][:2]
    natural = [hba1c, *(t for t in added if t not in (hba1c, zero, untagged, unworded, disagreeing))]
    path_of = {c.task.id: p for p, c in load_queue(small)}
    never = {"gold_sql": [queue[zero].task.gold_sql[0] + " and 1 = 0"]}
    for tid, change in ((zero, never), (untagged, {"tags": ["unit"]}), (hba1c, {"tags": []})):
        save(path_of[tid], queue[tid].model_copy(update={"task": queue[tid].task.model_copy(update=change)}))
    make_ready(small, [zero, untagged, *natural])
    make_ready(small, [disagreeing], agreeing=False)
    review(small, [unworded], "approve", "dr_wang", "clinician")
    review_wording(small, hba1c, "zh/plain", "dr_li", "clinician", "这是审核人自己改写的问题")
    # rewritten after the second annotation: that is void until measured again from the new wording
    annotate_queue(small, Annotation(annotator=SECOND, tasks={hba1c: Written(sql=queue[hba1c].task.gold_sql[0])}))

    said: list[str] = []
    out = release_queue(small, reference=(WORLD,), progress=said.append)
    print("\n".join(said))

    assert "wordings no reviewer approved: zh/colloquial" in out.held[unworded]
    assert "disagrees" in out.held[disagreeing]
    assert any("premise all_zero fails in the reference world" in why for why in out.refused[zero]), out.refused
    assert any("trap unit not applicable in the reference world" in why for why in out.refused[untagged])
    assert out.release is not None and out.release.version == "v2"
    released = {tid: t for tid, t in out.release.by_id().items() if t.provenance.source == "ticket"}
    assert hba1c in released and set(released) == set(natural) - set(out.refused), out.refused
    after = {c.task.id: c for _, c in load_queue(small)}
    for tid, task in released.items():  # every released wording is the one a reviewer approved
        assert after[tid].released_in == "v2" and not after[tid].unapproved()
        assert [v.text for v in task.variants] == [v.text for v in after[tid].task.variants]
        assert task.review.agreement == 1.0 and SECOND in task.review.annotators and task.review.status == "approved"
        assert task.outputs and task.answer_points
    assert released[hba1c].question(Language.zh, Complexity.plain) == "这是审核人自己改写的问题"
    for tid in out.refused:  # refused in the queue and said, with the reason, by the release checks
        assert any(line.startswith(f"refused {tid}: ") for line in said)
        assert after[tid].status == "rejected" and after[tid].decisions[-1].reviewer == "release-checks"
    assert set(release.changelog_entry(small.tasks_dir, "v2").added) == set(released)
    assert release_queue(small, reference=(WORLD,)).release is None  # the held ones are still waiting


@pytest.mark.parametrize(
    ("key", "text", "error"),
    [
        ("en/plain", None, "needs wording, no draft was written"),  # a placeholder is no wording
        ("fr/plain", "Quelle est", "is not one of"),  # no such wording
        ("en/plain", "How", "too short for a question"),
        ("en/plain", "SAME", "the same text as en/colloquial"),  # plain must differ from colloquial
    ],
)
def test_review_wording_refuses_what_is_not_a_wording(tmp_path: Path, key: str, text: str | None, error: str) -> None:
    task = release.load(PROJECT_ROOT / "tasks").tasks[0]
    wordings = [
        Wording(language=v.language, complexity=v.complexity, drafted_by=NEEDS_WORDING, approved_by=approved)
        for v in task.variants
        for approved in ["clinician dr_li" if v.complexity is Complexity.colloquial else None]
    ]
    cand = Candidate(month="2026-10", ticket_id=1, pattern="p", task=task, wordings=wordings)
    save(tmp_path / "review" / "2026-10" / f"{task.id}.json", cand)
    text = task.question(Language.en, Complexity.colloquial) if text == "SAME" else text
    with pytest.raises(UsageError, match=error):
        review_wording(Settings(tasks_dir=tmp_path), task.id, key, "dr_wang", "clinician", text)


def test_model_drafts_that_are_not_wordings_raise() -> None:
    class Junk(FakeEndpoint):
        def reply(self, request: dict[str, Any]) -> dict[str, Any]:
            return {"role": "assistant", "content": '{"zh": {"plain": "ok"}}'}

    with serving(Junk()) as url:
        drafter = ModelDrafter(ModelClient(url, max_retries=0), "m")
        with pytest.raises(ValueError, match="no zh/plain wording"):
            drafter.draft("统计一下", "select 1", [])
