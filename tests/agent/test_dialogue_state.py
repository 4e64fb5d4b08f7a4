"""The dialogue state as the state toolset keeps it: clarification answers merged through
`merge`, the question decided by code (the first missing slot, never a filled one), the per-step
record in the trajectory, and its scores. No database: the tools used here never query."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from evalpkg.agent.clarify import CLINICIAN_CONFIDENCE, question_for, slot_questions
from evalpkg.agent.state import SLOTS, QueryState, asked, merge
from evalpkg.agent.state_plan import DROPPED_SLOT, GIVEN, with_state
from evalpkg.agent.tools import STATE_TOOL, TOOL_NAMES, Toolkit
from evalpkg.agent.trajectory import Step, Trajectory
from evalpkg.agent.user_sim import ScriptedUser
from evalpkg.pipeline.state_score import score_state
from evalpkg.runconfig import RunConfig
from evalpkg.testset import release
from evalpkg.testset.models import HiddenSlot, Language, Task

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
DEPARTMENT = HiddenSlot(
    slot="department",
    value="心血管内科 (0101)",
    keywords=["科室", "department"],
    answer={Language.zh: "心血管内科", Language.en: "Cardiology"},
)
TIME_COLUMN = HiddenSlot(
    slot="time_column",
    value="discharge date cyrq",
    keywords=["出院", "discharge"],
    answer={Language.zh: "按出院时间", Language.en: "by discharge date"},
)
STATED = {"intent": "count", "metric": "visits", "population": "outpatients", "time_range": "2023"}


def toolkit(hidden: list[HiddenSlot], language: Language = Language.en, state: bool = True) -> Toolkit:
    return Toolkit(
        shared=cast(Any, None),
        executor=cast(Any, None),
        user=ScriptedUser(hidden, language),
        tool_names=(*TOOL_NAMES, STATE_TOOL) if state else TOOL_NAMES,
        language=language,
    )


@pytest.mark.parametrize(
    ("proposal", "open_slots", "hidden", "asked_about", "reason"),
    [
        ({}, [], [TIME_COLUMN], "intent", "nothing recorded yet: the first required slot, not what the task hides"),
        (STATED, [], [TIME_COLUMN], "time_column", "a time range makes its column the first missing slot"),
        (
            {**STATED, "time_column": "cyrq"},
            ["department"],
            [DEPARTMENT],
            "department",
            "an open slot is missing once the required ones are filled",
        ),
        (
            {"intent": "count", "population": "all"},
            ["department"],
            [DEPARTMENT],
            "metric",
            "required slots come before open ones, in SLOTS order",
        ),
    ],
)
def test_the_question_asks_exactly_the_first_missing_slot(
    proposal: dict[str, str], open_slots: list[str], hidden: list[HiddenSlot], asked_about: str, reason: str
) -> None:
    tk = toolkit(hidden)
    tk.call(STATE_TOOL, {**proposal, "open_slots": open_slots})
    first = tk.state.missing_slots[0]
    out = tk.call("ask_clarify", {"question": "Which department and which date?"})  # the model's words are ignored
    assert out.ok and out.content["about"] == asked_about == first, reason
    assert out.content["asked"] == question_for(asked_about, Language.en)
    assert tk.state.questions[-1].about == [asked_about]
    assert asked_about not in tk.state.questions[-1].filled_when_asked


def test_a_clarification_answer_fills_the_slot_it_reveals_through_merge() -> None:
    tk = toolkit([TIME_COLUMN], Language.zh)
    tk.call(STATE_TOOL, STATED)
    out = tk.call("ask_clarify", {"question": "?"}).content
    slot = tk.state.slots["time_column"]
    assert out["answer"] == "按出院时间" and out["missing_slots"] == [] and out["next_action"] == "query"
    assert (slot.current, slot.confidence, slot.source_turn) == (TIME_COLUMN.value, CLINICIAN_CONFIDENCE, 1)
    # a model's later guess at the default confidence does not overrule the clinician; it stays in history
    tk.call(STATE_TOOL, {"time_column": "admission date ryrq"})
    assert tk.state.value("time_column") == TIME_COLUMN.value
    assert [h.value for h in tk.state.slots["time_column"].history] == [TIME_COLUMN.value, "admission date ryrq"]


@pytest.mark.parametrize(
    ("proposal", "open_slots", "reason"),
    [
        ({**STATED, "time_column": "cyrq"}, [], "every required slot filled, none open"),
        ({**STATED, "time_column": "cyrq", "department": "儿科"}, ["department"], "the open slot filled too"),
    ],
)
def test_no_question_once_no_slot_is_missing(proposal: dict[str, str], open_slots: list[str], reason: str) -> None:
    tk = toolkit([DEPARTMENT])
    tk.call(STATE_TOOL, {**proposal, "open_slots": open_slots})
    out = tk.call("ask_clarify", {"question": "Which department?"})  # about a filled slot: never asked
    assert not out.ok and "missing_slots is empty" in (out.error or ""), reason
    assert tk.user is not None and tk.user.asked == [] and tk.state.questions == []


def test_without_the_state_toolset_the_models_question_goes_through() -> None:
    tk = toolkit([DEPARTMENT], state=False)
    out = tk.call("ask_clarify", {"question": "Which department do you mean?"})
    assert out.ok and out.content == {"answer": "Cardiology"}


def test_unknown_open_slot_is_a_tool_error_not_a_crash() -> None:
    out = toolkit([]).call(STATE_TOOL, {"open_slots": ["colour"]})
    assert not out.ok and "unknown slot 'colour'" in (out.error or "")


def test_every_slot_question_reaches_the_clinician_of_every_task_hiding_that_slot() -> None:
    assert set(slot_questions()) == set(SLOTS)
    tasks = [t for t in release.load(TASKS_DIR).tasks if t.hidden_slots]
    assert tasks
    for task in tasks:
        for hidden in task.hidden_slots:
            for language in Language:
                user = ScriptedUser(task.hidden_slots, language)
                user.answer(question_for(hidden.slot, language))
                assert user.asked[0].revealed.get(hidden.slot) == hidden.value, (task.id, language.value)


def _trajectory(states: list[QueryState | None], clarified: list[list[str]] | None = None) -> Trajectory:
    steps = [Step(index=i, started_at="", ended_at="", state=s) for i, s in enumerate(states)]
    clarifications = [{"question": "q", "slots": s, "answer": "a"} for s in clarified or []]
    return Trajectory(
        instance_id="i",
        task_id="t",
        agent="gold",
        language="en",
        complexity="plain",
        question="q",
        steps=steps,
        clarifications=clarifications,
    )


def _task(hidden: list[HiddenSlot]) -> Task:
    return cast(Task, type("T", (), {"hidden_slots": hidden})())


READY = merge(QueryState(), {**STATED, "time_column": "cyrq"}, 0)
ASKED_FILLED = asked(READY, "Counted by discharge date?", about=["time_column"], turn=1)


@pytest.mark.parametrize(
    ("states", "clarified", "hidden", "expected", "reason"),
    [
        ([None, None], None, [TIME_COLUMN], (None, "", None, None), "no state kept: every measure is None"),
        (
            [QueryState(), merge(READY, {"time_column": TIME_COLUMN.value}, 1, 1.0)],
            None,
            [TIME_COLUMN],
            (1.0, "", 0, 2),
            "the hidden value held, complete after the second step",
        ),
        ([READY], None, [TIME_COLUMN], (0.0, "time_column", 0, 1), "complete, but with another time column"),
        ([QueryState()], None, [], (None, "", 0, None), "no hidden slot: no accuracy; never complete"),
        (
            [merge(QueryState(), {"department": "cardiology"}, 0)],
            None,
            [DEPARTMENT],
            (1.0, "", 0, None),
            "the clinician's words count as the value",
        ),
        ([ASKED_FILLED], None, [], (None, "", 1, 1), "a question about a slot the state already held"),
        (
            [asked(merge(QueryState(), STATED, 0), "When were they discharged?", about=["population"])],
            [["time_range"]],
            [],
            (None, "", 1, None),
            "what the clinician heard in the question counts too",
        ),
    ],
)
def test_state_scores(
    states: list[QueryState | None],
    clarified: list[list[str]] | None,
    hidden: list[HiddenSlot],
    expected: tuple[Any, ...],
    reason: str,
) -> None:
    s = score_state(_task(hidden), _trajectory(states, clarified))
    assert (s.slot_accuracy, s.wrong_slots, s.questions_about_filled_slots, s.turns_to_complete_state) == expected, (
        reason
    )


def test_step_states_survive_the_stored_json_and_version_1_records_still_load() -> None:
    traj = _trajectory([None, ASKED_FILLED])
    again = Trajectory.model_validate_json(traj.model_dump_json())
    assert again.format_version == 2 and again.final_state() == ASKED_FILLED and again.digest() == traj.digest()
    old = traj.model_dump(mode="json") | {"format_version": 1}
    for step in old["steps"]:
        del step["state"]
    assert Trajectory.model_validate(old).final_state() is None


@pytest.mark.parametrize(
    ("hidden", "dropped", "names", "reason"),
    [
        ([], None, [STATE_TOOL, "query_schema", "execute_sql"], "no question: the stated slots only"),
        (
            [DEPARTMENT],
            None,
            ["query_schema", STATE_TOOL, "ask_clarify", STATE_TOOL, "execute_sql"],
            "open the hidden slot, ask, record what was revealed",
        ),
        ([DEPARTMENT], DROPPED_SLOT, [STATE_TOOL, "query_schema", "execute_sql"], "the dropped slot is never asked"),
    ],
)
def test_reference_agents_state_plan(
    hidden: list[HiddenSlot], dropped: str | None, names: list[str], reason: str
) -> None:
    ask = [[("ask_clarify", {"question": "which department?"})]] if hidden else []
    plan = [[("query_schema", {"table_name": "t"})], *ask, [("execute_sql", {"sql": "select 1"})]]
    out = with_state(_task(hidden), plan, dropped)
    assert [n for step in out for n, _ in step] == names, reason
    calls = [args for step in out for n, args in step if n == STATE_TOOL]
    assert calls[0]["intent"] == GIVEN and "department" not in calls[0]
    if hidden and not dropped:
        assert calls[0]["open_slots"] == ["department"] and calls[1] == {"department": DEPARTMENT.value}


def test_dropped_slot_needs_the_state_toolset() -> None:
    with pytest.raises(ValueError, match="needs toolset emr-v1\\+state"):
        RunConfig(agent="perturb:dropped_slot")
    assert RunConfig(agent="perturb:dropped_slot", toolset="emr-v1+state").agent == "perturb:dropped_slot"
