"""The monthly cycle as a maintainer runs it, on a month of tickets made for it: a ticket whose answer is 0,
one with a cut-off the clinical review withdrew and one that repeats a released task are dropped at
mining, each with its reason; the good ones are worded in one command each, approved by someone other
than their second annotator, measured, listed by a dry run that writes nothing, then released."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalpkg.cli_testset import app
from evalpkg.db import connect
from evalpkg.errors import UsageError
from evalpkg.settings import EVAL_DB, Settings
from evalpkg.testset import release
from evalpkg.testset.annotate import Annotation, Written
from evalpkg.testset.models import Annotator
from evalpkg.testset.refresh import load_queue, refresh, release_queue
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
    return result.exit_code, result.output, result.exception


def test_a_month_from_mining_to_release(month_of_tickets: tuple[Settings, dict[str, int]], tmp_path: Path) -> None:
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

    annotate_queue(settings, Annotation(annotator=SECOND, tasks={tid: Written(sql=GOOD)}))
    with pytest.raises(UsageError, match="wrote the second annotation"):
        review(settings, [tid], "approve", SECOND.id, "analyst")
    review(settings, [tid], "approve", "dr_wang", "clinician")

    before = sorted(p.name for p in settings.tasks_dir.rglob("*"))
    dry = release_queue(settings, reference=(WORLD,), dry_run=True)
    assert dry.passed == [tid] and dry.release is None
    assert sorted(p.name for p in settings.tasks_dir.rglob("*")) == before  # nothing written

    out_release = release_queue(settings, reference=(WORLD,))
    assert out_release.release is not None and tid in out_release.release.by_id()


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
