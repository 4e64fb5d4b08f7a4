"""Mining a month tells questions apart, on a month of tickets made for it: two drugs asked the same way are
two questions, one question asked three times keeps its largest answer (the NULL one dropped for its NULL,
not as covered), a "recent half year" counted from the ticket's own date is refused, and a trap tag that
does not bite in a reference world is dropped from the candidate, which is kept; mining the month again
changes nothing and says so; a release that refuses a candidate mining passed says so."""

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
from tests.testset.test_refresh_quality import WORLD, make_ready, small  # noqa: F401  (the fixture)

TAKERS = "select count(distinct patient_id) as patients from t_med_order where ypdm = '{}' and zfbz = 0"
DAYS = "select sum(zyts) as days from t_zy_visit where visit_type = 'ZY' and ksdm = '0101' and ryrq >= '{}'"
HALF_YEAR = "最近半年用过二甲双胍的患者人数，作废的医嘱不算"
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
}


def _one_tag_misses(real: Any, ticket_id: int, missed: dict[str, str]) -> Any:
    """The reference-world checks as they are, plus: the first tag of `ticket_id`'s candidate (one that bit on
    the snapshot) does not bite in the world, as happens under another key; the suite's world need not."""

    def checked(settings: Settings, tasks: list[Task], reference: Any, **kw: Any) -> dict[str, list[Finding]]:
        out: dict[str, list[Finding]] = real(settings, tasks, reference, **kw)
        for task in tasks:
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
    kept = {ticket[n] for n in ("metformin", "glargine", "days_since_2000", "glucose")}
    assert set(queue) == kept and sorted(first.added) == sorted(queue[t].task.id for t in kept), why
    assert why[ticket["days_since_2026"]] == (
        f"already covered (the same question as ticket #{ticket['days_since_2000']}, "
        f"candidate {queue[ticket['days_since_2000']].task.id})"
    )
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
