"""What a run records: every step of every trajectory, versioned and hashable, so a run can be audited and
replayed from its record."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic import BaseModel

from evalpkg.agent.state import QueryState

# 2: Step.state, the dialogue state after each step (state toolset), and ToolCallRecord.sql, the SQL a call
# ran (a plan compiled by submit_plan); version 1 records load unchanged
TRAJECTORY_FORMAT_VERSION: Final = 2

StopReason = Literal[
    "final_answer",
    "max_steps",
    "tool_call_limit",
    "total_call_limit",
    "model_error",
    "unparseable",
    "timeout",
]


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ToolCallRecord(BaseModel):
    call_id: str
    name: str
    arguments: dict[str, Any] | str
    ok: bool
    result: str  # exactly what the model read
    result_sha256: str  # lets a later reader prove the result was not altered
    error: str | None = None
    cached: bool = False
    started_at: str
    elapsed_ms: float
    sql: str | None = None  # the SQL the call ran: execute_sql's, or the plan submit_plan compiled


class RetryRecord(BaseModel):
    """One failed model call that was tried again (429, 5xx, a dropped connection)."""

    attempt: int  # 1 = the first call failed
    error: str
    wait_s: float  # backoff slept before the next attempt


class Step(BaseModel):
    index: int
    started_at: str
    ended_at: str
    model_text: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallRecord] = []
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    parse_error: str = ""
    user_message: str = ""  # a simulated user's reply injected after this step
    retries: list[RetryRecord] = []  # failed attempts of this step's model call; default keeps old records loadable
    state: QueryState | None = None  # the dialogue state after this step; None without the state toolset


class TurnAnswer(BaseModel):
    """The agent's final answer to a user turn that a follow-up came after, and the SQL it then stood on."""

    answer: str
    sql: str | None = None


class Trajectory(BaseModel):
    format_version: Literal[1, 2] = TRAJECTORY_FORMAT_VERSION
    instance_id: str
    task_id: str
    agent: str
    language: str
    complexity: str
    question: str
    steps: list[Step] = []
    final_answer: str = ""
    final_sql: str | None = None  # last execute_sql that succeeded
    stop_reason: StopReason = "final_answer"
    fallback: str = ""  # what the circuit breaker did instead
    clarifications: list[dict[str, Any]] = []
    # one per user turn answered before a follow-up (the last turn's answer is final_answer, final_sql);
    # the default keeps records from before follow-ups loadable
    turn_answers: list[TurnAnswer] = []
    started_at: str = ""
    ended_at: str = ""

    def tool_calls(self) -> list[ToolCallRecord]:
        return [c for s in self.steps for c in s.tool_calls]

    def final_state(self) -> QueryState | None:
        """The dialogue state after the last step that recorded one; None for a run without it."""
        return next((s.state for s in reversed(self.steps) if s.state is not None), None)

    def verify_hashes(self) -> bool:
        return all(sha256_text(c.result) == c.result_sha256 for c in self.tool_calls())

    def digest(self) -> str:
        return sha256_text(json.dumps(self.model_dump(mode="json"), sort_keys=True, ensure_ascii=False))
