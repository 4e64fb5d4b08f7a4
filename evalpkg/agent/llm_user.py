"""An LLM-played clinician for ask_clarify, on the same OpenAI-compatible endpoint; it knows only
the task's hidden slots. Which slots a question asked about is still decided by their keywords,
so clarification scoring stays deterministic."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evalpkg.agent.trajectory import RetryRecord
from evalpkg.agent.user_sim import Clarification, revealed_by
from evalpkg.testset.models import HiddenSlot, Language

if TYPE_CHECKING:  # the openai SDK is imported only by runs that call a model
    from evalpkg.agent.model_client import ModelClient

SYSTEM = {
    Language.zh: "你是一位临床医生，正在向数据助手提需求。只根据下面的事实回答助手的澄清问题，一两句话；"
    "问题和这些事实无关时，就说与你的需求无关。事实：\n{facts}",
    Language.en: "You are a clinician asking a data assistant for numbers. Answer its clarifying question from "
    "these facts only, in one or two sentences; if the question is unrelated, say so. Facts:\n{facts}",
}


@dataclass
class LLMUser:
    hidden_slots: list[HiddenSlot]
    language: Language
    model: str
    client: ModelClient  # the shard's, shared with the agent
    temperature: float = 0.0
    asked: list[Clarification] = field(default_factory=list)
    deadline: float | None = None  # time.monotonic() by which the dialogue ends: no call outlives it

    def answer(self, question: str) -> str:
        facts = "\n".join(f"- {s.slot}: {s.answer[self.language]}" for s in self.hidden_slots) or "- (none)"
        retries: list[RetryRecord] = []
        response = self.client.chat(
            retries,
            deadline=self.deadline,
            model=self.model,
            temperature=self.temperature,
            messages=[
                {"role": "system", "content": SYSTEM[self.language].format(facts=facts)},
                {"role": "user", "content": question},
            ],
        )
        text = (response.choices[0].message.content or "").strip()
        matched = revealed_by(question, self.hidden_slots)
        self.asked.append(
            Clarification(question, [s.slot for s in matched], text, retries, {s.slot: s.value for s in matched})
        )
        return text

    @property
    def revealed(self) -> set[str]:
        return {slot for c in self.asked for slot in c.slots}
