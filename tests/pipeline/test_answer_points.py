"""Answer points by extraction: numbers within tolerance, entity names found in the answer whatever
their width or case, and points in cells the snapshot leaves empty left out."""

from __future__ import annotations

from typing import Any

import pytest

from evalpkg.pipeline.coverage import answer_coverage
from evalpkg.testset.models import Task
from tests.testset.test_models_and_fingerprints import task_dict

GOLD = [["心内科", "Cardiology", 120, None], ["ＩＣＵ", "Intensive Care", 80, ""]]
CASES: list[tuple[dict[str, Any], str, float | None, str]] = [
    ({"kind": "entity", "row": 0, "col": 0}, "心内科出院120人", 1.0, "the department named"),
    ({"kind": "entity", "row": 0, "col": 0}, "内科出院120人", 0.0, "a different (shorter) name does not count"),
    ({"kind": "entity", "row": 1, "col": 0}, "ICU had 80", 1.0, "full-width and ASCII are one name"),
    ({"kind": "entity", "row": 0, "col": 1}, "CARDIOLOGY: 120", 1.0, "case does not decide a name"),
    ({"kind": "entity", "row": 1, "col": 1}, "IntensiveCare: 80", 1.0, "spacing does not decide a name"),
    ({"kind": "entity", "row": 0, "col": 3}, "anything", None, "a NULL cell states nothing to check"),
    ({"kind": "entity", "row": 1, "col": 3}, "anything", None, "an empty name states nothing to check"),
    ({"kind": "entity", "row": 5, "col": 0}, "anything", None, "a row the snapshot lacks is left out"),
    ({"kind": "number", "row": 0, "col": 2, "tolerance": 0}, "共120人", 1.0, "a number by extraction"),
    ({"kind": "number", "row": 0, "col": 2, "tolerance": 0}, "共121人", 0.0, "a wrong number"),
]


@pytest.mark.parametrize(("point", "answer", "expected", "reason"), CASES, ids=[c[-1] for c in CASES])
def test_answer_points_by_extraction(point: dict[str, Any], answer: str, expected: float | None, reason: str) -> None:
    task = Task.model_validate(task_dict() | {"answer_points": [point]})
    coverage, missed = answer_coverage(task, answer, GOLD, "zh")
    assert coverage == expected, reason
    assert missed == ([0] if expected == 0.0 else []), reason


def test_an_entity_point_needs_its_cell() -> None:
    with pytest.raises(ValueError, match="entity answer point needs row and col"):
        Task.model_validate(task_dict() | {"answer_points": [{"kind": "entity", "row": 0}]})


FIRST_ATTEMPTS = [
    ('{"sql": "select 1"}', "select 1", True, True, "native arguments as JSON text: the first query is read"),
    ({"sql": "select 1"}, "select 1", True, True, "arguments as a dict"),
    ({"sql": "select 1"}, "select 1", False, False, "the first query was the final one: its match is reused"),
    ("{not json", "select 1", True, False, "unreadable arguments: no first query to credit"),
]


@pytest.mark.parametrize(
    ("arguments", "final_sql", "final_matches", "expected", "reason"),
    FIRST_ATTEMPTS,
    ids=[f[-1] for f in FIRST_ATTEMPTS],
)
def test_first_attempt_on_time_series(
    arguments: Any, final_sql: str, final_matches: bool, expected: bool, reason: str
) -> None:
    from evalpkg.agent.trajectory import Step, ToolCallRecord, Trajectory
    from evalpkg.pipeline.score import _first_attempt_correct

    call = ToolCallRecord(
        call_id="c1",
        name="execute_sql",
        arguments=arguments,
        ok=True,
        result="{}",
        result_sha256="",
        started_at="t",
        elapsed_ms=0,
    )
    traj = Trajectory(
        instance_id="i",
        task_id="t",
        agent="a",
        language="zh",
        complexity="plain",
        question="q",
        started_at="t",
        steps=[Step(index=0, started_at="t", ended_at="t", tool_calls=[call])],
        final_sql=final_sql,
    )
    task = Task.model_validate(task_dict() | {"type": "time_series"})
    # gold and executor are never reached: the first query is the final one, or there is none to run
    assert _first_attempt_correct(task, traj, None, None, final_matches) is expected, reason  # type: ignore[arg-type]
