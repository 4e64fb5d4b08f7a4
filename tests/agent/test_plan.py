"""The plan grammar: every compiler rule has a plan that breaks it and a message naming the
rule and the step; what each step and expression form compiles to; what the translator cannot say;
and every answerable task's gold plan graded against its gold on the snapshot."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from evalpkg.agent.plan import Plan, PlanError, Untranslatable, compile_plan, plan_from_sql
from evalpkg.agent.plan.gold import check_gold_plans, coverage
from evalpkg.agent.schema import Catalog, Column
from evalpkg.settings import PROJECT_ROOT, Settings
from evalpkg.sql.gold import gold_runner
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release
from evalpkg.testset.models import TaskType

TABLES = {
    "t_zy_visit": ["visit_id", "patient_id", "visit_type", "ksdm", "ryrq", "cyrq", "ghrq", "zyts"],
    "t_diag_record": ["diag_id", "visit_id", "patient_id", "icd10_code"],
    "dict_dept": ["ksdm", "ksmc"],
    "t_lab_result": ["lab_id", "patient_id", "xmdm", "cysj", "result_value", "unit"],
}
CATALOG = Catalog(
    tables={t: f"emr.{t}" for t in TABLES},
    descriptions={},
    columns={t: [Column(t, c, "text") for c in cols] for t, cols in TABLES.items()},
)
SCAN = {"action": "SCAN", "table": "t_zy_visit", "name": "v"}
COUNT = {"action": "AGGREGATE", "function": "count", "alias": "n"}


def steps(*more: dict[str, Any], inputs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"steps": [SCAN, *more], **({"inputs": inputs} if inputs else {})}


RULES = [  # (why it breaks, plan, the rule and step its message names)
    (
        "a plan starts with SCAN",
        {"steps": [{"action": "FILTER", "column": "ksdm", "op": "=", "value": "1"}]},
        "R1 step 0",
    ),
    ("one SCAN per plan", steps({"action": "SCAN", "table": "dict_dept"}), "R1 step 1"),
    ("no such table", {"steps": [{"action": "SCAN", "table": "t_nope"}]}, "R2 step 0"),
    (
        "the same name twice",
        steps({"action": "JOIN", "table": "dict_dept", "name": "v", "on": ["v.ksdm", "v.ksdm"]}),
        "R2 step 1",
    ),
    ("no such column", steps({"action": "SELECT", "column": "v.nope"}), "R3 step 1"),
    (
        "a column in two tables, unnamed",
        steps(
            {"action": "JOIN", "table": "dict_dept", "name": "d", "on": ["d.ksdm", "v.ksdm"]},
            {"action": "SELECT", "column": "ksdm"},
        ),
        "R3 step 2",
    ),
    ("a table the plan never read", steps({"action": "SELECT", "column": "d.ksmc"}), "R3 step 1"),
    ("a join on one column", steps({"action": "JOIN", "table": "dict_dept", "on": ["v.ksdm"]}), "R4 step 1"),
    (
        "a join that ignores its table",
        steps({"action": "JOIN", "table": "dict_dept", "name": "d", "on": ["v.ksdm", "v.ksdm"]}),
        "R4 step 1",
    ),
    ("an unknown operator", steps({"action": "FILTER", "column": "v.ksdm", "op": "~*", "value": "x"}), "R5 step 1"),
    ("an empty list", steps({"action": "FILTER", "column": "v.ksdm", "op": "in", "value": []}), "R6 step 1"),
    ("a comparison without a value", steps({"action": "FILTER", "column": "v.zyts", "op": ">"}), "R6 step 1"),
    (
        "a boolean value",
        steps({"action": "FILTER", "condition": {"cmp": "=", "args": [{"col": "v.ksdm"}, {"value": True}]}}),
        "R6 step 1",
    ),
    ("an unknown aggregate", steps({"action": "AGGREGATE", "function": "mode", "column": "v.zyts"}), "R7 step 1"),
    (
        "an unknown function",
        steps({"action": "SELECT", "expr": {"fn": "sleep", "args": [{"value": 1}]}, "alias": "x"}),
        "R7 step 1",
    ),
    (
        "an alias that is not a name",
        steps({"action": "AGGREGATE", "function": "count", "alias": "n; drop"}),
        "R7 step 1",
    ),
    (
        "ordering groups by a row value",
        steps({"action": "GROUP_BY", "column": "v.ksdm"}, COUNT, {"action": "ORDER_BY", "column": "v.zyts"}),
        "R9 step 3",
    ),
    ("LIMIT 0", steps({"action": "SELECT", "column": "v.ksdm"}, {"action": "LIMIT", "n": 0}), "R10 step 2"),
    (
        "grouped twice",
        steps({"action": "GROUP_BY", "column": "v.ksdm"}, {"action": "GROUP_BY", "column": "v.ksdm"}),
        "R11 step 2",
    ),
    ("nothing shown", {"steps": [SCAN]}, "R12"),
    (
        "an aggregate of an aggregate",
        steps({"action": "SELECT", "expr": {"agg": "max", "of": {"agg": "count"}}, "alias": "x"}),
        "R13 step 1",
    ),
    ("grouping by an aggregate", steps({"action": "GROUP_BY", "expr": {"agg": "count"}}), "R13 step 1"),
    (
        "an aggregate in 'only'",
        steps(
            {"action": "AGGREGATE", "function": "count", "only": {"cmp": ">", "args": [{"agg": "count"}, {"value": 1}]}}
        ),
        "R13 step 1",
    ),
    (
        "an unknown expression form",
        steps({"action": "SELECT", "expr": {"sql": "select 1"}, "alias": "x"}),
        "R14 step 1",
    ),
    (
        "a subplan that is not a plan",
        steps({"action": "FILTER", "condition": {"exists": {"steps": []}}}, COUNT),
        "R14 step 1",
    ),
    (
        "an interval in words",
        steps({"action": "FILTER", "condition": {"cmp": ">", "args": [{"col": "v.ryrq"}, {"interval": "a while"}]}}),
        "R15 step 1",
    ),
    (
        "an unknown bucket",
        steps({"action": "SELECT", "expr": {"bucket": "fortnight", "of": {"col": "v.ryrq"}}, "alias": "p"}),
        "R15 step 1",
    ),
    (
        "a date that is not a date",
        steps({"action": "FILTER", "condition": {"cmp": ">", "args": [{"col": "v.ryrq"}, {"date": "01/02/2024"}]}}),
        "R15 step 1",
    ),
    ("TOTALS without groups", steps(COUNT, {"action": "TOTALS"}), "R16 step 2"),
    (
        "FIRST_PER without columns",
        steps({"action": "SELECT", "column": "v.ksdm"}, {"action": "FIRST_PER"}),
        "R16 step 2",
    ),
    (
        "a broken rule inside an input names the input",
        steps(COUNT, inputs={"recent": {"steps": [{"action": "SCAN", "table": "t_nope"}]}}),
        "R2 step 0 of input recent",
    ),
]


@pytest.mark.parametrize(("plan", "rule"), [pytest.param(p, r, id=why) for why, p, r in RULES])
def test_every_rule_has_a_plan_that_breaks_it(plan: dict[str, Any], rule: str) -> None:
    with pytest.raises(PlanError, match=f"^{rule}\\b"):
        compile_plan(Plan.model_validate(plan), CATALOG)


COMPILES = [  # (what the step or form says, plan, fragments of the SQL it becomes)
    (
        "R8: a plain column beside an aggregate is grouped",
        steps({"action": "SELECT", "column": "v.ksdm"}, COUNT),
        ["select v.ksdm, count(*) as n", "group by v.ksdm"],
    ),
    (
        "an outer join keeps the unmatched rows",
        steps(
            {"action": "JOIN", "table": "dict_dept", "name": "d", "on": ["d.ksdm", "v.ksdm"], "keep_unmatched": True},
            {"action": "SELECT", "column": "d.ksmc"},
        ),
        ["left join emr.dict_dept d on d.ksdm = v.ksdm"],
    ),
    (
        "an anti-join: never diagnosed",
        steps(
            {
                "action": "FILTER",
                "condition": {
                    "not": {
                        "exists": {
                            "steps": [
                                {"action": "SCAN", "table": "t_diag_record", "name": "x"},
                                {
                                    "action": "FILTER",
                                    "condition": {"cmp": "=", "args": [{"col": "x.visit_id"}, {"col": "v.visit_id"}]},
                                },
                            ]
                        }
                    }
                },
            },
            COUNT,
        ),
        ["(not exists (select 1 from emr.t_diag_record x where x.visit_id = v.visit_id))"],
    ),
    (
        "a filter on an aggregate is a group filter",
        steps(
            {"action": "GROUP_BY", "column": "v.ksdm"},
            COUNT,
            {"action": "FILTER", "condition": {"cmp": ">", "args": [{"agg": "count"}, {"value": 5}]}},
        ),
        ["group by v.ksdm having count(*) > 5"],
    ),
    (
        "CASE buckets",
        steps(
            {
                "action": "SELECT",
                "alias": "band",
                "expr": {
                    "when": [[{"cmp": ">", "args": [{"col": "v.zyts"}, {"value": 10}]}, {"value": "long"}]],
                    "else": {"value": "short"},
                },
            }
        ),
        ["case when v.zyts > 10 then 'long' else 'short' end as band"],
    ),
    (
        "months as text",
        steps(
            {"action": "GROUP_BY", "expr": {"format": "YYYY-MM", "of": {"bucket": "month", "of": {"col": "v.ryrq"}}}},
            COUNT,
        ),
        ["group by to_char(date_trunc('month', v.ryrq), 'YYYY-MM')"],
    ),
    (
        "a ratio of counts is a true quotient",
        steps(
            {
                "action": "SELECT",
                "alias": "share",
                "expr": {
                    "fn": "round",
                    "args": [
                        {
                            "fn": "div",
                            "args": [
                                {"agg": "count", "only": {"cmp": ">", "args": [{"col": "v.zyts"}, {"value": 10}]}},
                                {"agg": "count"},
                            ],
                        },
                        {"value": 2},
                    ],
                },
            }
        ),
        ["round((((count(*) filter (where v.zyts > 10))::numeric / count(*)))::numeric, 2) as share"],
    ),
    (
        "a distinct count",
        steps({"action": "AGGREGATE", "function": "count_distinct", "column": "v.patient_id", "alias": "p"}),
        ["count(distinct v.patient_id) as p"],
    ),
    (
        "a hospital total row",
        steps({"action": "GROUP_BY", "column": "v.ksdm"}, COUNT, {"action": "TOTALS"}),
        ["group by grouping sets ((v.ksdm), ())"],
    ),
    (
        "the latest row per patient",
        steps(
            {"action": "SELECT", "column": "v.patient_id"},
            {"action": "SELECT", "column": "v.zyts"},
            {"action": "FIRST_PER", "columns": ["v.patient_id"]},
            {"action": "ORDER_BY", "column": "v.ryrq", "direction": "desc"},
        ),
        ["select distinct on (v.patient_id)", "order by v.patient_id asc, v.ryrq desc"],
    ),
    (
        "an input read like a table",
        {
            "inputs": {
                "firsts": {
                    "steps": [
                        SCAN,
                        {"action": "SELECT", "column": "v.patient_id"},
                        {"action": "AGGREGATE", "function": "min", "column": "v.ryrq", "alias": "first_visit"},
                    ]
                }
            },
            "steps": [
                {"action": "SCAN", "table": "firsts", "name": "f"},
                {"action": "SELECT", "column": "f.first_visit"},
            ],
        },
        ["with firsts as (select v.patient_id, min(v.ryrq) as first_visit", "select f.first_visit from firsts f"],
    ),
    (
        "a calendar of months",
        {
            "steps": [
                {
                    "action": "SCAN",
                    "name": "m",
                    "series": {
                        "from": {"date": "2024-01-01"},
                        "to": {"date": "2024-12-01"},
                        "step": "1 month",
                        "column": "mon",
                    },
                },
                {"action": "SELECT", "column": "m.mon"},
            ]
        },
        ["from generate_series(date '2024-01-01', date '2024-12-01', interval '1 month') as m(mon)"],
    ),
    (
        "values are quoted, never spliced",
        steps({"action": "FILTER", "column": "v.ksdm", "op": "=", "value": "x'; drop table t; --"}, COUNT),
        ["v.ksdm = 'x''; drop table t; --'"],
    ),
]


@pytest.mark.parametrize(("plan", "fragments"), [pytest.param(p, f, id=why) for why, p, f in COMPILES])
def test_what_each_form_compiles_to(plan: dict[str, Any], fragments: list[str]) -> None:
    sql = compile_plan(Plan.model_validate(plan), CATALOG)
    assert all(f in sql for f in fragments), sql


UNSAYABLE = [  # (SQL the grammar has no form for, the reason named)
    ("select rank() over (order by zyts) from emr.t_zy_visit", "Window"),
    ("select ksdm from emr.t_zy_visit union select ksdm from emr.dict_dept", "union"),
    ("select 1 from emr.t_zy_visit v cross join emr.dict_dept d", "cross"),
    ("select * from emr.t_zy_visit", "select \\*"),
]


@pytest.mark.parametrize(("sql", "reason"), UNSAYABLE)
def test_the_translator_names_what_the_grammar_cannot_say(sql: str, reason: str) -> None:
    with pytest.raises(Untranslatable, match=reason):
        plan_from_sql(sql)


def test_every_gold_plan_returns_its_gold(synced: SyncReport, generated: Settings) -> None:
    from evalpkg.agent.session import load_shared

    tasks = release.load(PROJECT_ROOT / "tasks").tasks
    with gold_runner(generated) as golds:
        checks = check_gold_plans(tasks, load_shared(generated).catalog, golds)
    assert [f"{c.task.id}: {c.reason}" for c in checks if not c.ok] == []
    assert coverage(checks)["all"] == (len(checks), sum(1 for t in tasks if t.gold_sql))
    assert {t.value for t in TaskType} <= set(coverage(checks))


def test_every_expression_form_and_step_is_in_each_text_the_model_reads() -> None:
    """The compiler's table of forms (FORMS) and steps (Action) is the one vocabulary: the plan model's
    docstring, the submit_plan tool's schema text and the prompt each name every one of them."""
    import typing

    from evalpkg.agent.plan import model
    from evalpkg.agent.plan.expressions import FORMS
    from evalpkg.agent.plan_tools import PlanToolkit

    prompt = (Path(model.__file__).parents[1] / "prompts" / "plan_v1.md").read_text(encoding="utf-8")
    texts = {"plan model": model.__doc__ or "", "submit_plan": PlanToolkit.submit_plan.__doc__ or "", "prompt": prompt}
    for where, text in texts.items():
        words = set(re.findall(r"[a-z_]+", text))
        assert not [f for f in FORMS if f not in words], (where, [f for f in FORMS if f not in words])
    steps = typing.get_args(model.Action)
    assert not [s for s in steps if s not in prompt], [s for s in steps if s not in prompt]
