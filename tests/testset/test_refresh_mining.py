"""Mining a month tells questions apart, on a month of tickets made for it: two drugs asked the same way are
two questions, one question asked four times keeps the answer that holds in the most places (snapshot and
reference worlds), then the largest (the NULL one dropped for its NULL, not as covered), a ticket that asks
what a released task asks in another SQL shape is covered, a "recent half year" counted from the ticket's
own date is refused, and a trap tag that does not bite in a reference world is dropped from the candidate,
which is kept; mining the month again changes nothing and says so; a release that refuses a candidate
mining passed says so."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from evalpkg.db import connect
from evalpkg.settings import EVAL_DB, Settings
from evalpkg.sql import fingerprint
from evalpkg.testset import refresh as refresh_module
from evalpkg.testset.models import Task
from evalpkg.testset.refresh import load_queue, refresh, release_queue
from evalpkg.testset.refresh_checks import Finding, findings
from evalpkg.testset.review_queue import save
from evalpkg.testset.ticket_task import relative_anchor
from tests.testset.test_refresh_cycle import GOOD, add_ticket, cli
from tests.testset.test_refresh_quality import AF_TASK, WORLD, make_ready, small  # noqa: F401  (the fixture)

TAKERS = "select count(distinct patient_id) as patients from t_med_order where ypdm = '{}' and zfbz = 0"
DAYS = "select sum(zyts) as days from t_zy_visit where visit_type = 'ZY' and ksdm = '0101' and ryrq >= '{}'"
HALF_YEAR = "最近半年用过二甲双胍的患者人数，作废的医嘱不算"
# "AF without an anticoagulant", as a ticket writes it: not the released AF_TASK's shape (no age group, no CTE)
AF = (
    "select count(distinct d.patient_id) as patients from t_diag_record d where d.icd10_code like 'I48%' and "
    "not exists (select 1 from t_med_order m join dict_drug g on g.ypdm = m.ypdm where m.patient_id = d.patient_id "
    "and g.ypfl = '{}' and m.zfbz = 0)"
)
GLUCOSE = (
    "select count(distinct patient_id) as patients from t_lab_result where xmdm = 'GLU' and bgzt = 'F' and "
    "(case when unit = 'mg/dL' then result_value / 18.0 else result_value end) > 7.0"
)
# name: (ticket id, SQL, request); created on consecutive days of April 2031, in this order
APRIL: dict[str, tuple[int, str, str]] = {
    "metformin": (9_000_101, TAKERS.format("Y0001"), ""),
    "glargine": (9_000_102, TAKERS.format("Y0003"), ""),  # the same shape, another drug: another question
    "days_since_2026": (9_000_103, DAYS.format("2026-01-01"), ""),  # first mined, the smaller answer
    "days_since_2000": (9_000_104, DAYS.format("2000-01-01"), ""),  # the same question, the larger answer
    "days_since_2090": (9_000_105, DAYS.format("2090-01-01"), ""),  # the same question, NULL: no rows summed
    "recent": (9_000_106, TAKERS.format("Y0001") + " and kssj >= '2030-10-23'", HALF_YEAR),
    "glucose": (9_000_107, GLUCOSE, ""),  # a unit trap that bites on the snapshot (old rows in mg/dL)
    "days_since_2010": (9_000_108, DAYS.format("2010-01-01"), ""),  # the same question: larger than 2026's
    "af": (9_000_109, AF.format("抗凝药"), "房颤病人没吃抗凝药的有多少"),  # what AF_TASK asks
}
ZERO_IN_WORLD = "days_since_2000"  # the largest on the snapshot, all 0 in the world (the test says so): least sturdy


def _one_tag_misses(real: Any, ticket_id: int, missed: dict[str, str]) -> Any:
    """The reference-world checks as they are, plus: the first tag of `ticket_id`'s candidate (one that bit on
    the snapshot) does not bite in the world, as happens under another key; the suite's world need not; and
    ZERO_IN_WORLD's answer is 0 there (which fails no check of a task without that premise)."""

    def checked(settings: Settings, tasks: list[Task], reference: Any, **kw: Any) -> dict[str, list[Finding]]:
        out: dict[str, list[Finding]] = real(settings, tasks, reference, **kw)
        for task in tasks:
            if task.provenance.ticket_id == APRIL[ZERO_IN_WORLD][0]:
                kw["answers"][task.id][-1] = [[0]]
            if task.provenance.ticket_id == ticket_id:
                assert task.tags, f"{task.id}: no tag bites on the snapshot; the test needs one"
                missed[task.id] = task.tags[0]
                out[task.id].append(Finding(f"trap {task.tags[0]} does not bite in the test's world", task.tags[0]))
        return out

    return checked


def test_mining_tells_questions_apart_keeps_the_sturdier_and_is_idempotent(
    small: Settings,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with connect(small.db_url(EVAL_DB)) as conn:
        for n, (tid, sql, request) in enumerate(APRIL.values()):
            add_ticket(conn, tid, datetime(2031, 4, 20 + n, 10), sql, request)
    missed: dict[str, str] = {}
    monkeypatch.setattr(refresh_module, "findings", _one_tag_misses(findings, APRIL["glucose"][0], missed))
    try:
        said: list[str] = []
        first = refresh(small, "2031-04", reference=(WORLD,), progress=said.append)
        again = refresh(small, "2031-04", reference=(WORLD,))
        code, out, exc = cli(small, "refresh", "--month", "2031-04", "--no-reference-worlds")  # as a maintainer sees it
    finally:
        with connect(small.db_url(EVAL_DB)) as conn:
            conn.execute("delete from ops.query_ticket where ticket_id >= 9000000")
    queue = {c.ticket_id: c for _, c in load_queue(small)}
    why = first.dropped_tickets
    ticket = {name: tid for name, (tid, _, _) in APRIL.items()}
    kept = {ticket[n] for n in ("metformin", "glargine", "days_since_2010", "glucose")}
    assert set(queue) == kept and sorted(first.added) == sorted(queue[t].task.id for t in kept), why
    # of one question asked four times: 2000's answer is the largest on the snapshot but 0 in the world, 2010's
    # holds in both and is larger than 2026's (first mined), 2090's is NULL
    for repeat in ("days_since_2026", ZERO_IN_WORLD):
        assert why[ticket[repeat]] == (
            f"already covered (the same question as ticket #{ticket['days_since_2010']}, "
            f"candidate {queue[ticket['days_since_2010']].task.id})"
        ), (repeat, why)
    assert why[ticket["af"]].startswith(
        f"already covered (asks what released task {AF_TASK} (template af_no_anticoagulant_age_group) asks: who "
        "has 'I48%' but no '抗凝药', in the same tables"
    ), why
    assert why[ticket["days_since_2090"]].startswith("no number in the result to check (its answer is NULL"), why
    assert why[ticket["recent"]] == (
        "a relative period on a fixed date ('最近半年' counted from the fixed date 2030-10-23, not "
        "(select pinned_now from meta.snapshot))"
    )
    # the tag that did not bite in a world is gone from the candidate, with a note; the candidate stays
    glucose = queue[ticket["glucose"]].task
    [(tid, tag)] = missed.items()
    assert tid == glucose.id and tag not in glucose.tags, glucose.tags
    assert f"tag {tag} dropped: trap {tag} does not bite in the test's world" in first.tags_dropped[glucose.id]
    assert "held in the reference worlds at mining (1 checked)" in glucose.maintenance_notes
    assert f"dropped ticket #{ticket['recent']}: a relative period" in "\n".join(first.details())
    assert said[-1] == first.summary() and "4 new candidates (checked in 1 reference worlds)" in said[-1]
    # mined again with nothing changed: the same candidates, the same reasons, and it says so
    assert again.added == [] and sorted(again.queued) == sorted(first.added)
    assert again.dropped_tickets == first.dropped_tickets
    assert "4 already in the queue (unchanged)" in again.summary()
    assert code == 0, (out, exc)
    for tid, why in first.dropped_tickets.items():
        assert f"dropped ticket #{tid}: {why}" in out, out
    assert all(f"in the queue already, unchanged: {t}" in out for t in first.added), out

    # a candidate mining passed that the release then refuses (here: its gold changed since) is said as such
    metformin = queue[ticket["metformin"]].task.id
    make_ready(small, [metformin])
    [(path, cand)] = [(p, c) for p, c in load_queue(small) if c.task.id == metformin]
    never = cand.task.model_copy(update={"gold_sql": [cand.task.gold_sql[0] + " and 1 = 0"]})
    save(path, cand.model_copy(update={"task": never}))
    dry = release_queue(small, reference=(WORLD,), dry_run=True)
    assert dry.refused[metformin][0].startswith("mining passed it; now refused: "), dry.refused


@pytest.mark.parametrize(
    ("a", "b", "same", "why"),
    [
        (TAKERS.format("Y0001"), TAKERS.format("Y0003"), False, "another drug is another question"),
        (DAYS.format("2026-01-01"), DAYS.format("2000-01-01"), True, "another period is the same question"),
        (DAYS.format("2026-01-01"), DAYS.format("2026-01-01").replace("'0101'", "'0201'"), False, "another department"),
        (GOOD, GOOD.replace("7.0", "8.0"), False, "another threshold is another question"),
        (GOOD + " limit 5", GOOD + " limit 10", True, "how many rows are shown is not what is asked"),
        (
            "select count(*) from t_med_order where kssj >= date '2031-04-01' - interval '6 months'",
            "select count(*) from t_med_order where kssj >= date '2031-05-01' - interval '3 months'",
            True,
            "an interval's length is a period",
        ),
    ],
)
def test_a_question_is_its_shape_and_the_literals_that_name_what_is_asked(a: str, b: str, same: bool, why: str) -> None:
    assert (fingerprint.question(a) == fingerprint.question(b)) is same, why
    assert fingerprint.pattern(a) == fingerprint.pattern(b) or not same, why  # the shape alone is coarser


ASKED = datetime(2031, 4, 20, 10)


@pytest.mark.parametrize(
    ("request_text", "sql", "refused", "why"),
    [
        (HALF_YEAR, APRIL["recent"][1], True, "'recent half year' counted from a fixed date"),
        (
            "用过二甲双胍的患者人数",
            TAKERS.format("Y0001") + " and kssj >= date '2031-04-18' - interval '6 months'",
            True,
            "an interval counted back from the ticket's own date",
        ),
        (
            HALF_YEAR,
            TAKERS.format("Y0001") + " and kssj >= (select pinned_now from meta.snapshot) - interval '6 months'",
            False,
            "anchored on the snapshot's now",
        ),
        ("2030年10月以来用过二甲双胍的患者人数", APRIL["recent"][1], False, "the wording states the absolute period"),
        ("心内科2031年3月出院人数", DAYS.format("2031-03-01"), False, "an absolute month, no relative words"),
        (
            "用过二甲双胍的患者人数",
            TAKERS.format("Y0001") + " and kssj >= date '2029-01-01' - interval '6 months'",
            False,
            "an interval from a date far from the ticket's: a fixed period",
        ),
        ("patients on metformin in the last 6 months", APRIL["recent"][1], True, "English relative words"),
        (HALF_YEAR, TAKERS.format("Y0001"), False, "no date in the SQL: all of time, not anchored on a day"),
    ],
)
def test_relative_periods_are_anchored_on_the_snapshot(request_text: str, sql: str, refused: bool, why: str) -> None:
    assert (relative_anchor(request_text, sql, ASKED) is not None) is refused, why


AF_LEFT_JOIN = (
    "select count(distinct d.patient_id) as patients from t_diag_record d left join (select m.patient_id from "
    "t_med_order m join dict_drug g on g.ypdm = m.ypdm where g.ypfl = '抗凝药' and m.zfbz = 0) a on a.patient_id "
    "= d.patient_id where d.icd10_code like 'I48%' and a.patient_id is null"
)
AF_NOT_IN = (
    "select count(distinct patient_id) as patients from t_diag_record where icd10_code like 'I48%' and patient_id "
    "not in (select m.patient_id from t_med_order m join dict_drug g on g.ypdm = m.ypdm where g.ypfl = '抗凝药')"
)


@pytest.mark.parametrize(
    ("sql", "covered", "why"),
    [
        (AF.format("抗凝药"), True, "AF without an anticoagulant: what the released task asks, another shape"),
        (AF_LEFT_JOIN, True, "the same, as LEFT JOIN ... IS NULL"),
        (AF_NOT_IN, True, "the same, as NOT IN"),
        (AF.format("抗血小板药"), False, "AF without an antiplatelet: the released task negates anticoagulants only"),
        (AF.format("抗凝药").replace("I48%", "I10%"), False, "another diagnosis: another population"),
        (AF.format("抗凝药").replace("not exists", "exists"), False, "AF with an anticoagulant: nothing is lacked"),
        (
            AF.format("抗凝药").replace("d where", "d join t_patient_info p on p.patient_id = d.patient_id where")
            + " and p.nlfz = '18-44'",
            False,
            "an age group the released task does not name",
        ),
    ],
)
def test_a_ticket_that_asks_what_a_released_task_asks_is_covered(sql: str, covered: bool, why: str) -> None:
    from evalpkg.settings import PROJECT_ROOT
    from evalpkg.testset import release
    from evalpkg.testset.same_meaning import meaning_repeat, released_negations
    from evalpkg.testset.ticket_task import candidate_task, rule_drafts

    released = released_negations(release.load(PROJECT_ROOT / "tasks").tasks)
    task = candidate_task(1, ASKED, sql, rule_drafts("房颤病人没吃抗凝药的有多少"), [], [[5]])
    said = meaning_repeat(task, released)
    assert (said is not None) is covered, (why, said)
    if covered:
        assert said is not None and said.startswith(f"asks what released task {AF_TASK} "), said


@pytest.mark.parametrize(
    ("answers", "expected", "why"),
    [
        ([[[42]], [[40]]], (2, 40.0), "holds in both: the smallest number anywhere"),
        ([[[90]], [[0]]], (1, 90.0), "all 0 in a world: holds in one place only"),
        ([[[90]], [[None]]], (1, 90.0), "NULL in a world"),
        ([[[90]], None], (1, 90.0), "the gold fails in a world"),
        ([[[90]], []], (1, 90.0), "no rows in a world"),
        ([[["2026-01", 3], ["2026-02", 0]], [["2026-01", 5]]], (2, 0.0), "a series with a 0 month still holds"),
    ],
)
def test_sturdiness_counts_where_the_answer_holds_then_its_smallest_number(
    answers: list[Any], expected: tuple[int, float], why: str
) -> None:
    assert refresh_module.sturdiness(answers) == expected, why


def test_the_sturdier_answer_is_the_one_holding_in_more_places_then_the_larger() -> None:
    everywhere_small = refresh_module.sturdiness([[[10]], [[12]]])
    snapshot_large = refresh_module.sturdiness([[[900]], [[0]]])
    everywhere_large = refresh_module.sturdiness([[[42]], [[50]]])
    assert sorted([snapshot_large, everywhere_small, everywhere_large], reverse=True) == [
        everywhere_large,
        everywhere_small,
        snapshot_large,
    ]


@pytest.mark.parametrize(
    ("sql", "anchor", "why"),
    [
        (
            TAKERS.format("Y0001") + " and kssj >= (select pinned_now from meta.snapshot) - interval '6 months'",
            "the snapshot's now, (select pinned_now from meta.snapshot): each snapshot's own period (the ticket was "
            "asked on 2031-04-20)",
            "counted back from the snapshot's now",
        ),
        (
            TAKERS.format("Y0001") + " and kssj >= date '2031-04-18' - interval '6 months'",
            "the fixed date 2031-04-18 (the ticket's own date): the period does not move with the snapshot",
            "counted back from the ticket's own date",
        ),
        (
            TAKERS.format("Y0001") + " and kssj >= date '2029-01-01' - interval '6 months'",
            "the fixed date 2029-01-01 (839 days before the ticket's date 2031-04-20): the period does not move "
            "with the snapshot",
            "counted from another fixed date",
        ),
        (
            DAYS.format("2026-01-01") + " and ryrq < '2027-01-01'",
            "none: fixed dates only (2026-01-01, 2027-01-01), an absolute period",
            "an absolute period",
        ),
        (TAKERS.format("Y0001"), "none: no date in the gold (all of time)", "no date"),
    ],
)
def test_the_review_shows_which_date_periods_count_from(sql: str, anchor: str, why: str) -> None:
    from evalpkg.testset.ticket_task import period_anchor

    assert period_anchor(sql, ASKED) == anchor, why


def test_a_released_candidate_shows_released_and_its_release_names_the_months(tmp_path: Any) -> None:
    from evalpkg.settings import PROJECT_ROOT
    from evalpkg.testset import release
    from evalpkg.testset.refresh_release import changelog_prose
    from evalpkg.testset.review_queue import Candidate, Decision

    task = release.load(PROJECT_ROOT / "tasks").tasks[0]
    approved = Decision(decision="approve", reviewer="dr_wang", role="clinician", at="2031-05-01T00:00:00+00:00")
    cand = Candidate(month="2031-04", ticket_id=1, pattern="p", task=task, decisions=[approved])
    assert cand.status == "approved"
    assert cand.model_copy(update={"released_in": "v2"}).status == "released"
    other = cand.model_copy(update={"month": "2031-03"})
    assert "mined from the query tickets of 2031-04 (1 from 2031-04)" in changelog_prose([cand], 6)
    assert "the query tickets of 2031-03 and 2031-04 (1 from 2031-03, 2 from 2031-04)" in changelog_prose(
        [cand, other, cand], 6
    )
