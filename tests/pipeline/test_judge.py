"""The optional LLM judge of free-text answer points: its verdict is read leniently, recorded apart
from the offline coverage, and a failing judge leaves points unjudged instead of failing the score."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from evalpkg.agent.model_client import ModelClient
from evalpkg.pipeline.coverage import judged_coverage
from evalpkg.pipeline.judge import Judge, verdict
from evalpkg.runconfig import RunConfig
from evalpkg.testset.models import Task
from tests.agent.fake_endpoint import FakeEndpoint, serving
from tests.testset.test_models_and_fingerprints import task_dict

VERDICTS = [
    ('{"verdict": "yes"}', True, "the rubric's JSON"),
    ('{"verdict": "No"}', False, "JSON, any case"),
    ("Yes. The answer compares both months.", True, "a plain yes"),
    ("no", False, "a plain no"),
    ('```json\n{"verdict": "yes"}\n```', True, "fenced JSON: the first yes counts"),
    ("I cannot tell.", None, "no verdict: unjudged, not failed"),
    ("", None, "empty"),
]


@pytest.mark.parametrize(("text", "expected", "reason"), VERDICTS, ids=[v[-1] for v in VERDICTS])
def test_verdict(text: str, expected: bool | None, reason: str) -> None:
    assert verdict(text) is expected, reason


class JudgeEndpoint(FakeEndpoint):
    """Says yes when the answer mentions the hospital-wide comparison, whatever the wording."""

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        answer = request["messages"][-1]["content"].split("Answer:")[-1].split("回答：")[-1]
        yes = any(word in answer for word in ("hospital-wide", "全院"))
        return {"role": "assistant", "content": '{"verdict": "%s"}' % ("yes" if yes else "no")}


def task_with_text_points() -> Task:
    points = [
        {"kind": "number", "row": 0, "col": 0},
        {"kind": "text", "text": {"zh": "与全院同期对比", "en": "Compared with the whole hospital"}},
        {"kind": "text", "text": {"zh": "说明口径", "en": "States the definition used"}},
    ]
    return Task.model_validate(task_dict() | {"answer_points": points})


JUDGED = [
    ("The department fell 30%, a hospital-wide swing.", "en", 1.0, "both text points judged stated"),
    ("The department fell 30%.", "en", 0.0, "neither stated"),
    ("科室下降30%，全院同向变化。", "zh", 1.0, "judged in the instance's language"),
]


@pytest.mark.parametrize(("answer", "language", "expected", "reason"), JUDGED, ids=[j[-1] for j in JUDGED])
def test_judged_coverage_counts_the_text_points_the_judge_accepts(
    answer: str, language: str, expected: float, reason: str
) -> None:
    endpoint = JudgeEndpoint()
    with serving(endpoint) as url:
        judge = Judge(ModelClient(url), "judge")
        try:
            assert judged_coverage(task_with_text_points(), answer, language, judge) == expected, reason
        finally:
            judge.close()
    assert endpoint.requests == 2  # one call per text point; number points are never sent


def test_a_failing_judge_leaves_points_unjudged() -> None:
    with serving(FakeEndpoint(failures=[500] * 10)) as url:
        judge = Judge(ModelClient(url, backoff_s=0.001, max_retries=1), "judge")
        try:
            assert judged_coverage(task_with_text_points(), "anything", "en", judge) is None
        finally:
            judge.close()
    assert judged_coverage(task_with_text_points(), "anything", "en", None) is None  # no judge configured


def test_judge_fields_go_together_and_stay_out_of_the_fingerprint() -> None:
    with pytest.raises(ValidationError, match="judge_endpoint and judge_model go together"):
        RunConfig(judge_endpoint="http://127.0.0.1:9/v1")
    judged = RunConfig(judge_endpoint="http://127.0.0.1:9/v1", judge_model="judge")
    assert judged.fingerprint() == RunConfig().fingerprint()  # runs with and without a judge stay comparable
