"""The seed's measures computed from scores: citation errors, clarification need, robustness gap,
and paired differences for `evalpkg compare`."""

from __future__ import annotations

from typing import Any

import pytest

from evalpkg.agent.trajectory import Step, ToolCallRecord, Trajectory, sha256_text
from evalpkg.pipeline.citations import unsupported_numbers
from evalpkg.pipeline.metrics import breakdown, paired_measures
from evalpkg.pipeline.score import InstanceScore


def score(iid: str, **kw: Any) -> InstanceScore:
    base: dict[str, Any] = dict(
        instance_id=iid, task_id=iid.split(":")[0], type="time_series", difficulty="easy", language="zh",
        complexity="plain", repeat=0, answerable=True, status="success", exec_match=True, correct=True,
        executable_sql=True, tool_calls=2, redundant_calls=0, expected_precision=1.0, expected_recall=1.0,
        order_ok=True, clarification_correct=True, answer_coverage=1.0, stop_reason="final_answer",
        latency_s=0.1, prompt_tokens=0, completion_tokens=0, tool_names=[], error_text="", final_sql="select 1",
    )  # fmt: skip
    return InstanceScore(**{**base, **kw})


def trajectory(answer: str, result: str) -> Trajectory:
    call = ToolCallRecord(
        call_id="c", name="execute_sql", arguments={"sql": "select 1 where x >= 7.0"}, ok=True, result=result,
        result_sha256=sha256_text(result), started_at="", elapsed_ms=1.0,
    )  # fmt: skip
    step = Step(index=0, started_at="", ended_at="", tool_calls=[call])
    return Trajectory(instance_id="i", task_id="t", agent="a", language="en", complexity="plain",
                      question="How many in 2023 above 7.0?", steps=[step], final_answer=answer)  # fmt: skip


@pytest.mark.parametrize(
    ("answer", "unsupported"),
    [
        pytest.param("412 patients, 37.5%", [], id="numbers-from-the-result-and-a-rounded-ratio"),
        pytest.param("in 2023, 412 of them are above 7.0", [], id="years-and-thresholds-from-the-question"),
        pytest.param("413 patients", ["413"], id="off-by-one-count-is-unsupported"),
        pytest.param("about 50% of them", ["50%"], id="invented-percentage"),
        pytest.param("0 in department 0199, 412 elsewhere", [], id="zero-and-a-code-are-not-quantities"),
    ],
)
def test_citation_errors(answer: str, unsupported: list[str]) -> None:
    _, found = unsupported_numbers(trajectory(answer, '{"rows": [[412, 0.375]]}'))
    assert found == unsupported


def test_clarification_rates_split_by_need_and_robustness_gap() -> None:
    scores = [
        score("a:1", type="clarification", clarification_needed=True, clarification_rounds=1),
        score("b:1", clarification_rounds=1, clarification_correct=False, complexity="colloquial", correct=False),
        score("c:1", complexity="technical"),
        score("d:1", numbers_stated=4, unsupported_numbers=["9"]),
    ]
    o = breakdown(scores)["overall"]
    assert o["clarification_accuracy"] == 1.0  # only the task that needs a question
    assert o["unnecessary_question_rate"] == pytest.approx(1 / 3)
    assert o["numeric_citation_error_rate"] == 0.25 and o["answers_with_unsupported_numbers"] == 0.25
    assert o["robustness_gap"] == 1.0  # colloquial 0%, plain and technical 100%


def test_paired_measures_are_b_minus_a_on_shared_instances() -> None:
    a = [score("t:1", numbers_stated=2, unsupported_numbers=["1"]), score("u:1", first_attempt_correct=False)]
    b = [score("t:1", numbers_stated=2), score("u:1", first_attempt_correct=True), score("v:1")]
    m = paired_measures(a, b)
    assert m["numeric_citation_error_rate"]["difference"] == -0.5
    assert m["first_attempt_correct_time_series"] == {**m["first_attempt_correct_time_series"], "difference": 1.0}
    assert m["first_attempt_correct_time_series"]["instances"] == 1
