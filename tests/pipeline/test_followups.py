"""Follow-up dialogues through the real pipeline, on the tasks of templates/v7_followups.json filled on
the test snapshot (a release of their own, so the test does not wait for v7): the gold agent is right
on every turn of every variant, per turn and per dialogue; perturb:stale_followup (each follow-up
answered with the previous turn's SQL) fails exactly the follow-ups whose gold result differs from the
previous turn's, never turn 0; a task with hidden slots gets its clarification and its follow-up;
the three-turn dialogue hides the earlier tool output from the model before each follow-up."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalpkg.agent.loop import TRIMMED
from evalpkg.agent.session import build_policy
from evalpkg.agent.trajectory import Trajectory
from evalpkg.grading.execution import GoldCache, execution_match
from evalpkg.pipeline.run import Scored
from evalpkg.settings import Settings
from evalpkg.sql.gold import agent_connection, gold_runner, snapshot_version
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release
from evalpkg.testset.build import fill, load_templates
from evalpkg.testset.models import Complexity, Language, Task, TaskType
from evalpkg.testset.params import domains
from evalpkg.testset.validate import structural_problems
from tests.pipeline.helpers import imperfections, run_agent

TEMPLATES = "templates/v7_followups.json"
# policy id -> the messages it was given at each call (the gold agent's, wrapped below)
SEEN: dict[str, list[list[dict[str, Any]]]] = {}


@pytest.fixture(scope="module")
def followup_settings(synced: SyncReport, generated: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The follow-up templates filled on the test snapshot, released alone in a tasks dir of their own."""
    tasks: list[Task] = []
    with agent_connection(generated) as conn:
        with conn.transaction():
            domain = domains(conn)
        snap = snapshot_version(conn)
    with gold_runner(generated) as golds:
        for t in load_templates(TEMPLATES).templates:
            made, skipped = fill(golds, t, domain, seed=1, seen=set())
            assert len(made) == t.count, f"{t.id}: {skipped[:1]}"
            tasks += made
    tasks_dir = tmp_path_factory.mktemp("followup-tasks")
    release.write(tasks_dir, "v1", tasks, snap, release.ChangeSet(added=dict.fromkeys((t.id for t in tasks), "test")))
    return generated.model_copy(update={"tasks_dir": Path(tasks_dir)})


@pytest.fixture(scope="module")
def tasks(followup_settings: Settings) -> dict[str, Task]:
    return release.load(followup_settings.tasks_dir).by_id()


@pytest.fixture(scope="module")
def gold(followup_settings: Settings) -> Iterator[tuple[str, Scored]]:
    """Every variant of every task, with the messages each dialogue's policy saw recorded."""
    real = build_policy

    def recording(*args: Any, **kw: Any) -> Any:
        policy = real(*args, **kw)
        inner = policy.next
        seen = SEEN.setdefault(f"{args[1].id}:{args[2].value}:{id(policy)}", [])

        def next_(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
            seen.append([dict(m) for m in messages])
            return inner(messages, tools)

        setattr(policy, "next", next_)  # noqa: B010 (a method of this one instance)
        return policy

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("evalpkg.pipeline.execute.build_policy", recording)
        yield run_agent(followup_settings, "gold")


def test_templates_cover_every_type_with_enough_tasks(tasks: dict[str, Task]) -> None:
    assert {t.type for t in tasks.values()} == set(TaskType)  # every type has follow-ups
    assert len(tasks) >= 40
    assert all(len(t.graded_turns()) > 1 and t.format_version == 3 for t in tasks.values())
    assert any(len(t.graded_turns()) == 3 for t in tasks.values())  # a long one: two follow-ups
    assert any(t.hidden_slots for t in tasks.values())  # hidden slots and a follow-up together


def test_gold_is_right_on_every_turn_of_every_variant(gold: tuple[str, Scored], tasks: dict[str, Task]) -> None:
    _, scored = gold
    assert len(scored.scores) == 6 * len(tasks)  # 2 languages x 3 wordings
    assert imperfections(scored.scores, tasks) == []
    for s in scored.scores:
        assert s.turn_correct == [True] * len(tasks[s.task_id].graded_turns()), s.instance_id
        assert all(c in (None, 1.0) for c in s.turn_coverage), (s.instance_id, s.turn_coverage)
    overall = scored.table["overall"]
    longest = max(len(t.graded_turns()) for t in tasks.values())
    assert overall["dialogues"] == len(scored.scores)
    assert overall["dialogue_accuracy"] == overall["turn_accuracy"] == 1.0
    assert [overall[f"turn_{i}_accuracy"] for i in range(longest)] == [1.0] * longest
    assert scored.table["type.clarification"]["dialogue_accuracy"] == 1.0  # per group too


def test_hidden_slots_get_the_clarification_and_the_follow_up(gold: tuple[str, Scored], tasks: dict[str, Task]) -> None:
    _, scored = gold
    clarifying = [t for t in scored.trajectories if tasks[t.task_id].hidden_slots]
    assert clarifying
    for traj in clarifying:
        task = tasks[traj.task_id]
        delivered = [s.user_message for s in traj.steps if s.user_message]
        assert traj.clarifications and delivered == list(task.followups(Language(traj.language)))
        assert len(traj.turn_answers) == len(delivered) == len(task.graded_turns()) - 1


def _tool_contents(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages if m.get("role") == "tool"]


def test_the_long_dialogue_trims_earlier_tool_output(gold: tuple[str, Scored], tasks: dict[str, Task]) -> None:
    long_ids = {t.id for t in tasks.values() if len(t.followups(Language.zh)) >= 2}
    checked = 0
    for key, calls in SEEN.items():
        if key.split(":")[0] not in long_ids:
            continue
        last = calls[-1]  # the final answer to the last follow-up
        users = [i for i, m in enumerate(last) if m["role"] == "user"]
        assert len(users) == 3, key  # the question and two follow-ups
        before, after = last[: users[-1]], last[users[-1] :]
        assert _tool_contents(before) and set(_tool_contents(before)) == {TRIMMED}, key
        assert _tool_contents(after) and TRIMMED not in _tool_contents(after), key  # this turn's result stays
        # the model saw each earlier result in full while answering its own turn
        assert any(TRIMMED not in _tool_contents(c) and len(_tool_contents(c)) > 1 for c in calls), key
        checked += 1
    assert checked >= 6 * len(long_ids) > 0


def _stale_right(task: Task, language: str, complexity: str, gold: GoldCache) -> list[bool]:
    """Whether each follow-up of a task is right when answered with the previous turn's gold SQL (a
    previous result can coincide with the next one's on this snapshot)."""
    graded = task.graded_turns()
    golds = [task.turn_task(i).gold_sql[0] for i in graded]
    return [
        execution_match(
            task.turn_task(i),
            golds[k],
            gold,
            task.turn_task(i).graded_columns(Language(language), Complexity(complexity)),
        )[1]
        for k, i in enumerate(graded[1:])
    ]


def test_stale_followup_fails_those_turns_only(followup_settings: Settings, tasks: dict[str, Task]) -> None:
    _, scored = run_agent(followup_settings, "perturb:stale_followup", languages=["zh"], complexities=["plain"])
    with gold_runner(followup_settings) as golds:
        gold = GoldCache(golds)
        for s in scored.scores:
            expected = [True, *_stale_right(tasks[s.task_id], s.language, s.complexity, gold)]
            assert s.turn_correct == expected, s.instance_id
            assert s.correct  # turn 0 is untouched
    overall = scored.table["overall"]
    assert overall["turn_0_accuracy"] == overall["accuracy"] == 1.0
    assert overall["dialogue_accuracy"] == sum(all(s.turn_correct) for s in scored.scores) / len(scored.scores) < 1.0
    assert overall["turn_1_accuracy"] < 1.0


def test_trajectory_records_each_turns_answer(gold: tuple[str, Scored]) -> None:
    _, scored = gold
    traj = next(t for t in scored.trajectories if len(t.turn_answers) == 2)
    again = Trajectory.model_validate(json.loads(traj.model_dump_json()))
    assert again.turn_answers == traj.turn_answers and all(a.sql for a in again.turn_answers)
    assert again.final_sql not in {a.sql for a in again.turn_answers}  # each turn ran its own query


def _v6_task() -> dict[str, Any]:
    """A released task (format 2) to build malformed ones from."""
    rel = release.load(Path(__file__).resolve().parents[2] / "tasks", "v6")
    return next(t for t in rel.tasks if t.type is TaskType.single_table).model_dump(mode="json")


FOLLOWUP = {
    "user": {"zh": "前一年呢？", "en": "And the year before?"},
    "expected_tool_calls": [],
    "gold_sql": ["select 1"],
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"turns": "followup"}, "needs format_version 3", id="a turn gold in a format 2 task"),
        pytest.param(
            {"format_version": 3, "turn0_gold": True}, "turn 0 is graded on the task's gold", id="turn 0 with a gold"
        ),
        pytest.param(
            {"format_version": 3, "turns": "points only"}, "no gold_sql", id="follow-up points without a gold"
        ),
    ],
)
def test_the_schema_refuses_misplaced_turn_golds(change: dict[str, Any], message: str) -> None:
    data = _v6_task()
    if "format_version" in change:
        data["format_version"] = change["format_version"]
    if change.get("turn0_gold"):
        data["turns"][0]["gold_sql"] = ["select 1"]
    if change.get("turns") == "followup":
        data["turns"].append(FOLLOWUP)
    if change.get("turns") == "points only":
        data["turns"].append({**FOLLOWUP, "gold_sql": [], "answer_points": [{"kind": "number", "row": 0, "col": 0}]})
    with pytest.raises(ValueError, match=message):
        Task.model_validate(data)


def test_a_format_3_task_with_a_follow_up_loads_and_delivers_it() -> None:
    data = _v6_task() | {"format_version": 3}
    data["turns"].append(FOLLOWUP)
    task = Task.model_validate(data)
    assert task.followups(Language.en) == ("And the year before?",) and task.graded_turns() == [0, 1]
    assert task.turn_task(1).gold_sql == ["select 1"] and task.turn_task(0) is task


def _released(task_id: str) -> Task:
    return release.load(Path(__file__).resolve().parents[2] / "tasks", "v7").by_id()[task_id]


@pytest.mark.parametrize(
    ("followups", "duplicate", "why"),
    [
        ("own", False, "opens with another task's question, then follow-ups of its own: another task"),
        ("none", True, "the same question and no follow-up: the same task twice"),
    ],
)
def test_a_dialogue_repeats_a_task_only_if_its_follow_ups_do_too(followups: str, duplicate: bool, why: str) -> None:
    single = _released("clar-clar_poor_glycemic_control-004")
    dialogue = _released("clar-fu_poor_glycemic_control_women-001")
    assert dialogue.gold_sql == single.gold_sql and dialogue.graded_turns() != [0]  # the release's own pair
    if followups == "none":
        dialogue = dialogue.model_copy(update={"turns": single.turns, "id": "clar-copy-001"})
    found = [p for p in structural_problems([single, dialogue], min_tasks=0) if "same fingerprint" in p]
    assert bool(found) is duplicate, (why, found)
