"""Each tool through the real eval DB: paging, time confirmation, supplementary schema, dictionary,
examples, validate_result, ask_clarify, cache, and derived JSON schemas."""

from __future__ import annotations

import json

import pytest

from evalpkg.agent.function_schema import openai_tools
from evalpkg.agent.llm_user import LLMUser
from evalpkg.agent.model_client import ModelClient
from evalpkg.agent.paging import PAGE_ROWS
from evalpkg.agent.plan_tools import PLAN_TOOL_NAMES, PlanToolkit
from evalpkg.agent.tools import STATE_TOOL, TOOL_NAMES, Shared, Toolkit
from evalpkg.agent.user_sim import ScriptedUser
from evalpkg.errors import ConfigError
from evalpkg.runconfig import RunConfig
from evalpkg.sql.executor import DEFAULT_ROW_CAP
from evalpkg.testset.models import HiddenSlot, Language, Task
from tests.agent.conftest import NewToolkit
from tests.testset.test_models_and_fingerprints import task_dict


def test_json_schemas_come_from_signatures() -> None:
    tools = {t["function"]["name"]: t["function"] for t in openai_tools(TOOL_NAMES, Toolkit)}
    assert set(tools) == {
        "query_schema",
        "query_dictionary",
        "search_sql_examples",
        "execute_sql",
        "fetch_page",
        "validate_result",
        "ask_clarify",
    }
    sql = tools["execute_sql"]["parameters"]
    assert sql["required"] == ["sql"] and sql["properties"]["require_timefield_confirmation"]["type"] == "boolean"
    assert "SELECT" in sql["properties"]["sql"]["description"]
    assert tools["query_schema"]["parameters"].get("required", []) == []


OPENAI = {"agent": "openai", "endpoint": "http://127.0.0.1:9/v1"}
WIRING = [
    ({}, Toolkit, TOOL_NAMES, ScriptedUser, "defaults: the EMR tools and the scripted clinician"),
    ({"toolset": "emr-v1+state"}, Toolkit, (*TOOL_NAMES, STATE_TOOL), ScriptedUser, "the state toolset adds one tool"),
    ({**OPENAI, "strategy": "plan"}, PlanToolkit, PLAN_TOOL_NAMES, ScriptedUser, "plan: catalog functions instead"),
    ({**OPENAI, "user_simulator": "llm"}, Toolkit, TOOL_NAMES, LLMUser, "an LLM-played clinician on the same client"),
]


@pytest.mark.parametrize(("fields", "kind", "names", "clinician", "reason"), WIRING, ids=[w[-1] for w in WIRING])
def test_toolkit_is_wired_from_the_run_config(
    new_toolkit: NewToolkit, fields: dict[str, str], kind: type, names: tuple[str, ...], clinician: type, reason: str
) -> None:
    client = ModelClient(OPENAI["endpoint"])  # never called: wiring only
    try:
        tk = new_toolkit(RunConfig.model_validate(fields), client=client)
    finally:
        client.close()
    assert type(tk) is kind and tk.tool_names == names and type(tk.user) is clinician, reason


def test_llm_clinician_without_a_model_client_is_a_config_error(new_toolkit: NewToolkit) -> None:
    with pytest.raises(ConfigError, match="user_simulator llm needs"):
        new_toolkit(RunConfig(**OPENAI, user_simulator="llm"))


def test_bad_arguments_are_tool_errors(new_toolkit: NewToolkit) -> None:
    tk = new_toolkit()
    assert tk.call("execute_sql", {}).error == "bad arguments: sql: Field required"
    assert "not valid JSON" in (tk.call("execute_sql", "{sql: ").error or "")
    assert "unknown tool" in (tk.call("drop_everything", {}).error or "")
    tk.tool_names = (*tk.tool_names, "_run")  # listed, but not a @tool method: still not callable
    assert "unknown tool" in (tk.call("_run", {"sql": "select 1"}).error or "")
    assert "Extra inputs" in (tk.call("query_schema", {"table_name": "t_zy_visit", "x": 1}).error or "")
    assert "unknown table" in (tk.call("query_schema", {"table_name": "nope"}).error or "")


def test_large_results_are_paged_with_summary(new_toolkit: NewToolkit) -> None:
    tk = new_toolkit()
    first = tk.call("execute_sql", {"sql": "select lab_id, result_value from emr.t_lab_result order by lab_id"})
    c = first.content
    assert first.ok and len(c["rows"]) == PAGE_ROWS and c["total_rows"] > PAGE_ROWS
    assert c["pages"] == (min(c["total_rows"], DEFAULT_ROW_CAP) - 1) // PAGE_ROWS + 1
    assert c["total_rows"] <= DEFAULT_ROW_CAP or "narrow the query" in c["note"]
    assert set(c["column_summary"]["result_value"]) >= {"nulls", "min", "max", "mean"}
    second = tk.call("fetch_page", {"result_id": c["result_id"], "page": 1})
    assert second.ok and second.content["rows"][0][0] > c["rows"][-1][0]
    assert "out of range" in (tk.call("fetch_page", {"result_id": c["result_id"], "page": 9999}).error or "")


def test_empty_result_is_success_empty(new_toolkit: NewToolkit) -> None:
    tk = new_toolkit()
    r = tk.call("execute_sql", {"sql": "select * from emr.t_zy_visit where ksdm = 'none'"})
    assert r.ok and r.content["status"] == "success_empty" and r.content["total_rows"] == 0


def test_time_filter_asks_for_confirmation_first(new_toolkit: NewToolkit) -> None:
    tk = new_toolkit()
    sql = "select count(*) from emr.t_zy_visit where cyrq >= '2024-01-01'"
    first = tk.call("execute_sql", {"sql": sql, "require_timefield_confirmation": True})
    assert first.content["needs_confirmation"] is True
    columns = " ".join(first.content["time_columns"]["t_zy_visit"])
    assert "cyrq" in columns and "ryrq" in columns and "出院" in columns
    second = tk.call("execute_sql", {"sql": sql, "require_timefield_confirmation": True})
    assert "rows" in second.content
    untimed = tk.call(
        "execute_sql", {"sql": "select count(*) from emr.t_lab_result", "require_timefield_confirmation": True}
    )
    assert "rows" in untimed.content


def test_unloaded_tables_trigger_supplementary_schema(new_toolkit: NewToolkit) -> None:
    tk = new_toolkit()
    tk.call("query_schema", {"table_name": "t_zy_visit"})
    r = tk.call(
        "execute_sql", {"sql": "select count(*) from emr.t_zy_visit v join emr.t_diag_record d using (visit_id)"}
    )
    assert list(r.content["supplementary_schema"]) == ["t_diag_record"]
    again = tk.call("execute_sql", {"sql": "select count(*) from emr.t_diag_record"})
    assert "supplementary_schema" not in again.content


def test_schema_lines_and_hint(new_toolkit: NewToolkit) -> None:
    tk = new_toolkit()
    tk.question = "2023年心内科出院了多少人"
    r = tk.call("query_schema", {"table_name": "emr.t_zy_visit"})
    assert "cyrq\ttimestamp without time zone\t出院时间" in r.content["schema"]
    assert "cyrq" in r.content["hint"]
    assert "t_lab_result" in tk.call("query_schema", {}).content["tables"]


def test_dictionary_examples_and_cache(shared: Shared, new_toolkit: NewToolkit) -> None:
    tk = new_toolkit()
    hits = tk.call("query_dictionary", {"term": "作废"}).content["matches"]
    assert {(m["table_name"], m["column_name"]) for m in hits} >= {("t_med_order", "zfbz"), ("t_lab_result", "bgzt")}
    before = shared.cache.hits["query_dictionary"]
    assert tk.call("query_dictionary", {"term": "作废"}).cached
    assert shared.cache.hits["query_dictionary"] == before + 1
    ex = tk.call("search_sql_examples", {"question": "阿司匹林的患者数量"}).content["examples"]
    assert "Y0006" in ex[0]["sql"]
    sql = "select count(*) from emr.t_med_order"
    tk.call("execute_sql", {"sql": sql})
    assert tk.call("execute_sql", {"sql": "select  count(*)\n  from emr.t_med_order;"}).cached  # normalized SQL
    assert not tk.call("execute_sql", {"sql": "select count(*) from emr.t_med_order where zfbz = 1"}).cached


def test_dictionary_rows_name_real_columns_and_say_what_now_is(shared: Shared, new_toolkit: NewToolkit) -> None:
    """An annotator who trusted the dictionary used current_date for "the current month"; the snapshot's
    pinned_now is what relative periods count from, and the dictionary must say so."""
    columns = {(table, c.name) for table, cols in shared.catalog.columns.items() for c in cols}
    assert [
        (r["table_name"], r["column_name"])
        for r in shared.dictionary
        if (r["table_name"], r["column_name"]) not in columns
    ] == []
    tk = new_toolkit()
    for term in ("current_date", "last 12 months", "近一年"):
        hits = tk.call("query_dictionary", {"term": term}).content["matches"]
        assert ("snapshot", "pinned_now") in {(m["table_name"], m["column_name"]) for m in hits}, term


def test_validate_result_flags_unsupported_numbers(new_toolkit: NewToolkit) -> None:
    tk = new_toolkit()
    n = tk.call("execute_sql", {"sql": "select count(*) as n from emr.t_patient_info"}).content["rows"][0][0]
    ok = tk.call("validate_result", {"claim": f"共有{n}名患者"}).content
    assert ok["supported"] is True and ok["numbers_checked"] == 1
    bad = tk.call("validate_result", {"claim": f"共有{n + 7}名患者"}).content
    assert bad["supported"] is False and bad["unsupported_numbers"] == [str(n + 7)]
    explicit = tk.call("validate_result", {"claim": "rate 12.5%", "evidence": json.dumps({"rate": 0.125})}).content
    assert explicit["supported"] is True


def test_ask_clarify_answers_from_hidden_slots(new_toolkit: NewToolkit) -> None:
    from evalpkg.agent.user_sim import ScriptedUser

    slot = HiddenSlot(
        slot="time_range",
        value="3 months",
        keywords=["多久", "时间", "how long", "time range"],
        answer={Language.zh: "最近3个月", Language.en: "the last 3 months"},
    )
    tk = new_toolkit()
    tk.user = ScriptedUser([slot], Language.en)
    assert tk.call("ask_clarify", {"question": "What time range do you mean?"}).content["answer"] == "the last 3 months"
    assert "not relevant" in tk.call("ask_clarify", {"question": "Which ward?"}).content["answer"]
    assert tk.user.revealed == {"time_range"}
    tk.user = ScriptedUser(Task.model_validate(task_dict()).hidden_slots, Language.zh)
    assert "不需要再确认" in tk.call("ask_clarify", {"question": "您指哪个科室?"}).content["answer"]


def test_schema_overview_retrieves_candidate_tables(new_toolkit: NewToolkit) -> None:
    tk = new_toolkit()
    tk.question = "2023年糖尿病患者中糖化血红蛋白高于7%的有多少人"
    r = tk.call("query_schema", {}).content
    assert {"t_diag_record", "t_lab_result"} <= set(r["candidate_schemas"])
    assert "t_med_order" not in r["candidate_schemas"]
    assert {"t_diag_record", "t_lab_result"} <= tk.loaded_tables
    tk.options.schema_retrieval = False
    assert "candidate_schemas" not in tk.call("query_schema", {}).content
