"""The ReAct loop with scripted policies: the gold agent reproduces every v1 gold result through the
real tools; limits, malformed output and endpoint failures end as recorded outcomes."""

from __future__ import annotations

from typing import Any

import pytest

from evalpkg.agent.loop import Limits, ModelTurn, run_dialogue
from evalpkg.agent.policies import gold_policy, perturb_sql, perturbation_policy
from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings
from evalpkg.sql.gold import gold_runner
from evalpkg.testset import release
from evalpkg.testset.models import Complexity, Language
from tests.agent.conftest import NewToolkit


def run(policy: Any, toolkit: Any, limits: Limits | None = None, question: str = "q") -> Any:
    return run_dialogue(
        policy,
        toolkit,
        instance_id="i-1",
        task_id="t-1",
        language="zh",
        complexity="plain",
        question=question,
        limits=limits,
    )


class Replay:
    def __init__(self, turns: list[ModelTurn], name: str = "replay") -> None:
        self.turns, self.name = turns, name

    def next(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelTurn:
        if not self.turns:
            raise RuntimeError("endpoint closed the connection")
        return self.turns.pop(0)


def test_gold_agent_reproduces_every_v1_gold_result(generated: Settings, new_toolkit: NewToolkit) -> None:
    tasks = release.load(generated.tasks_dir, "v1").tasks
    checked = 0
    with gold_runner(generated) as golds:
        for task in tasks:
            variant = next(v for v in task.variants if v.language is Language.zh and v.complexity is Complexity.plain)
            toolkit = new_toolkit(task=task, question=variant.text)
            traj = run_dialogue(
                gold_policy(task),
                toolkit,
                instance_id=task.id,
                task_id=task.id,
                language="zh",
                complexity="plain",
                question=variant.text,
            )
            assert traj.stop_reason == "final_answer", (task.id, traj.stop_reason)
            assert traj.verify_hashes()
            if task.hidden_slots:
                assert {s.slot for s in task.hidden_slots} <= {s for c in traj.clarifications for s in c["slots"]}
            if not task.answerable:
                assert traj.final_sql is None
                continue
            assert traj.final_sql == task.gold_sql[0], task.id
            executed = [c for c in traj.tool_calls() if c.name == "execute_sql"][-1]
            import json

            content = json.loads(executed.result)
            gold = golds.result(task.gold_sql[0]).rows
            assert content["total_rows"] == len(gold), task.id
            assert content["rows"] == gold[:200], task.id
            checked += 1
    assert checked >= 320


def test_circuit_breaker_records_a_fallback(new_toolkit: NewToolkit) -> None:
    calls = [ModelTurn(tool_calls=[(f"c{i}", "query_schema", {"table_name": "t_zy_visit"})]) for i in range(10)]
    traj = run(Replay(calls), new_toolkit(), Limits(max_calls_per_tool=3))
    assert traj.stop_reason == "tool_call_limit" and traj.fallback
    assert len(traj.tool_calls()) == 3
    traj = run(Replay(list(calls)), new_toolkit(), Limits(max_calls_total=2))
    assert traj.stop_reason == "total_call_limit" and len(traj.tool_calls()) == 2
    traj = run(Replay(list(calls)), new_toolkit(), Limits(max_steps=4))
    assert traj.stop_reason == "max_steps" and len(traj.steps) == 4
    # the plan strategy's breaker (3 calls of one function, 7 in all) records its fallback plan
    lookups = [ModelTurn(tool_calls=[(f"c{i}", "list_all_tables", {})]) for i in range(10)]
    plan_toolkit = new_toolkit(RunConfig(strategy="plan", sql_timeout_ms=1000))
    traj = run(Replay(lookups), plan_toolkit, Limits(max_calls_per_tool=3, max_calls_total=7))
    assert traj.stop_reason == "tool_call_limit" and traj.fallback.startswith('{"action": "SCAN_ALL_TABLES"')


MALFORMED = [
    "",
    "   ",
    "{",
    '```json\n{"tool": "execute_sql", "arguments": \n```',
    '{"foo": 1}',
    "[1, 2, 3]",
    "```json\n[]\n```",
    '{"tool": 42}',
    "null",
    '{"tool": "execute_sql", "arguments": "not json {"}',
    "\x00\x01",
    '{"tool": "rm -rf", "arguments": {}}',
    '{"name": "execute_sql", "arguments": {"sql": 5}}',
    "```\n{'tool': 'query_schema', 'arguments': {'table_name': None}}\n```",
    "{{{{}}}}",
    "}{",
    '{"final_answer": null}',
    '{"tool": "execute_sql", "arguments": {"sql": "drop table emr.t_lab_result"}}',
]


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_model_output_never_raises(text: str, new_toolkit: NewToolkit) -> None:
    traj = run(Replay([ModelTurn(text=text), ModelTurn(text=text), ModelTurn(text=text)]), new_toolkit())
    assert traj.stop_reason in {"final_answer", "unparseable", "model_error", "max_steps"}
    assert traj.ended_at >= traj.started_at


def test_text_protocol_tool_call_then_answer(new_toolkit: NewToolkit) -> None:
    turns = [
        ModelTurn(
            text='先查一下。\n```json\n{"tool": "execute_sql", "arguments": {"sql": "select count(*)\nfrom emr.t_patient_info"}}\n```'
        ),
        ModelTurn(text='{"final_answer": "共有若干患者"}'),
    ]
    traj = run(Replay(turns), new_toolkit())
    assert traj.stop_reason == "final_answer" and traj.final_answer == "共有若干患者"
    assert traj.final_sql is not None and traj.tool_calls()[0].ok


def test_endpoint_failure_is_a_model_error_outcome(new_toolkit: NewToolkit) -> None:
    traj = run(Replay([]), new_toolkit())
    assert traj.stop_reason == "model_error" and "endpoint closed" in traj.steps[0].parse_error


def test_perturbations_change_the_sql() -> None:
    sql = "select count(distinct patient_id) from emr.t_zy_visit where cyrq >= '2024-01-01' and zyts is not null"
    assert "ryrq" in perturb_sql(sql, "wrong_time_field")
    assert "is not null" not in perturb_sql(sql, "dropped_null_handling")
    assert "count(*)" in perturb_sql(sql, "wrong_column")


def test_extra_calls_agent_repeats_schema_lookups(generated: Settings, new_toolkit: NewToolkit) -> None:
    task = release.load(generated.tasks_dir, "v1").tasks[0]
    traj = run(perturbation_policy(task, "extra_calls"), new_toolkit())
    names = [c.name for c in traj.tool_calls()]
    assert names.count("query_schema") >= 3 + len(task.tables)
