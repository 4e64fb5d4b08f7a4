"""Policies: the OpenAI-compatible model, and scripted reference agents for testing the harness
(gold replay must score 100%) and the scorers (perturbations)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalpkg.agent.loop import ModelTurn, prompt
from evalpkg.agent.plan import plan_from_sql
from evalpkg.agent.trajectory import RetryRecord
from evalpkg.testset.models import AnswerPoint, ArgConstraint, Language, Task, Turn
from evalpkg.testset.traps import perturb_sql  # the defects are the trap mutations validate runs

if TYPE_CHECKING:  # the openai SDK is imported only by runs that call a model
    from evalpkg.agent.model_client import ModelClient


STALE_FOLLOWUP = "stale_followup"  # the perturbation that answers a follow-up with the previous turn's SQL


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


# The tool calls a scripted policy makes, step by step (not a plan object of the plan strategy, agent/plan/).
CallScript = list[list[tuple[str, dict[str, Any]]]]


@dataclass
class ScriptedPolicy:
    """Replays a fixed script of tool calls, then answers from the last result; in a dialogue with
    follow-ups, the next turn's script and answer suffix come after each answer."""

    name: str
    script: CallScript
    final: str = ""
    suffix: str = ""  # appended to the answer built from the last result
    position: int = 0
    followups: list[tuple[CallScript, str]] = field(default_factory=list)  # (script, suffix) of each later turn

    def next(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelTurn:
        if self.position < len(self.script):
            calls = self.script[self.position]
            self.position += 1
            return ModelTurn(tool_calls=[(_cid(), name, args) for name, args in calls])
        if self.final:
            answer = self.final
        else:
            rows = _last_tool_result(messages).get("rows", [])
            answer = f"结果 / result: {json.dumps(rows, ensure_ascii=False)} {self.suffix}".strip()
        if self.followups:  # the loop delivers the next user turn after this answer
            (self.script, self.suffix), self.position, self.final = self.followups.pop(0), 0, ""
        return ModelTurn(text=answer)


def _satisfying(c: ArgConstraint, fallback: str) -> str:
    """An argument value that meets the constraint (what a perfect agent would send)."""
    if c.equals is not None:
        return c.equals
    parts = list(c.contains_all) + ([c.contains_any[0]] if c.contains_any else [])
    return " ".join(parts) or fallback


def _segments(task: Task) -> list[list[Turn]]:
    """The turns grouped by what they are graded on: the question with the clarifications that refine
    it, then each follow-up with its own gold."""
    out: list[list[Turn]] = []
    for i, turn in enumerate(task.turns):
        if i == 0 or turn.gold_sql:
            out.append([])
        out[-1].append(turn)
    return out


def _turn_calls(task: Task, turns: list[Turn], gold: list[str], sql: str | None, strategy: str) -> CallScript:
    """The expected calls of these turns, in order, with arguments that meet their constraints and the
    gold SQL (or `sql`) as the query; schema reads are left out (the plan reads them first)."""
    plan: CallScript = []
    for turn in turns:
        for call in turn.expected_tool_calls:
            if call.name == "query_schema":
                continue  # loaded above
            if call.name == "execute_sql":
                if gold and strategy == "plan":
                    submitted = plan_from_sql(sql or gold[0]).model_dump(exclude_defaults=True)
                    plan.append([("submit_plan", {"plan": submitted})])
                elif gold:
                    plan.append([("execute_sql", {"sql": sql or gold[0]})])
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


def gold_script(task: Task, sql: str | None = None, strategy: str = "react") -> CallScript:
    """Every expected tool call of the question and its clarifications, in order, with arguments that
    meet its constraints and the gold SQL as the query (the harness self-test). The plan strategy reads
    the schema with get_table_columns and submits the SQL's plan (derived by the translator) instead."""
    schema = "get_table_columns" if strategy == "plan" else "query_schema"
    reads: CallScript = [[(schema, {"table_name": t}) for t in task.tables]]
    return reads + _turn_calls(task, _segments(task)[0], task.gold_sql, sql, strategy)


def _points(points: list[AnswerPoint], language: Language) -> str:
    return " ".join(p.text[language] for p in points if p.text and language in p.text)


def followup_scripts(
    task: Task, language: Language, strategy: str = "react", sqls: list[str | None] | None = None
) -> list[tuple[CallScript, str]]:
    """(plan, answer suffix) of each follow-up with its own gold: its expected calls with its gold SQL
    (or sqls[i], for the i-th follow-up) and its text points."""
    out = []
    for i, turns in enumerate(_segments(task)[1:]):
        sql = sqls[i] if sqls is not None else None
        out.append(
            (_turn_calls(task, turns, turns[0].gold_sql, sql, strategy), _points(turns[0].answer_points, language))
        )
    return out


def gold_policy(task: Task, language: Language = Language.zh, strategy: str = "react") -> ScriptedPolicy:
    points = _points(task.answer_points, language)
    if not task.answerable:
        return ScriptedPolicy(
            "gold",
            gold_script(task, strategy=strategy),
            final=points or "数据库中没有这项数据，无法回答。 The database does not hold this data.",
            followups=followup_scripts(task, language, strategy),
        )
    return ScriptedPolicy(
        "gold",
        gold_script(task, strategy=strategy),
        suffix=points,
        followups=followup_scripts(task, language, strategy),
    )


def perturbation_policy(
    task: Task, kind: str, language: Language = Language.zh, strategy: str = "react"
) -> ScriptedPolicy:
    """The gold agent with one defect, so scorers can be checked against a known delta (with the plan
    strategy, the plan of the defective SQL: the wrong time column, a dropped NULL check...)."""
    policy = gold_policy(task, language, strategy)
    policy.name = f"perturb:{kind}"
    if kind == "extra_calls":
        policy.script.insert(0, [("get_table_columns" if strategy == "plan" else "query_schema", {})] * 3)
    elif kind == STALE_FOLLOWUP:
        # each follow-up answered with the SQL of the turn before it: graded wrong on that turn only
        golds = [task.turns[i].gold_sql[0] if i else task.gold_sql[0] for i in task.graded_turns()]
        policy.followups = followup_scripts(task, language, strategy, list(golds[:-1]))
    elif task.gold_sql:
        policy.script = gold_script(task, perturb_sql(task.gold_sql[0], kind), strategy)
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
