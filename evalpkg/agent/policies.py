"""Policies: the OpenAI-compatible model, and scripted reference agents for testing the harness
(gold replay must score 100%) and the scorers (perturbations)."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from evalpkg.agent.loop import ModelTurn, prompt
from evalpkg.testset.models import Task

TIME_SWAPS = {"cyrq": "ryrq", "ryrq": "cyrq", "report_time": "cysj", "cysj": "report_time", "kssj": "jssj"}


def _cid() -> str:
    return f"call-{uuid.uuid4().hex[:8]}"


def _last_tool_result(messages: list[dict[str, Any]]) -> dict[str, Any]:
    for m in reversed(messages):
        if m.get("role") == "tool":
            try:
                value = json.loads(m["content"])
                return value if isinstance(value, dict) else {}
            except (json.JSONDecodeError, TypeError):
                return {}
    return {}


@dataclass
class ScriptedPolicy:
    """Replays a fixed plan of tool calls, then answers from the last result."""

    name: str
    plan: list[list[tuple[str, dict[str, Any]]]]
    final: str = ""
    position: int = 0

    def next(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelTurn:
        if self.position < len(self.plan):
            calls = self.plan[self.position]
            self.position += 1
            return ModelTurn(tool_calls=[(_cid(), name, args) for name, args in calls])
        if self.final:
            return ModelTurn(text=self.final)
        last = _last_tool_result(messages)
        rows = last.get("rows", [])
        return ModelTurn(text=f"结果 / result: {json.dumps(rows[:20], ensure_ascii=False)}")


def gold_plan(task: Task, sql: str | None = None) -> list[list[tuple[str, dict[str, Any]]]]:
    """Expected tool calls of the task, with the gold SQL as the query (harness self-test)."""
    plan: list[list[tuple[str, dict[str, Any]]]] = [[("query_schema", {"table_name": t}) for t in task.tables]]
    if task.hidden_slots:
        question = " / ".join(s.keywords[0] for s in task.hidden_slots if s.keywords)
        plan.append([("ask_clarify", {"question": f"请确认：{question}?"})])
    names = {c.name for turn in task.turns for c in turn.expected_tool_calls}
    if "query_dictionary" in names:
        term = next(
            (
                c.args["term"].contains_all[0]
                for turn in task.turns
                for c in turn.expected_tool_calls
                if c.name == "query_dictionary" and "term" in c.args and c.args["term"].contains_all
            ),
            None,
        )
        plan.append([("query_dictionary", {"term": term or (task.tables[0] if task.tables else "NULL")})])
    if task.gold_sql:
        plan.append([("execute_sql", {"sql": sql or task.gold_sql[0]})])
    return plan


def gold_policy(task: Task) -> ScriptedPolicy:
    final = "" if task.answerable else "数据库中没有这项数据，无法回答。 The database does not hold this data."
    return ScriptedPolicy("gold", gold_plan(task), final=final)


def perturb_sql(sql: str, kind: str) -> str:
    """Mutations a scorer must catch."""
    if kind == "wrong_time_field":
        for a, b in TIME_SWAPS.items():
            if re.search(rf"\b{a}\b", sql):
                return re.sub(rf"\b{a}\b", b, sql)
    if kind == "dropped_null_handling":
        out = re.sub(r"\s+and\s+\w+(\.\w+)?\s+is\s+not\s+null", "", sql, flags=re.IGNORECASE)
        out = re.sub(r"\bnot\s+exists\b", "exists", out, flags=re.IGNORECASE)
        if out != sql:
            return out
    if kind == "wrong_column":
        out = re.sub(r"count\(\s*distinct\s+(\w+\.)?patient_id\s*\)", "count(*)", sql, flags=re.IGNORECASE)
        if out != sql:
            return out
    return sql


def perturbation_policy(task: Task, kind: str) -> ScriptedPolicy:
    if kind == "extra_calls":
        plan = gold_plan(task)
        plan.insert(0, [("query_schema", {})] * 3)
        return ScriptedPolicy(f"perturb:{kind}", plan)
    sql = perturb_sql(task.gold_sql[0], kind) if task.gold_sql else None
    return ScriptedPolicy(f"perturb:{kind}", gold_plan(task, sql))


@dataclass
class OpenAIPolicy:
    """Any OpenAI-compatible chat-completions endpoint (vLLM, llama.cpp server) with native tool
    calls; models that answer in text are read by the tolerant parser in the loop."""

    model: str
    base_url: str
    api_key: str = "EMPTY"
    temperature: float = 0.0
    seed: int | None = 0
    native_tools: bool = True
    timeout_s: float = 120.0
    name: str = "openai"
    _client: Any = field(default=None, repr=False)

    def _chat(self) -> Any:
        if self._client is None:
            from openai import OpenAI

            self._client = OpenAI(base_url=self.base_url, api_key=self.api_key, timeout=self.timeout_s, max_retries=1)
        return self._client

    def next(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelTurn:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if self.seed is not None:
            kwargs["seed"] = self.seed
        if self.native_tools:
            kwargs.update(tools=tools, tool_choice="auto")
        else:
            listing = "\n".join(f"- {t['function']['name']}: {t['function']['description']}" for t in tools)
            system = messages[0]["content"] + "\n\n" + prompt("text_protocol_v1").replace("{tools}", listing)
            kwargs["messages"] = [{"role": "system", "content": system}, *messages[1:]]
        response = self._chat().chat.completions.create(**kwargs)
        choice = response.choices[0].message
        usage = getattr(response, "usage", None)
        calls = [(c.id or _cid(), c.function.name, c.function.arguments or "{}") for c in (choice.tool_calls or [])]
        return ModelTurn(
            text=choice.content or "",
            tool_calls=calls,
            native=bool(calls),
            reasoning=str(getattr(choice, "reasoning_content", "") or ""),
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
        )
