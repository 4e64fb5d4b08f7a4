"""Premise and discrimination checks on given gold results (no DB): every case names its reason."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from evalpkg.sql.executor import QueryFailed, QueryResult
from evalpkg.sql.parse import parse_statement
from evalpkg.testset import build, premises, release
from evalpkg.testset.models import Premise, Task
from evalpkg.testset.params import Value, _month
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
            task(gold_sql=[f"{TOP} limit 10"], maintenance_notes="Fewer rows are expected in thin years."),
            0,
            True,
            "fewer rows are expected, but none qualifies: the list the question asks for is empty here",
        ),
        (
            task(gold_sql=[TOP], maintenance_notes="Fewer rows are expected when few departments qualify."),
            0,
            True,
            "no LIMIT, but the notes say the data decides the list's length, and it left none",
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


# --- stated premises (models.Premise): the criterion a template's question asserts ---

VISITS = ["prev_visits", "this_visits"]
SUBSTANTIAL = {"kind": "change", "measure": "visits", "min_relative": 0.25, "min_absolute": 10, "unit": "visits"}
COUNTED = {**SUBSTANTIAL, "min_relative": 0.2, "counts_events": True}


def stating(premise: dict[str, Any], tid: str = "anom-stated-001") -> Task:
    return task(tid, type="anomaly", premise=premise, format_version=3)


@pytest.mark.parametrize(
    ("premise", "columns", "rows", "unmet", "why"),
    [
        (SUBSTANTIAL, VISITS, [[44, 38]], "under 25%, under 10 visits", "44 -> 38 (-14%) is a normal monthly swing"),
        (SUBSTANTIAL, VISITS, [[44, 20]], "", "44 -> 20 (-55%, 24 visits) is substantial"),
        (SUBSTANTIAL, VISITS, [[8, 2]], "under 10 visits", "-75% on 8 visits is below the count"),
        (SUBSTANTIAL, VISITS, [[200, 185]], "under 25%", "15 visits are 7.5% of 200"),
        (SUBSTANTIAL, VISITS, [[40, 50]], "", "exactly 25% and 10 visits meet 'at least'"),
        (SUBSTANTIAL, VISITS, [[0, 12]], "", "from 0: any rise is relative enough; 12 visits meet the count"),
        (SUBSTANTIAL, VISITS, [[None, 12]], "NULL", "a NULL period cannot show the change"),
        ({**SUBSTANTIAL, "direction": "down"}, VISITS, [[30, 45]], "not down", "'dropped' but it rose"),
        ({**SUBSTANTIAL, "direction": "down"}, VISITS, [[45, 30]], "", "'dropped' and it fell 33%"),
        ({**SUBSTANTIAL, "direction": "up"}, VISITS, [[45, 30]], "not up", "'rose' but it fell"),
        ({"kind": "change", "measure": "visits"}, VISITS, [[5, 5]], "no change", "no thresholds: still a change"),
        (
            {**SUBSTANTIAL, "measure": "*"},
            ["mz_prev", "mz_this", "zy_prev", "zy_this"],
            [[30, 45, 10, 5]],
            "",
            "'*' sums every pair: 40 -> 50",
        ),
        (
            {**SUBSTANTIAL, "rows": "first", "measure": "los", "min_absolute": 0.5, "min_relative": 0.1},
            ["dept", "prev_los", "cur_los"],
            [["全院", 8.0, 8.2], ["a", 4.0, 9.0]],
            "under 10%",
            "'first' reads the total row only, not the department that moved",
        ),
        (
            {"kind": "change", "measure": "raw_mean", "rows": "series", "direction": "down", "min_relative": 0.25},
            ["month", "raw_mean"],
            [["2020-01", 105.7], ["2020-06", 100.0], ["2021-12", 11.5]],
            "",
            "'series' compares the first and the last row",
        ),
        (SUBSTANTIAL, ["month", "n"], [["2020-01", 1]], "no such measure", "the gold lacks the stated measure"),
        (COUNTED, VISITS, [[44, 20]], "", "44 -> 20: 24 visits are 3.0 standard errors of chance"),
        (COUNTED, VISITS, [[60, 48]], "within chance (1.2 < 2", "-20% of 60 visits: two quiet months do that"),
        (COUNTED, VISITS, [[14, 4]], "", "10 of 18 visits: 2.4 standard errors, beyond chance"),
        (SUBSTANTIAL, VISITS, [[60, 45]], "", "not a count of events: the chance rule does not apply"),
        ({"kind": "none"}, VISITS, [[44, 44]], "", "worded to assert nothing: the same count in both periods is fine"),
        ({"kind": "none"}, ["month", "n"], [["2020-01", 1]], "", "asserting nothing needs no measure to check"),
    ],
)
def test_a_stated_premise_holds_only_when_the_data_meet_it(
    premise: dict[str, Any], columns: list[str], rows: list[list[Any]], unmet: str, why: str
) -> None:
    got = premises.stated(stating(premise), columns, rows)
    if unmet:
        assert len(got) == 1 and got[0].check == "premise" and unmet in got[0].detail, (why, got)
    else:
        assert got == [], why


def test_a_change_premise_names_its_measure() -> None:
    with pytest.raises(ValueError, match="names its measure"):
        Premise(kind="change")


def test_a_failed_premise_names_the_criterion_and_the_numbers() -> None:
    (found,) = premises.stated(stating(SUBSTANTIAL), VISITS, [[44, 38]])
    for part in ("anom-stated-001", "at least 25%", "at least 10 visits", "from 44 to 38", "-6 visits", "-13.6%"):
        assert part in found.line(), (part, found.line())


def test_check_holds_a_stated_premise_instead_of_the_bare_change() -> None:
    stated_task = task(
        "anom-stated-001", type="anomaly", premise=SUBSTANTIAL, format_version=3, gold_sql=["select 1 as stated"]
    )
    legacy = anomaly("anomaly_outpatient_by_dept_month")  # released before v7: no premise, any change
    # a non-anomaly question may assert something too ("dropped"): its stated premise is held as well
    other = task("ts-stated-001", premise=SUBSTANTIAL, format_version=3, gold_sql=["select 2 as other"])

    def run(sql: str) -> QueryResult:
        return result(VISITS, [[44, 38]])

    found = {(f.task_id, f.check) for f in premises.check([stated_task, legacy, other], run)}
    assert ("anom-stated-001", "premise") in found and ("ts-stated-001", "premise") in found
    assert ("anom-stated-001", "change") not in found  # the stated criterion replaces the bare check
    assert ("anom-sample-001", "change") not in found and ("anom-sample-001", "premise") not in found  # 44 != 38


class Returning:
    """A gold source whose every query (the determinism probe too) returns `rows`, named as the SQL's outputs."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = [list(r) for r in rows]  # as a runner returns them

    def result(self, sql: str) -> QueryResult:
        return result([e.alias_or_name for e in parse_statement(sql).expressions], self.rows)


@pytest.mark.parametrize(
    ("rows", "refused", "why"),
    [([(44, 38)], True, "a 14% swing fails the stated 25% / 10 visits"), ([(44, 20)], False, "a 55% fall meets it")],
)
def test_build_and_reselect_pass_over_a_choice_whose_premise_fails(
    rows: list[tuple[int, int]], refused: bool, why: str
) -> None:
    # check_gold is what build, reselect and try-templates use to decide whether a choice is usable
    choice = stating(SUBSTANTIAL).model_copy(update={"gold_sql": ["select 44 as prev_visits, 38 as this_visits"]})
    reason = build.check_gold(Returning(rows), choice, set(), {})
    assert (reason is not None) is refused, (why, reason)
    if reason:
        assert "anom-stated-001" in reason and "at least 25%" in reason and "from 44 to 38" in reason


def test_validation_holds_a_released_task_to_its_stated_premise(tmp_path: Path) -> None:
    """A task carries its template's premise into the release, so `validate` (premises.check in each
    reference world) refuses it where the data do not meet it."""
    spec = build.load_templates()
    worded_neutrally = next(t for t in spec.templates if t.id == "anomaly_outpatient_by_dept_month")
    # the criterion it stated before v7 worded it neutrally ("changed substantially": 25% and 10 visits)
    stated = Premise(kind="change", measure="month", min_relative=0.25, min_absolute=10, unit="visits")
    t = worded_neutrally.model_copy(update={"premise": stated})
    made = build.instantiate(t, {"month": Value("2022-08", _month(2022, 8))}, 1)
    assert made.premise == t.premise
    on_disk = Task.model_validate_json(release.task_json(made))
    assert on_disk.premise == t.premise  # released with it

    def world(sql: str) -> QueryResult:  # the analysts' month: 44 visits, then 38
        return result(["ksmc", "prev_month", "this_month", "change"], [["a", 30, 27, -3], ["b", 14, 11, -3]])

    (found,) = premises.check([on_disk], world)
    assert found.check == "premise" and "from 44 to 38" in found.detail


def _aliases(sql: str) -> list[str]:
    return re.findall(r"\bas (\w+)\b", sql)


# The files this check covers: v1's templates (criteria added in v7) and the v7 anomaly batch.
OWN_FILES = ("templates_v1.json", "templates/v7_anomaly.json")
ANOMALY_TEMPLATES = [t for f in OWN_FILES for t in build.load_templates(f).templates if t.type.value == "anomaly"]


# Words that assert a change (the analysts' "changed substantially"): a template worded with none of them
# may state that it asserts nothing (premise kind none); one that uses them states its criterion.
ASSERTING = re.compile(
    r"变化(挺|很|明显|较)大|变化明显|差好多|掉了|下降|changed (a lot|substantially|noticeably)|swung|way off|dropped|fell|moved a lot"
)


@pytest.mark.parametrize("template", ANOMALY_TEMPLATES, ids=lambda t: t.id)
def test_every_anomaly_template_states_a_premise_its_gold_can_show(template: build.Template) -> None:
    premise = template.premise
    assert premise is not None, f"{template.id}: an anomaly question asserts a change; state its criterion"
    wordings = [text for levels in template.variants.values() for text in levels.values()]
    if premise.kind == "none":
        asserting = [w for w in wordings if ASSERTING.search(w)]
        assert not asserting, f"{template.id} asserts a change but states no criterion: {asserting[0]}"
        return
    assert premise.min_relative or premise.min_absolute or premise.direction != "any", template.id
    aliases = _aliases(template.gold_sql[0])
    if premise.rows == "series":
        assert premise.measure in aliases, template.id
    elif premise.measure == "*":
        assert premises._pairs(aliases), template.id
    else:
        assert premise.measure in premises._pairs(aliases), (template.id, aliases)


@pytest.mark.parametrize(
    ("sql", "rows", "thin", "why"),
    [
        (
            "select ksdm, count(*) as n from emr.t_zy_visit group by ksdm order by ksdm",
            [("0101", 3), ("0102", 4)],
            True,
            "two groups of a grouped result: too thin to be stable in other worlds",
        ),
        (
            "with m as (select ksdm, count(*) as n from emr.t_zy_visit group by ksdm) "
            "select ksdm, n from m order by n desc, ksdm limit 1",
            [("0101", 4)],
            False,
            "a grouped CTE read down to its sharpest row is one answer, not a thin series",
        ),
    ],
)
def test_only_a_grouped_result_is_held_to_the_thin_series_rule(
    sql: str, rows: list[tuple[Any, ...]], thin: bool, why: str
) -> None:
    reason = build.check_gold(Returning(rows), task(gold_sql=[sql], answer_points=[]), set(), {})
    assert (reason is not None and "too thin" in reason) is thin, (why, reason)
