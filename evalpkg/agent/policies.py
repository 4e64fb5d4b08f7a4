"""Policies: the OpenAI-compatible model, and scripted reference agents for testing the harness
(gold replay must score 100%) and the scorers (perturbations)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evalpkg.agent.loop import ModelTurn, prompt
from evalpkg.agent.plan import plan_from_sql
from evalpkg.agent.trajectory import RetryRecord
from evalpkg.testset.models import ArgConstraint, Language, Task
from evalpkg.testset.traps import perturb_sql  # the defects are the trap mutations validate runs

if TYPE_CHECKING:  # the openai SDK is imported only by runs that call a model
    from evalpkg.agent.model_client import ModelClient


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
    suffix: str = ""  # appended to the answer built from the last result
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
        return ModelTurn(text=f"结果 / result: {json.dumps(rows, ensure_ascii=False)} {self.suffix}".strip())


def _satisfying(c: ArgConstraint, fallback: str) -> str:
    """An argument value that meets the constraint (what a perfect agent would send)."""
    if c.equals is not None:
        return c.equals
    parts = list(c.contains_all) + ([c.contains_any[0]] if c.contains_any else [])
    return " ".join(parts) or fallback


def gold_plan(task: Task, sql: str | None = None, strategy: str = "react") -> list[list[tuple[str, dict[str, Any]]]]:
    """Every expected tool call of the task, in order, with arguments that meet its constraints and
    the gold SQL as the query (the harness self-test). The plan strategy reads the schema with
    get_table_columns and submits the SQL's plan (derived by the translator) instead."""
    schema = "get_table_columns" if strategy == "plan" else "query_schema"
    plan: list[list[tuple[str, dict[str, Any]]]] = [[(schema, {"table_name": t}) for t in task.tables]]
    for turn in task.turns:
        for call in turn.expected_tool_calls:
            if call.name == "query_schema":
                continue  # loaded above
            if call.name == "execute_sql":
                if task.gold_sql and strategy == "plan":
                    submitted = plan_from_sql(sql or task.gold_sql[0]).model_dump(exclude_defaults=True)
                    plan.append([("submit_plan", {"plan": submitted})])
                elif task.gold_sql:
                    plan.append([("execute_sql", {"sql": sql or task.gold_sql[0]})])
                continue
            arg = {
                "query_dictionary": "term",
                "ask_clarify": "question",
                "search_sql_examples": "question",
                "validate_result": "claim",
            }.get(call.name)
            if arg is None:
                continue
            fallback = task.tables[0] if task.tables else "NULL"
            if call.name == "ask_clarify":
                fallback = " / ".join(s.keywords[0] for s in task.hidden_slots if s.keywords) or "?"
            value = _satisfying(call.args[arg], fallback) if arg in call.args else fallback
            if call.name == "ask_clarify":  # ask about every hidden slot, as a careful clinician's assistant would
                value = " / ".join([value, *(s.keywords[0] for s in task.hidden_slots if s.keywords)]) + "?"
            plan.append([(call.name, {arg: value})])
    return plan


def gold_policy(task: Task, language: Language = Language.zh, strategy: str = "react") -> ScriptedPolicy:
    points = " ".join(p.text[language] for p in task.answer_points if p.text and language in p.text)
    if not task.answerable:
        return ScriptedPolicy(
            "gold",
            gold_plan(task, strategy=strategy),
            final=points or "数据库中没有这项数据，无法回答。 The database does not hold this data.",
        )
    return ScriptedPolicy("gold", gold_plan(task, strategy=strategy), suffix=points)


def perturbation_policy(
    task: Task, kind: str, language: Language = Language.zh, strategy: str = "react"
) -> ScriptedPolicy:
    """The gold agent with one defect, so scorers can be checked against a known delta (with the plan
    strategy, the plan of the defective SQL: the wrong time column, a dropped NULL check...)."""
    policy = gold_policy(task, language, strategy)
    policy.name = f"perturb:{kind}"
    if kind == "extra_calls":
        policy.plan.insert(0, [("get_table_columns" if strategy == "plan" else "query_schema", {})] * 3)
    elif task.gold_sql:
        policy.plan = gold_plan(task, perturb_sql(task.gold_sql[0], kind), strategy)
    return policy


@dataclass
class OpenAIPolicy:
    """Any OpenAI-compatible chat-completions endpoint (vLLM, llama.cpp server) with native tool
    calls; models that answer in text are read by the tolerant parser in the loop."""

    client: ModelClient  # the shard's, shared by every dialogue
    model: str
    temperature: float = 0.0
    seed: int | None = 0
    native_tools: bool = True
    name: str = "openai"
    deadline: float | None = None  # time.monotonic() by which the dialogue ends: no call outlives it

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
        retries: list[RetryRecord] = []
        try:
            response = self.client.chat(retries, deadline=self.deadline, **kwargs)
        except Exception as exc:
            return ModelTurn.failed(exc, retries)
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
            retries=retries,
        )
