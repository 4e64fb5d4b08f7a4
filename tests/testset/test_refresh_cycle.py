"""The monthly cycle as a maintainer runs it, on a month of tickets made for it: a ticket whose answer is 0,
one with a cut-off the clinical review withdrew and one that repeats a released task are dropped at
mining, each with its reason; the good ones are worded in one command each (a file with some of the
wordings approves none), approved by someone other than their second annotator, measured (a wording
changed after that voids the measure until it is measured again), listed by a dry run that writes nothing
and exits as the release does, then released with who wrote each wording; a release that refuses every
candidate exits 1, and its dry run too, each refusal said once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalpkg.cli_testset import app
from evalpkg.db import connect
from evalpkg.errors import EvalpkgError, UsageError
from evalpkg.settings import EVAL_DB, Settings
from evalpkg.testset import refresh as refresh_module
from evalpkg.testset import release
from evalpkg.testset.annotate import Annotation, Written
from evalpkg.testset.models import Annotator
from evalpkg.testset.refresh import load_queue, refresh, release_queue
from evalpkg.testset.refresh_release import held_because
from evalpkg.testset.review_queue import Candidate, save
from tests.testset.test_refresh_quality import WORLD, small  # noqa: F401  (the fixture)

MONTH = "2031-01"  # after every generated ticket: this month holds only the tickets below
GOOD = (
    "select count(distinct patient_id) as patients from t_lab_result where xmdm = 'HBA1C' and bgzt = 'F' "
    "and result_value > 7.0"
)
ZERO = "select count(*) as visits from t_zy_visit where visit_type = 'MZ' and ksdm = 'no-such-dept'"
WITHDRAWN = (
    "select count(distinct patient_id) as patients from t_lab_result where xmdm = 'GLU' and bgzt = 'F' and "
    "(case when unit = 'mg/dL' then result_value / 18.0 else result_value end) > 11.1"
)
SECOND = Annotator(role="analyst", id="analyst_zhao")


@pytest.fixture
def month_of_tickets(small: Settings) -> Iterator[tuple[Settings, dict[str, int]]]:  # noqa: F811
    repeat = release.load(small.tasks_dir).tasks[0].gold_sql[0]
    tickets = {"good": (GOOD, 9_000_001), "zero": (ZERO, 9_000_002), "withdrawn": (WITHDRAWN, 9_000_003)}
    tickets["repeat"] = (repeat, 9_000_004)
    with connect(small.db_url(EVAL_DB)) as conn:
        for n, (sql, tid) in enumerate(tickets.values()):
            add_ticket(conn, tid, datetime(2031, 1, 5 + n, 10), sql)
    try:
        yield small, {name: tid for name, (_, tid) in tickets.items()}
    finally:
        with connect(small.db_url(EVAL_DB)) as conn:
            conn.execute("delete from ops.query_ticket where ticket_id >= 9000000")


def add_ticket(conn: Any, ticket_id: int, created: datetime, sql: str, request: str = "") -> None:
    conn.execute(
        "insert into ops.query_ticket (ticket_id, created_at, ksdm, request_text, sql_text, status) "
        "values (%s, %s, '0101', %s, %s, 'done')",
        (ticket_id, created, request or f"请帮忙统计一下第{ticket_id % 100}个问题的人数", sql),
    )


def cli(settings: Settings, *args: str) -> tuple[int, str, BaseException | None]:
    env = {"EVALPKG_PG_URL": settings.admin_url, "EVALPKG_TASKS_DIR": str(settings.tasks_dir)}
    result = CliRunner().invoke(app, list(args), env=env)
    code = result.exception.exit_code if isinstance(result.exception, EvalpkgError) else result.exit_code
    return code, result.output, result.exception  # the exit code main() gives (2 for a usage error)


def release_in_one_world(monkeypatch: pytest.MonkeyPatch) -> None:
    """`release` checks all six reference worlds; the test's one keeps it short."""
    monkeypatch.setattr(refresh_module, "release_queue", partial(release_queue, reference=(WORLD,)))


def queued(settings: Settings, task_id: str) -> Candidate:
    return next(c for _, c in load_queue(settings) if c.task.id == task_id)


def files(settings: Settings) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(settings.tasks_dir.rglob("*")) if p.is_file()}


def test_a_month_from_mining_to_release(
    month_of_tickets: tuple[Settings, dict[str, int]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, ticket = month_of_tickets
    report = refresh(settings, MONTH, reference=(WORLD,))
    why = report.dropped_tickets
    assert why[ticket["zero"]].startswith("its answer is 0 on the snapshot"), why
    assert why[ticket["withdrawn"]].startswith("a withdrawn threshold: GLU cut-off 11.1"), why
    assert why[ticket["repeat"]].startswith("already covered (the same question as released task "), why
    assert ticket["good"] not in why and len(report.added) == 1, report
    [tid] = report.added
    [cand] = [c for _, c in load_queue(settings) if c.task.id == tid]
    # without a drafting model: the clinician's request as the zh colloquial wording, no SQL read aloud
    assert {w.key: w.drafted_by for w in cand.wordings} == {
        **{w.key: "needs wording" for w in cand.wordings},
        "zh/colloquial": "ticket",
    }
    assert not [v.text for v in cand.task.variants if "select" in v.text.lower() or "t_lab_result" in v.text]

    # an option the action does not take is a usage error, never an approval
    code, _, exc = cli(settings, "review", tid, "--text", "统计人数", "--reviewer", "dr_wang", "--role", "clinician")
    assert isinstance(exc, UsageError) and "--text: does not apply to a decision" in str(exc)
    assert load_queue(settings)[0][1].decisions == []

    # a file with some of the wordings approves none of them (it would approve those by accident)
    (tmp_path / "some.json").write_text(json.dumps({"en/plain": "How many patients have HbA1c above 7.0%?"}))
    before = files(settings)
    code, _, exc = cli(
        settings,
        "review",
        tid,
        "--wordings",
        str(tmp_path / "some.json"),
        "--reviewer",
        "dr_wang",
        "--role",
        "clinician",
    )
    assert code == 2 and "holds 1 of the 6 wordings" in str(exc) and "without zh/colloquial, zh/plain" in str(exc)
    assert files(settings) == before

    # every wording in one command: rewritten where given, as drafted where null
    texts = {w.key: None if w.key == "zh/colloquial" else f"{w.key}: HbA1c above 7.0% patients" for w in cand.wordings}
    (tmp_path / "wordings.json").write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    code, out, exc = cli(
        settings,
        "review",
        tid,
        "--wordings",
        str(tmp_path / "wordings.json"),
        "--reviewer",
        "dr_wang",
        "--role",
        "clinician",
    )
    assert code == 0, (out, exc)
    code, out, _ = cli(settings, "review", tid, "--show")
    assert "[written by clinician dr_wang; approved by clinician dr_wang]" in out
    assert "[drafted: ticket; approved by clinician dr_wang]" in out
    assert f"ticket request (source material): {cand.request}" in out

    # the second annotator may not approve what they annotated
    from evalpkg.testset.refresh import annotate_queue, review

    annotation = Annotation(annotator=SECOND, tasks={tid: Written(sql=GOOD)})
    annotate_queue(settings, annotation)
    with pytest.raises(UsageError, match="wrote the second annotation"):
        review(settings, [tid], "approve", SECOND.id, "analyst")
    review(settings, [tid], "approve", "dr_wang", "clinician")

    # a wording changed after the second annotation voids it (the annotator read the old one) until measured again
    from evalpkg.testset.refresh import review_wording

    review_wording(settings, tid, "en/plain", SECOND.id, "analyst", "How many patients had an HbA1c above 7.0%?")
    voided = queued(settings, tid)
    assert voided.second_annotation is not None and voided.second_annotation.agreement == 1.0
    assert voided.second_annotation.voided == "en/plain rewritten by analyst analyst_zhao after it was measured"
    assert "no longer stands" in (held_because(voided) or "")
    _, out, _ = cli(settings, "review", tid, "--show")
    assert "agreement 1.00 (match), VOID: en/plain rewritten by analyst analyst_zhao" in out
    review_wording(settings, tid, "en/plain", "dr_wang", "clinician", "How many patients had an HbA1c above 7.0%?")
    kept = queued(settings, tid).second_annotation
    assert kept is not None and kept.voided.startswith("en/plain rewritten by analyst")  # the same text: still void
    [again] = annotate_queue(settings, annotation)
    assert again.second_annotation is not None and not again.second_annotation.voided and not held_because(again)

    before = sorted(p.name for p in settings.tasks_dir.rglob("*"))
    dry = release_queue(settings, reference=(WORLD,), dry_run=True)
    assert dry.passed == [tid] and dry.release is None
    assert sorted(p.name for p in settings.tasks_dir.rglob("*")) == before  # nothing written

    # the dry run says what the release does and exits as it does, writing nothing
    release_in_one_world(monkeypatch)
    before_files = files(settings)
    dry_code, dry_out, _ = cli(settings, "release", "--dry-run")
    assert f"would release {tid} in v2" in dry_out and files(settings) == before_files
    code, out, exc = cli(settings, "release")
    assert (code, dry_code) == (0, 0), (out, exc)
    record = release.changelog_entry(settings.tasks_dir, "v2").added[tid]
    assert "6 wordings approved (1 drafted from the ticket, 5 written by a reviewer)" in record, record
    # the release's CHANGELOG section names the ticket month; the queue says the candidate is released
    section = (settings.tasks_dir / "CHANGELOG.md").read_text(encoding="utf-8").split("\n## ")[1]
    assert section.startswith("v2 ") and f"1 task(s) mined from the query tickets of {MONTH}" in section, section
    _, listed, _ = cli(settings, "review")
    assert listed.startswith(f"released  {tid}"), listed
    _, out, _ = cli(settings, "review", tid, "--show")
    assert f"{tid} (released in v2; ticket #{ticket['good']}" in out, out
    assert "  periods count from: none: no date in the gold (all of time)" in out, out


def test_a_rejected_candidate_covers_nothing(month_of_tickets: tuple[Settings, dict[str, int]]) -> None:
    settings, _ = month_of_tickets
    inpatients = "select count(*) as stays from t_zy_visit where visit_type = 'ZY' and ksdm = '{}'"
    with connect(settings.db_url(EVAL_DB)) as conn:
        add_ticket(conn, 9_000_011, datetime(2031, 2, 3, 9), inpatients.format("0101"))
        add_ticket(conn, 9_000_021, datetime(2031, 3, 3, 9), inpatients.format("0101"))  # the same question
    [first] = refresh(settings, "2031-02", reference=()).added
    from evalpkg.testset.refresh import review

    review(settings, [first], "reject", "dr_wang", "clinician", "asked the wrong way")
    again = refresh(settings, "2031-03", reference=())
    assert len(again.added) == 1 and 9_000_021 not in again.dropped_tickets, again.dropped_tickets


def test_a_dry_run_exits_as_the_release_that_refuses_every_candidate(
    month_of_tickets: tuple[Settings, dict[str, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every candidate refused: the release exits 1 and so does its dry run, each refusal said once."""
    from evalpkg.testset.refresh import annotate_queue, review, review_wordings

    settings, _ = month_of_tickets
    [tid] = refresh(settings, MONTH).added
    [(path, cand)] = [(p, c) for p, c in load_queue(settings) if c.task.id == tid]
    texts = {w.key: None if w.key == "zh/colloquial" else f"{w.key}: HbA1c above 7.0% patients" for w in cand.wordings}
    review_wordings(settings, tid, texts, "dr_wang", "clinician")
    annotate_queue(settings, Annotation(annotator=SECOND, tasks={tid: Written(sql=GOOD)}))
    review(settings, [tid], "approve", "dr_wang", "clinician")
    [(path, cand)] = [(p, c) for p, c in load_queue(settings) if c.task.id == tid]
    never = cand.task.model_copy(update={"gold_sql": [cand.task.gold_sql[0] + " and 1 = 0"]})  # no answer anywhere
    save(path, cand.model_copy(update={"task": never}))

    release_in_one_world(monkeypatch)
    before = files(settings)
    dry_code, dry_out, _ = cli(settings, "release", "--dry-run")
    assert files(settings) == before  # nothing written, the refusal not recorded either
    code, out, exc = cli(settings, "release")
    assert (dry_code, code) == (1, 1), (dry_out, out)
    assert isinstance(exc, EvalpkgError) and "refused 1 candidate(s)" in str(exc) and tid not in str(exc)
    for said in (dry_out, out):  # one line per refusal, the same in both
        [line] = [line for line in said.splitlines() if tid in line]
        assert line.startswith(f"refused {tid}: "), said
    assert [line for line in dry_out.splitlines() if tid in line] == [line for line in out.splitlines() if tid in line]
    assert queued(settings, tid).status == "rejected"


def test_an_agreement_only_the_snapshot_gives_does_not_stand(month_of_tickets: tuple[Settings, dict[str, int]]) -> None:
    """A second annotation that writes in the snapshot's own answer agrees there and nowhere else: measured in
    the reference worlds too (as the CLI does), it is no agreement (the release holds the candidate), and the
    world it first differs in is named; the annotator's real query agrees in every world."""
    from evalpkg.sql.gold import gold_runner
    from evalpkg.testset.refresh import annotate_queue

    settings, _ = month_of_tickets
    [tid] = refresh(settings, MONTH, reference=()).added
    with gold_runner(settings) as golds:
        [[patients]] = golds.result(queued(settings, tid).task.gold_sql[0]).rows
        [[shifted]] = golds.result("select sum(extract(epoch from cysj))::text from t_lab_result").rows
    # The snapshot's number where the snapshot's dates are, another elsewhere: a world under another key can hold
    # the same count by chance, not the same date shifts of every patient.
    only_here = (
        f"select case when (select sum(extract(epoch from cysj))::text from t_lab_result) = '{shifted}' "
        f"then {patients} else -1 end as patients"
    )
    written_in = Annotation(annotator=SECOND, tasks={tid: Written(sql=only_here)})
    [snapshot_only] = annotate_queue(settings, written_in)
    assert snapshot_only.second_annotation is not None
    assert snapshot_only.second_annotation.agreement == 1.0, snapshot_only.second_annotation.detail
    [in_worlds] = annotate_queue(settings, written_in, reference=(WORLD,))
    second = in_worlds.second_annotation
    assert second is not None and second.worlds == ["snapshot", WORLD.label()]
    assert second.agreement == 0.0 and second.detail.startswith(f"{WORLD.label()}: "), second.detail
    [real] = annotate_queue(settings, Annotation(annotator=SECOND, tasks={tid: Written(sql=GOOD)}), reference=(WORLD,))
    assert real.second_annotation is not None and real.second_annotation.agreement == 1.0
