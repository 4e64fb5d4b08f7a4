"""Premise and discrimination checks on given gold results (no DB): every case names its reason."""

from __future__ import annotations

from typing import Any

import pytest

from evalpkg.sql.executor import QueryFailed, QueryResult
from evalpkg.testset import premises
from evalpkg.testset.models import Task
from tests.testset.test_models_and_fingerprints import task_dict

TOP = "select ksmc, count(*) as n from emr.t_zy_visit v join emr.dict_dept d using (ksdm) group by 1 order by 2 desc, 1"


def task(tid: str = "st-sample-001", **overrides: Any) -> Task:
    return Task.model_validate(task_dict(id=tid, **overrides))


def result(columns: list[str], rows: list[list[Any]]) -> QueryResult:
    return QueryResult(columns, rows, len(rows), False, 0.0)


def anomaly(template: str) -> Task:
    return task(
        "anom-sample-001",
        type="anomaly",
        provenance={"source": "template", "template_id": template, "generator_version": "t"},
    )


@pytest.mark.parametrize(
    ("t", "rows", "found", "why"),
    [
        (task(gold_sql=[f"{TOP} limit 10"]), 6, True, "a top 10 that returns 6 rows"),
        (task(gold_sql=[f"{TOP} limit 3"]), 3, False, "a top 3 with 3 rows"),
        (task(gold_sql=[TOP]), 2, False, "no LIMIT: no top N asserted"),
        (
            task(gold_sql=[f"{TOP} limit 10"], maintenance_notes="Fewer rows are expected in thin years."),
            6,
            False,
            "the notes say fewer rows are expected",
        ),
        (
            task(gold_sql=[f"{TOP} limit 10"], result={"empty_expected": True}),
            0,
            False,
            "an empty result is expected, so fewer rows are too",
        ),
    ],
)
def test_top_n(t: Task, rows: int, found: bool, why: str) -> None:
    got = premises.top_n(t, [result(["ksmc", "n"], [["x", 1]] * rows)])
    assert bool(got) is found, why


@pytest.mark.parametrize(
    ("template", "columns", "rows", "found", "why"),
    [
        (
            "anomaly_dept_admissions_month",
            ["dept_prev", "dept_this", "hospital_prev", "hospital_this"],
            [[0, 0, 80, 95]],
            True,
            "the department has 0 in both months; the hospital's change is not the one asserted",
        ),
        (
            "anomaly_dept_admissions_month",
            ["dept_prev", "dept_this", "hospital_prev", "hospital_this"],
            [[3, 7, 80, 80]],
            False,
            "the department changed",
        ),
        (
            "anomaly_outpatient_by_dept_month",
            ["ksmc", "prev_month", "this_month", "change"],
            [["a", 5, 8, 3], ["b", 8, 5, -3]],
            True,
            "departments moved but the total did not",
        ),
        (
            "anomaly_outpatient_by_dept_month",
            ["ksmc", "prev_month", "this_month", "change"],
            [["a", 5, 9, 4], ["b", 8, 5, -3]],
            False,
            "the total moved",
        ),
        (
            "anomaly_visits_month_by_type",
            ["mz_prev", "mz_this", "zy_prev", "zy_this"],
            [[100, 100, 20, 25]],
            False,
            "total visits changed (through inpatients)",
        ),
        (
            "anomaly_visits_month_by_type",
            ["mz_prev", "mz_this", "zy_prev", "zy_this"],
            [[100, 95, 20, 25]],
            True,
            "the two types cancel out: total unchanged",
        ),
        (
            "anomaly_lab_abnormal_rate_month",
            ["prev_tests", "prev_abnormal", "prev_pct", "this_tests", "this_abnormal", "this_pct"],
            [[10, 5, 50.0, 20, 10, 50.0]],
            True,
            "volumes changed, the asserted rate did not",
        ),
        (
            "anomaly_lab_abnormal_rate_month",
            ["prev_tests", "prev_abnormal", "prev_pct", "this_tests", "this_abnormal", "this_pct"],
            [[0, 0, None, 0, 0, None]],
            True,
            "no tests in either month: NULL rates",
        ),
        (
            "anomaly_los_change_quarter",
            ["dept", "prev_discharges", "prev_avg_los", "cur_discharges", "cur_avg_los"],
            [["全院", 90, 7.5, 95, 7.5], ["a", 9, 5.0, 9, 6.0]],
            True,
            "hospital ALOS (the total row) unchanged",
        ),
        (
            "anomaly_glu_mean_unit_switch",
            ["month", "raw_mean", "mean_mmol"],
            [["2020-01", 100.0, 5.6], ["2021-12", 5.7, 5.7]],
            False,
            "the raw mean fell over the series",
        ),
        (
            "new_anomaly_template",
            ["month", "value"],
            [["2020-01", 1]],
            True,
            "no prev/this columns: the asserted change cannot be checked",
        ),
    ],
)
def test_an_asserted_change_is_a_change(
    template: str, columns: list[str], rows: list[list[Any]], found: bool, why: str
) -> None:
    got = premises.change(anomaly(template), columns, rows)
    assert bool(got) is found, (why, got)


NUMBER = {"kind": "number", "row": 0, "col": 0}


@pytest.mark.parametrize(
    ("points", "rows", "found", "why"),
    [
        ([NUMBER], [[0, 5]], True, "the only number point is 0"),
        ([NUMBER, {**NUMBER, "col": 1}], [[0, 5]], False, "one point is not 0"),
        ([NUMBER], [[0.0]], True, "0.0 is 0"),
        ([NUMBER], [[None]], False, "NULL is not 0 (the determinism check names NULL points)"),
        (
            [{"kind": "text", "text": {"zh": "说明", "en": "explains"}}],
            [[0]],
            False,
            "no number points: nothing to check",
        ),
        ([{**NUMBER, "row": 3}], [[0]], False, "a point beyond the result is the determinism check's"),
    ],
)
def test_all_zero_answers(points: list[dict[str, Any]], rows: list[list[Any]], found: bool, why: str) -> None:
    assert bool(premises.all_zero(task(answer_points=points), rows)) is found, why


def test_all_zero_says_whether_the_whole_gold_is_zero() -> None:
    assert "so is every number" in premises.all_zero(task(), [[0, 0]])[0].detail
    assert "other numbers" in premises.all_zero(task(), [[0, 7]])[0].detail


def _template_task(tid: str, template: str | None, tol: float = 1e-6) -> Task:
    source = {"source": "template", "template_id": template} if template else {"source": "ticket", "ticket_id": 1}
    return task(tid, provenance={**source, "generator_version": "t"}, result={"numeric_tolerance": tol})


@pytest.mark.parametrize(
    ("a", "b", "rows_b", "found", "why"),
    [
        (_template_task("st-t-001", "t"), _template_task("st-t-002", "t"), [[5.0]], True, "same template, same answer"),
        (
            _template_task("st-t-001", "t"),
            _template_task("st-t-002", "t"),
            [[6.0]],
            False,
            "same template, other answer",
        ),
        (
            _template_task("st-t-001", "t", 0.01),
            _template_task("st-t-002", "t"),
            [[5.02]],
            True,
            "within the task's tolerance",
        ),
        (
            _template_task("st-t-001", "t"),
            _template_task("st-u-001", "u"),
            [[5.0]],
            False,
            "different templates may agree",
        ),
        (
            _template_task("st-t-001", None),
            _template_task("st-t-002", None),
            [[5.0]],
            False,
            "ticket tasks have no template",
        ),
    ],
)
def test_same_answers_within_a_template(a: Task, b: Task, rows_b: list[list[Any]], found: bool, why: str) -> None:
    got = premises.same_answers([(a, result(["v"], [[5.0]])), (b, result(["v"], rows_b))])
    assert [f.task_id for f in got] == ([b.id] if found else []), why


def test_check_skips_golds_that_fail_and_finds_the_rest() -> None:
    broken = task("st-broken-001", gold_sql=["select nope"])
    top = task("st-top-001", gold_sql=[f"{TOP} limit 10"], answer_points=[{"kind": "number", "row": 0, "col": 1}])

    def run(sql: str) -> QueryResult:
        if "nope" in sql:
            raise QueryFailed("column nope does not exist")
        return result(["ksmc", "n"], [["a", 0], ["b", 0]])

    found = premises.check([broken, top], run)
    assert {(f.task_id, f.check) for f in found} == {("st-top-001", "top_n"), ("st-top-001", "all_zero")}
