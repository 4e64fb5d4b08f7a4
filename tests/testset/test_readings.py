"""The alternative-gold audit: how a gold reads the dictionary's rules, which alternatives need a recorded
reason, what the dictionary rules out, and graded turns that repeat another's."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalpkg.testset import readings, release
from evalpkg.testset.models import Task
from evalpkg.testset.readings import AGE, CUT_OFF, REPORT_STATUS, VOIDED_ORDERS, problems, reading

TASKS = Path(__file__).resolve().parents[2] / "tasks"
LAB = "select count(distinct patient_id) from emr.t_lab_result l where l.xmdm = 'GLU' "


@pytest.mark.parametrize(
    ("sql", "rule", "expected", "why"),
    [
        (LAB + "and l.bgzt = 'F'", REPORT_STATUS, "final reports", "final reports only"),
        (LAB + "and l.bgzt <> 'C'", REPORT_STATUS, "final reports", "not voided is final: bgzt holds F or C"),
        (LAB + "and l.bgzt is distinct from 'C'", REPORT_STATUS, "final reports", "the NULL-safe form"),
        (LAB, REPORT_STATUS, "voided reports counted", "no report status at all"),
        (LAB + "and l.bgzt = 'C'", REPORT_STATUS, "voided reports asked", "a question about voided reports"),
        ("select 1 from t_med_order o where o.zfbz = 0", VOIDED_ORDERS, "voided orders excluded", "valid orders"),
        (
            "select 1 from t_med_order m where coalesce(m.zfbz, 0) <> 1",
            VOIDED_ORDERS,
            "voided orders excluded",
            "the NULL-safe form",
        ),
        ("select 1 from emr.t_med_order o", VOIDED_ORDERS, "voided orders counted", "no voided flag"),
        (
            LAB + "and bgzt = 'F' and (case when unit = 'mg/dL' then result_value / 18.0 else result_value end) > 7",
            CUT_OFF,
            "converted to mmol/L",
            "mg/dL converted",
        ),
        (
            LAB + "and bgzt = 'F' and ((unit = 'mg/dL' and result_value >= 126) or (unit <> 'mg/dL' and "
            "result_value >= 7))",
            CUT_OFF,
            "mg/dL cut-off",
            "the cut-off as clinicians write it",
        ),
        ("select 1 from t_patient_info p where p.nlfz = '65-89'", AGE, "at the snapshot", "the dictionary's group"),
        (
            "select 1 from t_zy_visit v join t_patient_info p using (patient_id) where "
            "extract(year from v.ryrq) - p.csnf >= 65",
            AGE,
            "at the event",
            "the age at admission",
        ),
        (
            "select 1 from t_zy_visit v join t_patient_info p using (patient_id) where (p.nlfz = '90+' or "
            "extract(year from v.ryrq) - p.csnf >= 65)",
            AGE,
            "at the event and at the snapshot",
            "either",
        ),
        ("select count(*) from t_zy_visit", AGE, None, "no age: the rule is not touched"),
    ],
)
def test_a_gold_reads_each_rule_it_touches(sql: str, rule: str, expected: str | None, why: str) -> None:
    assert reading(sql).get(rule) == expected, why


@pytest.fixture(scope="module")
def latest() -> release.Release:
    return release.load(TASKS)


def _with_alternative(task: Task, sql: str) -> Task:
    return task.model_copy(update={"gold_sql": [task.gold_sql[0], sql]})


def test_the_latest_release_has_no_problem_and_every_alternative_that_differs_has_its_reason(
    latest: release.Release,
) -> None:
    assert readings.held(latest.version), "the latest release is held to the audit"
    assert problems(latest.tasks, latest.version) == []
    assert all(why not in ("no reason", "ruled out") for *_, why in readings.table(latest.tasks))


def _one_of(latest: release.Release, template: str) -> Task:
    return next(t for t in latest.tasks if readings.template_of(t) == template)


@pytest.mark.parametrize(
    ("break_it", "expected", "why"),
    [
        (
            lambda t: _with_alternative(t, t.gold_sql[0].replace("bgzt = 'F' and ", "")),
            "report status read as 'voided reports counted'",
            "an alternative counting voided reports contradicts the dictionary",
        ),
        (
            lambda t: t.model_copy(update={"id": "copy-001"}),
            "repeats the graded turn",
            "the same question twice weighs twice",
        ),
    ],
)
def test_breaking_a_released_task_is_a_problem(
    latest: release.Release, break_it: object, expected: str, why: str
) -> None:
    task = _one_of(latest, "clar_poor_glycemic_control")
    broken = break_it(task)  # type: ignore[operator]
    found = problems([*latest.tasks, broken], latest.version)
    assert any(expected in p for p in found), (why, found)


def test_a_difference_needs_its_reason_and_a_reason_nothing_uses_is_stale(latest: release.Release) -> None:
    cut_offs = [t for t in latest.tasks if readings.template_of(t) == "glu_results_above_threshold_year"]
    reasons = readings.recorded()
    without = {t: r for t, r in reasons.items() if t != "glu_results_above_threshold_year"}
    found = problems(cut_offs, latest.version, without)
    assert found and all("no reason is recorded for template glu_results_above_threshold_year" in p for p in found)
    single = [t.model_copy(update={"gold_sql": t.gold_sql[:1]}) for t in cut_offs]
    assert problems(single, latest.version, reasons) == [
        "readings.json: the reason for glu_results_above_threshold_year's cut-off is stale (no alternative of it "
        "differs there)"
    ]


def test_releases_before_the_audit_stay_as_they_were_cut() -> None:
    v10 = release.load(TASKS, "v10")
    assert problems(v10.tasks, "v10") == []
    assert problems(v10.tasks, readings.READINGS_FROM), "v10 itself would not pass: the audit found what v11 fixed"
