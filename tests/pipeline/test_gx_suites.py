"""The run_outputs and testset Great Expectations suites fail when what they check is broken: each case
breaks one thing, and the suite names the expectation it breaks (and no other); the stages that run the
suites (score_run, testset validate) stop with a DataError naming the suite and that expectation."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from evalpkg.agent.function_schema import tools_of
from evalpkg.agent.plan_tools import PlanToolkit
from evalpkg.agent.tools import Toolkit
from evalpkg.agent.trajectory import Step, ToolCallRecord, Trajectory, sha256_text
from evalpkg.errors import DataError
from evalpkg.expectations import ValidationReport, load_suite, validate_frames
from evalpkg.pipeline import store
from evalpkg.pipeline.execute import execute_shard
from evalpkg.pipeline.run import _frames, plan_run, score_run
from evalpkg.pipeline.score import InstanceScore
from evalpkg.runconfig import RunConfig
from evalpkg.settings import PROJECT_ROOT, Settings
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release
from evalpkg.testset import validate as testset_validate
from evalpkg.testset.models import Difficulty, Language, Task, TaskType, Turn

SUITES = PROJECT_ROOT / "expectations"
Broken = tuple[str, str, str | None]  # (batch, expectation, column) as a suite reports a failure


def broken(report: ValidationReport) -> list[Broken]:
    return [(f.batch, f.expectation, f.column) for f in report.failures]


# ---- run_outputs: a run's scores and trajectories -------------------------------------------------------

IDS = ("t-a:0", "t-b:0", "t-c:0")
RESULT = '{"rows": [[412]]}'


def score(iid: str, **kw: Any) -> InstanceScore:
    base: dict[str, Any] = dict(
        instance_id=iid, task_id=iid.split(":")[0], type="time_series", difficulty="easy", language="en",
        complexity="plain", repeat=0, answerable=True, status="success", exec_match=True, correct=True,
        executable_sql=True, tool_calls=1, redundant_calls=0, expected_precision=1.0, expected_recall=1.0,
        order_ok=True, clarification_correct=True, answer_coverage=1.0, stop_reason="final_answer",
        latency_s=0.1, prompt_tokens=0, completion_tokens=0, tool_names=["execute_sql"], error_text="",
        final_sql="select 1",
    )  # fmt: skip
    return InstanceScore(**{**base, **kw})


def trajectory(
    iid: str,
    *,
    name: str = "execute_sql",
    ok: bool = True,
    result: str = RESULT,
    recorded_sha: str | None = None,
    step_ended_at: str = "2025-01-01T00:00:02",
    answer: str = "412 patients",
) -> Trajectory:
    call = ToolCallRecord(
        call_id="c", name=name, arguments={"sql": "select 412"}, ok=ok, result=result,
        result_sha256=recorded_sha or sha256_text(result), started_at="2025-01-01T00:00:01", elapsed_ms=1.0,
    )  # fmt: skip
    step = Step(index=0, started_at="2025-01-01T00:00:01", ended_at=step_ended_at, tool_calls=[call])
    return Trajectory(
        instance_id=iid, task_id=iid.split(":")[0], agent="gold", language="en", complexity="plain",
        question="How many?", steps=[step], final_answer=answer, final_sql="select 412",
        started_at="2025-01-01T00:00:00", ended_at="2025-01-01T00:00:03",
    )  # fmt: skip


SCORES = ("scores", "expect_column_values_to_be_between")


@pytest.mark.parametrize(
    ("score_change", "trajectory_change", "planned_extra", "expected"),
    [
        pytest.param({}, {}, 0, [], id="nothing-broken-passes"),
        pytest.param(
            {}, {}, 1, [("scores", "expect_table_row_count_to_equal", None)], id="a-planned-instance-never-scored"
        ),
        pytest.param(
            {"instance_id": IDS[0]},
            {},
            0,
            [("scores", "expect_column_values_to_be_unique", "instance_id")],
            id="an-instance-scored-twice",
        ),
        pytest.param({"expected_precision": 1.5}, {}, 0, [(*SCORES, "expected_precision")], id="precision-above-1"),
        pytest.param({"expected_recall": -0.1}, {}, 0, [(*SCORES, "expected_recall")], id="recall-below-0"),
        pytest.param({"tool_calls": -1}, {}, 0, [(*SCORES, "tool_calls")], id="negative-call-count"),
        pytest.param({"latency_s": -0.5}, {}, 0, [(*SCORES, "latency_s")], id="clock-ran-backwards"),
        pytest.param(
            {"status": "crashed"},
            {},
            0,
            [("scores", "expect_column_values_to_be_in_set", "status")],
            id="status-the-scorer-never-gives",
        ),
        pytest.param(
            {"stop_reason": "gave_up"},
            {},
            0,
            [("scores", "expect_column_values_to_be_in_set", "stop_reason")],
            id="stop-reason-the-loop-never-gives",
        ),
        pytest.param(
            {},
            {"name": "drop_table"},
            0,
            [("tool_calls", "expect_column_values_to_be_in_set", "name")],
            id="a-tool-no-toolset-has-ran",
        ),
        pytest.param({}, {"name": "drop_table", "ok": False}, 0, [], id="a-made-up-tool-the-toolkit-refused-is-fine"),
        pytest.param(
            {},
            {"recorded_sha": sha256_text('{"rows": [[413]]}')},
            0,
            [("tool_calls", "expect_column_values_to_be_in_set", "hash_ok")],
            id="result-altered-after-recording",
        ),
        pytest.param(
            {},
            {"step_ended_at": "2025-01-01T00:00:09"},
            0,
            [("steps", "expect_column_values_to_be_in_set", "ordered")],
            id="a-step-ends-after-its-dialogue",
        ),
        pytest.param(
            {},
            {"answer": "patient 110105199001011234"},
            0,
            [("texts", "expect_column_values_to_not_match_regex_list", "value")],
            id="an-id-card-number-in-an-answer",
        ),
        pytest.param(
            {},
            {"result": '{"rows": [["13812345678"]]}'},
            0,
            [("texts", "expect_column_values_to_not_match_regex_list", "value")],
            id="a-phone-number-in-a-result",
        ),
    ],
)
def test_gx_run_outputs_fails_on_what_it_checks(
    score_change: dict[str, Any], trajectory_change: dict[str, Any], planned_extra: int, expected: list[Broken]
) -> None:
    scores = [score(iid, **(score_change if i == 1 else {})) for i, iid in enumerate(IDS)]
    trajectories = [trajectory(iid, **(trajectory_change if i == 1 else {})) for i, iid in enumerate(IDS)]
    report = validate_frames(
        load_suite(SUITES / "run_outputs.json"),
        _frames(scores, trajectories),
        {"planned_instances": len(IDS) + planned_extra},
    )
    assert broken(report) == expected


def test_gx_run_outputs_allows_every_toolsets_tools() -> None:
    """A run of any toolset passes: the suite's tool names are every tool some toolset has (a tool added
    without the suite would fail every run using it), and '(invalid)' for a name the toolkit refused."""
    suite = load_suite(SUITES / "run_outputs.json")
    (names,) = [
        e.arguments["value_set"]
        for b in suite.batches
        if b.name == "tool_calls"
        for e in b.expectations
        if e.arguments.get("column") == "name"
    ]
    toolsets = {*tools_of(Toolkit, "emr"), *tools_of(Toolkit, "state"), *tools_of(PlanToolkit, "plan")}
    assert set(names) == {*toolsets, "(invalid)"}


# ---- testset: a release as tables -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return release.load(PROJECT_ROOT / "tasks").tasks


def _replace(tasks: list[Task], pick: Callable[[Task], bool], **update: Any) -> list[Task]:
    """The first task `pick` chooses, changed; Task's own validators never see the change (GX must)."""
    i = next(i for i, t in enumerate(tasks) if pick(t))
    return [*tasks[:i], tasks[i].model_copy(update=update), *tasks[i + 1 :]]


def _duplicate_id(tasks: list[Task]) -> list[Task]:
    return _replace(tasks, lambda t: t is tasks[1], id=tasks[0].id)


def _drop_an_english_variant(tasks: list[Task]) -> list[Task]:
    t = tasks[0]
    en = [v for v in t.variants if v.language is Language.en]
    return _replace(tasks, lambda x: x is t, variants=[v for v in t.variants if v is not en[0]])


def _no_expected_calls(tasks: list[Task]) -> list[Task]:
    return _replace(
        tasks, lambda t: t is tasks[0], turns=[Turn(user=turn.user, expected_tool_calls=[]) for turn in tasks[0].turns]
    )


def _no_generator_version(tasks: list[Task]) -> list[Task]:
    return _replace(
        tasks, lambda t: t is tasks[0], provenance=tasks[0].provenance.model_copy(update={"generator_version": None})
    )


def _too_few(tasks: list[Task]) -> list[Task]:
    """Down to 319, taken from the largest cells first so that no cell empties."""
    cells = Counter((t.type, t.difficulty) for t in tasks)
    drop: set[str] = set()
    for cell, _ in cells.most_common():
        spare = sorted(t.id for t in tasks if (t.type, t.difficulty) == cell)[1:]  # one stays
        drop |= set(spare[: len(tasks) - 319 - len(drop)])
    assert len(tasks) - len(drop) == 319
    return [t for t in tasks if t.id not in drop]


def _empty_cell(tasks: list[Task]) -> list[Task]:
    """Every anomaly x hard task relabelled medium: as many tasks, one cell without any."""
    return [
        t.model_copy(update={"difficulty": Difficulty.medium})
        if (t.type, t.difficulty) == (TaskType.anomaly, Difficulty.hard)
        else t
        for t in tasks
    ]


TASKS_BETWEEN = ("tasks", "expect_column_values_to_be_between")
TASKS_IN_SET = ("tasks", "expect_column_values_to_be_in_set")


@pytest.mark.parametrize(
    ("break_tasks", "expected"),
    [
        pytest.param(lambda ts: ts, [], id="the-release-as-committed-passes"),
        pytest.param(_duplicate_id, [("tasks", "expect_column_values_to_be_unique", "id")], id="duplicated-task-id"),
        pytest.param(_drop_an_english_variant, [(*TASKS_BETWEEN, "variants_en")], id="an-english-variant-missing"),
        pytest.param(_no_expected_calls, [(*TASKS_BETWEEN, "expected_tool_calls")], id="no-call-expected-of-a-task"),
        pytest.param(
            lambda ts: _replace(ts, lambda t: t is ts[0], turns=[]),
            [(*TASKS_BETWEEN, "turns"), (*TASKS_BETWEEN, "expected_tool_calls")],
            id="no-turns-means-no-calls-either",
        ),
        pytest.param(
            lambda ts: _replace(ts, lambda t: t is ts[0], tables=[]), [(*TASKS_BETWEEN, "tables")], id="no-tables"
        ),
        pytest.param(
            _no_generator_version,
            [("tasks", "expect_column_values_to_not_be_null", "generator_version")],
            id="generator-version-missing",
        ),
        pytest.param(
            lambda ts: _replace(ts, lambda t: t.answerable, gold_sql=[]),
            [(*TASKS_IN_SET, "gold_matches_answerable")],
            id="answerable-without-gold-sql",
        ),
        pytest.param(
            lambda ts: _replace(ts, lambda t: t.type is TaskType.clarification, hidden_slots=[]),
            [(*TASKS_IN_SET, "slots_match_type")],
            id="clarification-without-hidden-slots",
        ),
        pytest.param(_too_few, [("tasks", "expect_table_row_count_to_be_between", None)], id="fewer-than-320-tasks"),
        pytest.param(_empty_cell, [("cells", "expect_column_values_to_be_between", "tasks")], id="a-cell-left-empty"),
    ],
)
def test_gx_testset_fails_on_what_it_checks(
    tasks: list[Task], break_tasks: Callable[[list[Task]], list[Task]], expected: list[Broken]
) -> None:
    settings = Settings(tasks_dir=PROJECT_ROOT / "tasks", expectations_dir=SUITES)
    assert broken(testset_validate.validate_tabular(settings, break_tasks(tasks))) == expected


# ---- the stages that run the suites ----------------------------------------------------------------------


def _tamper(settings: Settings, run_id: str, change: Callable[[Trajectory], Trajectory | None]) -> None:
    """One stored trajectory changed (None: deleted), as a bug or a hand in the results DB would."""
    with store.results_db(settings) as conn:
        row = conn.execute(
            "select instance_id, body from results.trajectory where run_id = %s order by instance_id limit 1",
            (run_id,),
        ).fetchone()
        assert row is not None, f"{run_id} recorded nothing"
        iid, body = row
        changed = change(Trajectory.model_validate(body))
        if changed is None:
            conn.execute("delete from results.trajectory where run_id = %s and instance_id = %s", (run_id, iid))
        else:
            conn.execute(
                "update results.trajectory set body = %s where run_id = %s and instance_id = %s",
                (Jsonb(changed.model_dump(mode="json")), run_id, iid),
            )


def _rename_a_call(traj: Trajectory) -> Trajectory:
    call = next(c for c in traj.tool_calls() if c.ok)
    call.name = "drop_table"
    return traj


def _alter_a_result(traj: Trajectory) -> Trajectory:
    call = next(c for c in traj.tool_calls() if c.ok)
    call.result = json.dumps({"rows": [[413]]})
    return traj


@pytest.mark.parametrize(
    ("change", "named"),
    [
        pytest.param(lambda t: None, "scores: expect_table_row_count_to_equal", id="a-recorded-dialogue-lost"),
        pytest.param(_rename_a_call, "tool_calls: expect_column_values_to_be_in_set(name)", id="a-call-renamed"),
        pytest.param(_alter_a_result, "tool_calls: expect_column_values_to_be_in_set(hash_ok)", id="a-result-altered"),
    ],
)
def test_gx_score_run_stops_on_a_failed_run_outputs_suite(
    synced: SyncReport, generated: Settings, change: Callable[[Trajectory], Trajectory | None], named: str
) -> None:
    config = RunConfig(name="gx", agent="gold", languages=["en"], complexities=["plain"], limit=3, concurrency=1)
    run_id = plan_run(generated, config)
    execute_shard(generated, run_id, 0)
    assert score_run(generated, run_id, save=False).validation.success  # as recorded, the run passes
    _tamper(generated, run_id, change)
    with pytest.raises(DataError, match="GX suite run_outputs: ") as caught:
        score_run(generated, run_id)
    assert f"first failure: {named}" in str(caught.value)


def test_gx_testset_validate_stops_on_a_failed_testset_suite(
    synced: SyncReport, generated: Settings, tasks: list[Task], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`evalpkg testset validate`'s path: a release whose one task lost an English variant (which only
    the GX suite checks once a task is loaded) fails with the suite's expectation named."""
    committed = release.load(generated.tasks_dir)
    monkeypatch.setattr(
        release, "load", lambda *_a, **_k: dataclasses.replace(committed, tasks=_drop_an_english_variant(tasks))
    )
    report = testset_validate.validate(generated)
    with pytest.raises(DataError, match=r"GX suite testset: \d+/\d+ expectations passed") as caught:
        testset_validate.raise_on_problems(report)
    assert "GX tasks: expect_column_values_to_be_between(variants_en)" in str(caught.value)
