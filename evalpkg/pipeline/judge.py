"""An optional LLM judge for free-text answer points: a rubric prompt (data/judge_rubric.json) on an
OpenAI-compatible endpoint. Its verdicts are recorded next to the offline score, never instead of it,
so runs scored with and without a judge stay comparable."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from evalpkg.agent.trajectory import RetryRecord
from evalpkg.testset.models import Language

if TYPE_CHECKING:  # the openai SDK is imported only by runs that call a model
    from evalpkg.agent.model_client import ModelClient

VERDICT = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


@lru_cache(maxsize=1)
def rubric() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        resources.files("evalpkg.pipeline").joinpath("data/judge_rubric.json").read_text("utf-8")
    )
    return data


def verdict(text: str) -> bool | None:
    """The judge's yes/no: {"verdict": ...} JSON, else the first yes or no it wrote; None if neither."""
    try:
        value = json.loads(text)
        if isinstance(value, dict) and str(value.get("verdict", "")).lower() in ("yes", "no"):
            return str(value["verdict"]).lower() == "yes"
    except json.JSONDecodeError:
        pass
    m = VERDICT.search(text)
    return m.group(1).lower() == "yes" if m else None


class Judge:
    def __init__(self, client: ModelClient, model: str) -> None:
        self.client, self.model = client, model

    def holds(self, answer: str, point: str, language: Language) -> bool | None:
        """Whether the answer states the point; None when the judge could not say (an error or no
        verdict), which leaves the point unjudged rather than failed."""
        r = rubric()
        retries: list[RetryRecord] = []  # the judge's retries are not part of any trajectory
        try:
            response = self.client.chat(
                retries,
                model=self.model,
                temperature=0.0,
                messages=[
                    {"role": "system", "content": r["system"][language]},
                    {"role": "user", "content": r["user"][language].format(point=point, answer=answer)},
                ],
            )
        except Exception:  # a failing judge must not fail the scoring
            return None
        return verdict(response.choices[0].message.content or "")

    def close(self) -> None:
        self.client.close()
