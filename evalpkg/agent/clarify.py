"""The state-driven clarification policy (missing_slots drive the next question). With the
state toolset, code, not the model, decides what ask_clarify asks: while slots are missing, exactly
the first missing one, in the words of data/slot_questions.json; once none is, no question at all
(the state is complete: query). So no question is ever about a filled slot. The clinician's reply
is merged into the state through the same deterministic `merge` as the model's proposals."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from evalpkg.agent.state import QueryState, asked, merge
from evalpkg.agent.user_sim import Clinician
from evalpkg.testset.models import Language

# The clinician is the source of truth for what they meant: their answer outranks a model's guess at
# the default confidence (merge keeps the guess in the slot's history).
CLINICIAN_CONFIDENCE = 1.0


@lru_cache(maxsize=1)
def slot_questions() -> dict[str, dict[str, str]]:
    data = json.loads(resources.files("evalpkg.agent").joinpath("data/slot_questions.json").read_text("utf-8"))
    questions: dict[str, dict[str, str]] = data["questions"]
    return questions


def next_slot(state: QueryState) -> str | None:
    """The slot the next question asks about: the first missing one; None when the state is complete."""
    return state.missing_slots[0] if state.missing_slots else None


def question_for(slot: str, language: Language) -> str:
    return slot_questions()[slot][language.value]


@dataclass
class Asked:
    """What one ask_clarify did: the question code asked for which slot, the reply, the merged state."""

    slot: str
    question: str
    answer: str
    revealed: dict[str, str | None]
    state: QueryState


def ask_next(state: QueryState, user: Clinician, language: Language, turn: int) -> Asked | None:
    """Ask the clinician about the first missing slot and merge what the reply reveals; None (nothing
    asked) when no slot is missing."""
    slot = next_slot(state)
    if slot is None:
        return None
    question = question_for(slot, language)
    new = asked(state, question, about=[slot], turn=turn)
    answer = user.answer(question)
    revealed: dict[str, str | None] = dict(user.asked[-1].revealed) if user.asked else {}
    new = merge(new, revealed, turn, CLINICIAN_CONFIDENCE) if revealed else new
    return Asked(slot, question, answer, revealed, new)
