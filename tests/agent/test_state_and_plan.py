"""Dialogue state merge, the plan compiler's rules and catalog tools, the
write-risk checker, prompt-rule ablations and the LLM-played clinician."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from evalpkg.agent.function_schema import openai_tools
from evalpkg.agent.llm_user import LLMUser
from evalpkg.agent.loop import system_prompt
from evalpkg.agent.plan import Plan, compile_plan
from evalpkg.agent.plan_tools import PLAN_TOOL_NAMES, PlanToolkit
from evalpkg.agent.state import QueryState, asked, merge
from evalpkg.agent.tools import STATE_TOOL, TOOL_NAMES, Shared, Toolkit
from evalpkg.agent.write_risk import assess
from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings
from evalpkg.sql.executor import ReadOnlyExecutor
from evalpkg.sql.gold import agent_connection, gold_runner
from evalpkg.testset.models import HiddenSlot, Language
from tests.agent.conftest import NewToolkit


def test_merge_dedupes_keeps_conflict_history_and_recomputes_missing_slots() -> None:
    s = merge(QueryState(), {"intent": "count", "metric": "HbA1c > 7%"}, turn=0, confidence=0.7)
    assert s.missing_slots == ["population", "time_range"] and s.next_action() == "ask_clarify"
    s = merge(s, {"metric": "hba1c  >  7%"}, turn=1, confidence=0.9)  # same value: no new history
    assert s.slots["metric"].confidence == 0.9 and len(s.slots["metric"].history) == 1
    s = merge(s, {"metric": "fasting glucose > 7"}, turn=2, confidence=0.5)  # less sure: kept as history only
    assert (
        s.value("metric") == "HbA1c > 7%" and [h.value for h in s.slots["metric"].history][-1] == "fasting glucose > 7"
    )
    s = merge(s, {"metric": "fasting glucose > 7"}, turn=3, confidence=0.85)  # now sure enough to win
    assert s.value("metric") == "fasting glucose > 7" and s.slots["metric"].source_turn == 3
    s = merge(s, {"population": "type 2 diabetics", "time_range": "last 3 months"}, turn=4)
    assert s.missing_slots == ["time_column"]  # a time range makes its column required
    s = merge(s, {"time_column": "cysj"}, turn=5)
    assert s.missing_slots == [] and s.stage == "ready" and s.next_action() == "query"


def test_asking_sets_pending_answer_and_answers_clear_it() -> None:
    s = asked(merge(QueryState(), {"intent": "count"}, 0), "Which test and which period?")
    assert s.pending_answer_for == ["metric", "population"] and s.last_question
    s = merge(s, {"metric": "HbA1c"}, 1)
    assert s.pending_answer_for == ["population"]
    with pytest.raises(ValueError, match="unknown slot"):
        merge(s, {"colour": "red"}, 2)


def test_update_state_tool(new_toolkit: NewToolkit) -> None:
    tk = new_toolkit()
    tk.tool_names = (*TOOL_NAMES, STATE_TOOL)
    r = tk.call("update_state", {"intent": "count", "metric": "HbA1c > 7%"}).content
    assert r["missing_slots"] == ["population", "time_range"] and r["next_action"] == "ask_clarify"
    assert "confidence must be" in (tk.call("update_state", {"confidence": 3}).error or "")
    names = [t["function"]["name"] for t in openai_tools((*TOOL_NAMES, STATE_TOOL), Toolkit)]
    assert names[-1] == "update_state"


def test_compiled_plan_matches_hand_written_sql(generated: Settings, shared: Shared) -> None:
    plan = Plan.model_validate(
        {
            "steps": [
                {"action": "SCAN", "table": "t_zy_visit"},
                {"action": "JOIN", "table": "t_diag_record", "on": ["t_zy_visit.visit_id", "t_diag_record.visit_id"]},
                {"action": "FILTER", "column": "t_diag_record.icd10_code", "op": "like", "value": "E11%"},
                {"action": "FILTER", "column": "t_zy_visit.visit_type", "op": "=", "value": "ZY"},
                {"action": "SELECT", "column": "t_zy_visit.ksdm"},
                {
                    "action": "AGGREGATE",
                    "function": "count_distinct",
                    "column": "t_zy_visit.patient_id",
                    "alias": "patients",
                },
                {"action": "ORDER_BY", "column": "patients", "direction": "desc"},
                {"action": "LIMIT", "n": 3},
            ]
        }
    )
    sql = compile_plan(plan, shared.catalog)
    assert "group by t_zy_visit.ksdm" in sql  # R8: the plain column next to an aggregate is grouped
    reference = (
        "select v.ksdm, count(distinct v.patient_id) from emr.t_zy_visit v join emr.t_diag_record d "
        "on v.visit_id = d.visit_id where d.icd10_code like 'E11%' and v.visit_type = 'ZY' "
        "group by v.ksdm order by 2 desc limit 3"
    )
    with gold_runner(generated) as golds:
        assert golds.result(sql).rows == golds.result(reference).rows


def test_catalog_tools_and_submit_plan(generated: Settings, shared: Shared) -> None:
    tk = PlanToolkit(shared=shared, executor=ReadOnlyExecutor(generated.agent_url()), tool_names=PLAN_TOOL_NAMES)
    assert "t_lab_result" in tk.call("list_all_tables", {}).content["tables"]
    rows = {
        t: tk.call("get_table_row_count", {"table_name": t}).content["rows"] for t in ("t_zy_visit", "t_lab_result")
    }
    assert rows["t_lab_result"] > rows["t_zy_visit"] > 0
    assert tk.call("suggest_optimal_join_order", {"tables": ["t_lab_result", "t_zy_visit"]}).content["order"] == [
        "t_zy_visit",
        "t_lab_result",
    ]
    ndv = tk.call("get_column_ndv", {"table_name": "t_zy_visit", "column": "visit_type"}).content["ndv"]
    assert ndv == 2
    sel = tk.call(
        "estimate_join_selectivity", {"left_column": "t_zy_visit.visit_id", "right_column": "t_lab_result.visit_id"}
    ).content
    assert 0 < sel["selectivity"] <= 1 / rows["t_zy_visit"] * 1.5
    stats = tk.call("get_column_statistics", {"table_name": "t_lab_result", "column": "unit"}).content
    assert "mmol/L" in stats["most_common"]

    def indexed(columns: list[str]) -> bool:
        return bool(tk.call("check_index_exists", {"table_name": "t_lab_result", "columns": columns}).content["exists"])

    assert indexed(["lab_id"]) and indexed(["xmdm", "cysj"]) and not indexed(["result_value"])  # the eval DB's keys
    assert "检验" in tk.call("get_table_comment", {"table_name": "t_lab_result"}).content["comment"]
    cols = tk.call("get_table_columns", {"table_name": "t_zy_visit"}).content["columns"]
    assert {"name": "cyrq", "indexed": True}.items() <= next(c for c in cols if c["name"] == "cyrq").items()
    assert {"name": "zyts", "indexed": False}.items() <= next(c for c in cols if c["name"] == "zyts").items()
    bad = tk.call("submit_plan", {"plan": {"steps": [{"action": "SCAN", "table": "t_nope"}]}})
    assert not bad.ok and "plan rejected: R2" in (bad.error or "")
    ok = tk.call(
        "submit_plan",
        {
            "plan": {
                "steps": [
                    {"action": "SCAN", "table": "t_patient_info"},
                    {"action": "AGGREGATE", "function": "count", "alias": "n"},
                ]
            }
        },
    )
    assert ok.ok and ok.content["rows"][0][0] > 0 and ok.content["compiled_sql"].startswith("select count(*)")
    assert not tk.call("execute_sql", {"sql": "select 1"}).ok  # not in the plan toolset


def test_write_risk_is_assessed_never_executed(generated: Settings) -> None:
    count = "select count(*) from emr.t_med_order"
    with agent_connection(generated) as conn, gold_runner(generated) as before, gold_runner(generated) as after:
        counted = before.result(count).rows
        everything = assess("delete from emr.t_med_order", conn)
        tautology = assess("update emr.t_med_order set zfbz = 1 where 1 = 1", conn)
        broad = assess("update emr.t_med_order set zfbz = 1 where zfbz = 0", conn, max_rows=100)
        narrow = assess("delete from emr.t_med_order where order_id = 12345", conn)
        assert after.result(count).rows == counted  # a runner of its own: not the remembered result
    assert not everything["allowed"] and "no WHERE" in everything["reasons"][0]
    assert not tautology["allowed"] and "always true" in " ".join(tautology["reasons"])
    assert not broad["allowed"] and broad["estimated_rows"] > 100
    assert narrow["allowed"] and narrow["estimated_rows"] <= 1
    with agent_connection(generated) as conn:
        assert not assess("select 1", conn)["allowed"]


def test_prompt_rules_can_be_switched_off() -> None:
    full = system_prompt("react_v1")
    without = system_prompt("react_v1", (4,))
    assert "query_dictionary first" in full and "query_dictionary first" not in without
    assert "voided orders" not in without and "5. Your answer" in without


def test_llm_played_user_answers_and_slot_matching_stays_deterministic() -> None:
    calls: list[dict[str, Any]] = []

    def chat(retries: list[Any], **kw: Any) -> Any:
        calls.append(kw)
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=" 最近3个月 "))])

    client: Any = SimpleNamespace(chat=chat)  # a ModelClient's interface
    slot = HiddenSlot(
        slot="time_range",
        value="3 months",
        keywords=["多久", "时间"],
        answer={Language.zh: "最近3个月", Language.en: "last 3 months"},
    )
    user = LLMUser([slot], Language.zh, "m", client)
    assert user.answer("您说的最近是多久？") == "最近3个月"
    assert user.revealed == {"time_range"} and "最近3个月" in calls[0]["messages"][0]["content"]


def test_plan_strategy_prompt_and_llm_user_needs_a_model() -> None:
    assert RunConfig(strategy="plan").prompt_version == "plan_v1"  # the gold agent replays gold plans
    assert RunConfig(strategy="plan", agent="openai", endpoint="http://x/v1").prompt_version == "plan_v1"
    with pytest.raises(ValidationError, match="user_simulator llm needs"):
        RunConfig(user_simulator="llm")
