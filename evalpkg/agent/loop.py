"""The ReAct loop: model proposes, tools run, everything is recorded; limits end runs with a
recorded outcome, never an exception (a circuit breaker ends a runaway loop with a fallback)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Protocol

from evalpkg.agent.function_schema import openai_tools
from evalpkg.agent.parser import parse
from evalpkg.agent.tools import Toolkit
from evalpkg.agent.trajectory import RetryRecord, Step, ToolCallRecord, Trajectory, TurnAnswer, now, sha256_text

PROMPT_VERSION = "react_v1"
NUDGE = "Reply with one tool call or a final answer in the JSON format."
TRIMMED = "[earlier tool output trimmed; call the tool again if you need it]"


@dataclass
class Limits:
    max_steps: int = 12
    max_calls_per_tool: int = 6
    max_calls_total: int = 16
    max_unparseable: int = 2
    deadline_s: float | None = None  # wall-clock budget of the whole dialogue


@dataclass
class ModelTurn:
    text: str = ""
    tool_calls: list[tuple[str, str, dict[str, Any] | str]] = field(default_factory=list)  # (id, name, args)
    native: bool = True  # tool calls came through the API, not the text protocol
    reasoning: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str = ""
    retries: list[RetryRecord] = field(default_factory=list)

    @classmethod
    def failed(cls, exc: Exception, retries: list[RetryRecord] | None = None) -> ModelTurn:
        """An endpoint failure is an outcome, not a crash."""
        return cls(error=f"{type(exc).__name__}: {str(exc)[:300]}", retries=retries or [])


class Policy(Protocol):
    """Whatever decides the next action: an LLM endpoint or a scripted reference agent."""

    name: str

    def next(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelTurn: ...


@lru_cache(maxsize=8)
def prompt(name: str = PROMPT_VERSION) -> str:
    return resources.files("evalpkg.agent").joinpath(f"prompts/{name}.md").read_text(encoding="utf-8")


def system_prompt(name: str = PROMPT_VERSION, disabled_rules: tuple[int, ...] = ()) -> str:
    """The prompt file without the numbered rules an ablation switches off."""
    lines, skipping = [], False
    for line in prompt(name).splitlines():
        head = line.split(".", 1)[0]
        if head.isdigit():
            skipping = int(head) in disabled_rules
        elif not line.startswith(" "):
            skipping = False
        if not skipping:
            lines.append(line)
    return "\n".join(lines) + "\n"


def trim_context(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Between dialogue turns keep the questions and answers, hide old tool output."""
    return [{**m, "content": TRIMMED} if m.get("role") == "tool" else m for m in messages]


def _summary_answer(toolkit: Toolkit) -> str:
    if toolkit.last_result is None:
        return "I could not complete the query within the allowed tool calls."
    rows = toolkit.last_result["rows"][:5]
    return f"Partial answer from the last successful query: columns {toolkit.last_result['columns']}, rows {rows}"


FALLBACK = "answered from the last successful result"
# The plan strategy's breaker returns a fallback plan, recorded as such.
PLAN_FALLBACK = '{"action": "SCAN_ALL_TABLES", "hint": "未找到明确关联字段，请检查查询表述"}; ' + FALLBACK


def _fall_back(traj: Trajectory, reason: str, toolkit: Toolkit, *, replace_answer: bool = False) -> None:
    """A limit ended the dialogue: the answer is built from the last successful result (kept, for a
    timeout or the step limit, when the model had already answered)."""
    traj.stop_reason = reason  # type: ignore[assignment]
    traj.fallback = PLAN_FALLBACK if "submit_plan" in toolkit.tool_names else FALLBACK
    traj.final_answer = (None if replace_answer else traj.final_answer) or _summary_answer(toolkit)


def _assistant_message(turn: ModelTurn, calls: list[tuple[str, str, Any]]) -> dict[str, Any]:
    """The model's turn as the transcript holds it: native tool calls, or its text."""
    if not turn.native:
        return {"role": "assistant", "content": turn.text}
    return {
        "role": "assistant",
        "content": turn.text or "",  # some servers reject null content
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False),
                },
            }
            for cid, name, args in calls
        ],
    }


@dataclass
class _Budget:
    limits: Limits
    total: int = 0
    per_tool: dict[str, int] = field(default_factory=dict)

    def spend(self, name: str) -> str:
        """'' when the call may run (and counts it), else the limit it would break."""
        if self.total >= self.limits.max_calls_total:
            return "total_call_limit"
        if self.per_tool.get(name, 0) >= self.limits.max_calls_per_tool:
            return "tool_call_limit"
        self.total += 1
        self.per_tool[name] = self.per_tool.get(name, 0) + 1
        return ""


def _run_calls(
    calls: list[tuple[str, str, Any]],
    native: bool,
    toolkit: Toolkit,
    budget: _Budget,
    step: Step,
    traj: Trajectory,
    messages: list[dict[str, Any]],
) -> str:
    """Run a turn's tool calls in order, recording each; returns the limit that stopped them, or ''."""
    for cid, name, args in calls:
        if breaker := budget.spend(name):
            return breaker
        call_started = now()
        result = toolkit.call(name, args)
        text = result.text()
        step.tool_calls.append(
            ToolCallRecord(
                call_id=cid,
                name=name,
                arguments=args,
                ok=result.ok,
                result=text,
                result_sha256=sha256_text(text),
                error=result.error,
                cached=result.cached,
                started_at=call_started,
                elapsed_ms=result.elapsed_ms,
                sql=result.sql,
            )
        )
        if result.ok and result.sql:
            traj.final_sql = result.sql
        if native:
            messages.append({"role": "tool", "tool_call_id": cid, "content": text})
        else:
            messages.append({"role": "user", "content": f"Tool result ({name}): {text}"})
    return ""


def _record_state(traj: Trajectory, toolkit: Toolkit) -> None:
    """With the state toolset, the state after the latest step (a step is sealed when the next starts
    or the dialogue ends, so it holds what that step's calls merged)."""
    if traj.steps and traj.steps[-1].state is None and toolkit.tracks_state:
        traj.steps[-1].state = toolkit.state.model_copy(deep=True)


def _model_step(
    policy: Policy, messages: list[dict[str, Any]], tools: list[dict[str, Any]], index: int
) -> tuple[ModelTurn, Step]:
    started = now()
    t0 = time.perf_counter()
    try:
        turn = policy.next(messages, tools)
    except Exception as exc:  # a failing endpoint ends the dialogue as a recorded outcome
        turn = ModelTurn.failed(exc)
    step = Step(
        index=index,
        started_at=started,
        ended_at=started,
        model_text=turn.text,
        reasoning=turn.reasoning,
        prompt_tokens=turn.prompt_tokens,
        completion_tokens=turn.completion_tokens,
        latency_ms=(time.perf_counter() - t0) * 1000,
        retries=turn.retries,
    )
    return turn, step


def _take_step(
    policy: Policy, toolkit: Toolkit, tools: list[dict[str, Any]], talk: _Conversation, budget: _Budget, index: int
) -> bool:
    """One model turn and the tool calls it makes (natively or in its text): True where the dialogue ends."""
    traj = talk.traj
    turn, step = _model_step(policy, talk.messages, tools, index)
    traj.steps.append(step)
    if turn.error:
        step.parse_error = turn.error
        traj.stop_reason = "model_error"
        return True
    calls = turn.tool_calls
    if not calls:
        action = parse(turn.text)
        if action.kind == "final":
            return talk.answered(turn, step, action.text)
        if action.kind != "tool":
            return talk.unreadable(turn, step, action.error)
        calls = [(f"text-{uuid.uuid4().hex[:8]}", action.name, action.arguments or {})]
        turn.native = False
    talk.messages.append(_assistant_message(turn, calls))
    breaker = _run_calls(calls, turn.native, toolkit, budget, step, traj, talk.messages)
    step.ended_at = now()
    if breaker:
        _fall_back(traj, breaker, toolkit, replace_answer=True)
        return True
    return False


def run_dialogue(
    policy: Policy,
    toolkit: Toolkit,
    *,
    instance_id: str,
    task_id: str,
    language: str,
    complexity: str,
    question: str,
    followups: tuple[str, ...] = (),
    limits: Limits | None = None,
    system_prompt: str | None = None,
) -> Trajectory:
    """Model turn, then its tool calls, until a final answer with no follow-up left, a model error,
    unparseable output or a limit; every way out is a recorded stop reason."""
    limits = limits or Limits()
    tools = openai_tools(toolkit.tool_names, type(toolkit))
    traj = Trajectory(
        instance_id=instance_id,
        task_id=task_id,
        agent=policy.name,
        language=language,
        complexity=complexity,
        question=question,
        started_at=now(),
    )
    talk = _Conversation(traj, [{"role": "system", "content": system_prompt or prompt()}], list(followups), limits)
    talk.messages.append({"role": "user", "content": question})
    budget = _Budget(limits)
    deadline = time.monotonic() + limits.deadline_s if limits.deadline_s else None
    for index in range(limits.max_steps):
        _record_state(traj, toolkit)
        if deadline is not None and time.monotonic() > deadline:
            _fall_back(traj, "timeout", toolkit)
            break
        if _take_step(policy, toolkit, tools, talk, budget, index):
            break
    else:
        _fall_back(traj, "max_steps", toolkit)
    return _finished(traj, toolkit)


@dataclass
class _Conversation:
    """The messages so far and what is left to say: the follow-ups not yet asked, the unreadable turns."""

    traj: Trajectory
    messages: list[dict[str, Any]]
    followups: list[str]
    limits: Limits
    unparseable: int = 0

    def answered(self, turn: ModelTurn, step: Step, text: str) -> bool:
        """A final answer: True where the dialogue ends; else the next follow-up is asked (the answer so far
        graded as its turn's)."""
        self.traj.final_answer = text
        step.ended_at = now()
        if not self.followups:
            self.traj.stop_reason = "final_answer"
            return True
        self.traj.turn_answers.append(TurnAnswer(answer=text, sql=self.traj.final_sql))
        self.messages = trim_context([*self.messages, {"role": "assistant", "content": turn.text}])
        step.user_message = self.followups.pop(0)
        self.messages.append({"role": "user", "content": step.user_message})
        return False

    def unreadable(self, turn: ModelTurn, step: Step, error: str) -> bool:
        """A turn that is neither a tool call nor an answer: True where too many end the dialogue, else the
        model is nudged."""
        self.unparseable += 1
        step.parse_error = error
        if self.unparseable >= self.limits.max_unparseable:
            self.traj.stop_reason = "unparseable"
            self.traj.final_answer = turn.text
            return True
        self.messages += [{"role": "assistant", "content": turn.text}, {"role": "user", "content": NUDGE}]
        return False


def _finished(traj: Trajectory, toolkit: Toolkit) -> Trajectory:
    """The dialogue state at its end, the clarifying questions asked and their answers, the end time."""
    _record_state(traj, toolkit)
    if toolkit.user is not None:
        traj.clarifications = [
            {"question": c.question, "slots": c.slots, "answer": c.answer}
            | ({"retries": [r.model_dump() for r in c.retries]} if c.retries else {})
            for c in toolkit.user.asked
        ]
    traj.ended_at = now()
    return traj
