"""Structured dialogue state for query dialogues: the model proposes slot values with a
tool call; deterministic code merges them (dedupe, conflict history, confidence) and recomputes
missing_slots, which decides whether to ask before querying."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field

STATE_FORMAT_VERSION = 2  # 2: open_slots and the log of questions asked
SLOTS: tuple[str, ...] = (
    "intent",
    "metric",
    "population",
    "time_range",
    "time_column",
    "department",
    "unit",
    "threshold",
)
# What any query needs before it can run; time_column only once a time range is known.
REQUIRED: tuple[str, ...] = ("intent", "metric", "population", "time_range")
CONFLICT_MARGIN = 0.1  # a conflicting value replaces the current one only if not clearly less sure


class SlotEvent(BaseModel):
    value: str
    turn: int
    confidence: float


class SlotState(BaseModel):
    current: str | None = None
    confidence: float = 0.0
    source_turn: int | None = None
    history: list[SlotEvent] = []


class AskedQuestion(BaseModel):
    """A clarifying question put to the clinician, with what the state held when it was asked: a
    question about a slot already filled is a wasted turn (scored as questions_about_filled_slots)."""

    turn: int
    question: str
    about: list[str]  # the slots the question asks about
    filled_when_asked: list[str]  # every slot that had a value at that moment


class QueryState(BaseModel):
    format_version: int = STATE_FORMAT_VERSION
    stage: Literal["start", "collecting", "ready"] = "start"
    slots: dict[str, SlotState] = Field(default_factory=lambda: {s: SlotState() for s in SLOTS})
    # slots beyond REQUIRED that this request leaves open ("our department": which one?); they are
    # missing until filled, so they drive a question too
    open_slots: list[str] = []
    missing_slots: list[str] = list(REQUIRED)
    last_question: str | None = None
    pending_answer_for: list[str] = []
    questions: list[AskedQuestion] = []
    updated_at: str = ""

    def value(self, slot: str) -> str | None:
        return self.slots[slot].current

    def filled(self) -> list[str]:
        return [s for s in SLOTS if self.slots[s].current]

    def next_action(self) -> Literal["ask_clarify", "query"]:
        return "ask_clarify" if self.missing_slots else "query"


def _normalize(value: str) -> str:
    return " ".join(value.strip().split()).lower()


def required_slots(state: QueryState) -> list[str]:
    """REQUIRED, the time column once a time range is known, then the open slots in SLOTS order: the
    order of missing_slots, whose first one is what the next question asks."""
    needed = list(REQUIRED)
    if state.value("time_range"):
        needed.append("time_column")
    return needed + [s for s in SLOTS if s in state.open_slots and s not in needed]


def _known(slot: str) -> str:
    if slot not in SLOTS:
        raise ValueError(f"unknown slot {slot!r}; slots are {', '.join(SLOTS)}")
    return slot


def merge(
    state: QueryState,
    proposal: Mapping[str, str | None],
    turn: int,
    confidence: float = 0.8,
    open_slots: list[str] | tuple[str, ...] = (),
) -> QueryState:
    """Pure function: the merged copy. Same value again raises confidence (dedupe); a different value
    is kept in history and wins only if its confidence is within CONFLICT_MARGIN of the current.
    open_slots are added to the slots this request needs (never removed: a request does not become
    less ambiguous by saying so)."""
    new = state.model_copy(deep=True)
    new.open_slots += [_known(s) for s in open_slots if s not in new.open_slots]
    for slot, raw in proposal.items():
        _known(slot)
        if raw is None or not str(raw).strip():
            continue
        value = str(raw).strip()
        s = new.slots[slot]
        if s.current is not None and _normalize(s.current) == _normalize(value):
            s.confidence = max(s.confidence, confidence)
            continue
        s.history.append(SlotEvent(value=value, turn=turn, confidence=confidence))
        if s.current is None or confidence >= s.confidence - CONFLICT_MARGIN:
            s.current, s.confidence, s.source_turn = value, confidence, turn
    answered = [p for p in new.pending_answer_for if new.slots[p].current]
    new.pending_answer_for = [p for p in new.pending_answer_for if p not in answered]
    new.missing_slots = [s for s in required_slots(new) if not new.slots[s].current]
    new.stage = "ready" if not new.missing_slots else "collecting"
    new.updated_at = datetime.now(UTC).isoformat(timespec="seconds")
    return new


def asked(state: QueryState, question: str, about: list[str] | None = None, turn: int = 0) -> QueryState:
    """Record a clarifying question: the next answer is for `about`, by default the first one or two
    slots still missing."""
    new = state.model_copy(deep=True)
    new.last_question = question
    new.pending_answer_for = list(new.missing_slots[:2] if about is None else about)
    new.questions.append(
        AskedQuestion(turn=turn, question=question, about=list(new.pending_answer_for), filled_when_asked=new.filled())
    )
    return new
