"""The simulated clinician behind ask_clarify: scripted from the task's hidden slots (rules are data,
data/user_sim.json), answering in the task's language and recording what was asked."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Protocol

from evalpkg.agent.trajectory import RetryRecord
from evalpkg.testset.models import HiddenSlot, Language


@lru_cache(maxsize=1)
def _rules() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        resources.files("evalpkg.agent").joinpath("data/user_sim.json").read_text("utf-8")
    )
    return data


@dataclass
class Clarification:
    question: str
    slots: list[str]
    answer: str
    retries: list[RetryRecord] = field(default_factory=list)  # an LLM-played clinician's failed calls
    # slot -> value the reply tells (the hidden slots the question asked about): what the dialogue state merges
    revealed: dict[str, str] = field(default_factory=dict)


def revealed_by(question: str, hidden_slots: list[HiddenSlot]) -> list[HiddenSlot]:
    """The hidden slots a question asks about, by their keywords: one rule for every clinician."""
    q = question.lower()
    return [s for s in hidden_slots if any(k.lower() in q for k in s.keywords)]


class Clinician(Protocol):
    """Who answers ask_clarify: the scripted clinician or an LLM-played one (llm_user.LLMUser)."""

    asked: list[Clarification]

    def answer(self, question: str) -> str: ...


@dataclass
class ScriptedUser:
    hidden_slots: list[HiddenSlot]
    language: Language
    asked: list[Clarification] = field(default_factory=list)

    def answer(self, question: str) -> str:
        rules = _rules()
        matched = revealed_by(question, self.hidden_slots)
        if matched:
            text = str(rules["joiner"][self.language]).join(s.answer[self.language] for s in matched)
        elif self.hidden_slots:
            text = str(rules["irrelevant"][self.language])
        else:
            text = str(rules["not_needed"][self.language])
        self.asked.append(
            Clarification(question, [s.slot for s in matched], text, revealed={s.slot: s.value for s in matched})
        )
        return text

    @property
    def revealed(self) -> set[str]:
        return {slot for c in self.asked for slot in c.slots}
