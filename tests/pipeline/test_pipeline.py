"""The pipeline end to end on the real eval DB: the gold agent scores 100% with full process scores,
perturbation agents lose exactly where they should, killed shards resume exactly once, MLflow holds
the runs and traces, and the report is written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from html.parser import HTMLParser
from typing import Any

import pytest

from evalpkg.agent.trajectory import Trajectory
from evalpkg.grading.comparator import COMPARATOR_VERSION
from evalpkg.grading.execution import GoldCache
from evalpkg.grading.reference import SQL_PERTURBATIONS, reference_reads
from evalpkg.pipeline import store
from evalpkg.pipeline.execute import execute_shard
from evalpkg.pipeline.metrics import summarize
from evalpkg.pipeline.run import Scored, plan_run, report_run, score_run
from evalpkg.pipeline.score import InstanceScore
from evalpkg.pipeline.semantic import score_in_worlds
from evalpkg.pipeline.tracking import BREAKDOWN_TABLE
from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings
from evalpkg.sql.executor import run_on
from evalpkg.sql.gold import GOLD_TIMEOUT_MS, agent_connection, gold_runner
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release, worlds
from evalpkg.testset.traps import perturb_sql
from tests.pipeline.helpers import imperfections, run_agent
from tests.pipeline.report_helpers import chunks, instance_table


@pytest.fixture(scope="module")
def gold_run(synced: SyncReport, generated: Settings) -> tuple[str, Scored]:
    return run_agent(generated, "gold", shards=2)


def test_gold_agent_scores_100_percent_with_full_process_scores(
    gold_run: tuple[str, Scored], generated: Settings
) -> None:
    _, scored = gold_run
    tasks = release.load(generated.tasks_dir).tasks
    assert len(scored.scores) == 2 * 3 * len(tasks)  # zh + en, every complexity (the default)
    o = scored.table["overall"]
    assert imperfections(scored.scores, {t.id: t for t in tasks}) == []  # names instance, metric and point
    assert o["accuracy"] == 1.0 and o["exec_match"] == 1.0 and o["executable_sql_rate"] == 1.0
    assert o["expected_call_precision"] == 1.0 and o["expected_call_recall"] == 1.0
    assert o["clarification_accuracy"] == 1.0 and o["answer_point_coverage"] == 1.0
    # the seed's measures: no number the gold agent states is unsupported, no needless question
    assert o["numeric_citation_error_rate"] == 0.0 and o["unnecessary_question_rate"] == 0.0
    assert o["first_attempt_correct_time_series"] == 1.0 and o["expected_call_order_compliance"] == 1.0
    assert sum(s.numbers_stated for s in scored.scores) > 0 and o["clarification_rounds_mean"] > 0
    assert o["redundant_call_rate"] == 0.0
    assert scored.clusters == []
    assert all(scored.table[f"type.{t}"]["accuracy"] == 1.0 for t in {s.type for s in scored.scores})


@pytest.mark.parametrize("kind", SQL_PERTURBATIONS)
def test_perturbation_agents_fail_exactly_where_they_should(synced: SyncReport, generated: Settings, kind: str) -> None:
    tasks = release.load(generated.tasks_dir).by_id()
    expected_wrong = set()
    results: dict[str, tuple[Any, Any]] = {}  # task -> (perturbed, golds) as the reference read them
    with gold_runner(generated) as golds:
        cache = GoldCache(golds)
        for task in tasks.values():
            if not task.gold_sql:
                continue
            changed = perturb_sql(task.gold_sql[0], kind)
            if changed == task.gold_sql[0]:
                continue
            right, results[task.id] = reference_reads(cache, task, changed)
            if not right:
                expected_wrong.add(task.id)
    assert expected_wrong, f"{kind} changes no result: the perturbation is not testing anything"
    _, scored = run_agent(generated, f"perturb:{kind}", languages=["zh"], complexities=["plain"])
    wrong = {s.task_id for s in scored.scores if not s.correct}
    # where the scorer and the reference part, what each side read (a world's key decides the data)
    differ = {t: results.get(t) for t in wrong ^ expected_wrong}
    assert wrong == expected_wrong, (
        f"scorer wrong {sorted(wrong - expected_wrong)}, reference wrong {sorted(expected_wrong - wrong)}: {differ}"
    )
    unchanged = {t.id for t in tasks.values() if not t.gold_sql or perturb_sql(t.gold_sql[0], kind) == t.gold_sql[0]}
    assert all(s.expected_recall == 1.0 for s in scored.scores if s.task_id in unchanged)


def test_extra_calls_agent_keeps_accuracy_but_loses_process_scores(synced: SyncReport, generated: Settings) -> None:
    # its three extra query_schema calls come on top of one per table: a per-tool limit above the most
    # tables a task reads (+3) keeps the circuit breaker out of what this measures
    _, scored = run_agent(
        generated,
        "perturb:extra_calls",
        languages=["en"],
        complexities=["plain"],
        limit=40,
        max_calls_per_tool=10,
        max_calls_total=24,
    )
    o = scored.table["overall"]
    assert o["accuracy"] == 1.0
    assert o["redundant_call_rate"] > 0 and o["expected_call_precision"] < 1.0
    assert all(s.redundant_calls >= 2 for s in scored.scores)


def test_killed_shard_resumes_and_every_instance_is_scored_once(synced: SyncReport, generated: Settings) -> None:
    config = RunConfig(name="kill", agent="gold", concurrency=2, shards=1, reference_worlds=False)
    run_id = plan_run(generated, config)
    planned = len(store.load_run(generated, run_id)[3])
    env = {
        **os.environ,
        "EVALPKG_STATE_DIR": str(generated.state_dir),
        "EVALPKG_PG_PORT": str(generated.pg_port),
        "EVALPKG_TASKS_DIR": str(generated.tasks_dir),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalpkg", "run-shard", run_id, "--shard", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while len(store.recorded_ids(generated, run_id)) < 30 and time.monotonic() < deadline:
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = len(store.recorded_ids(generated, run_id))
    assert 30 <= partial < planned
    report = execute_shard(generated, run_id, 0)
    assert report.skipped == partial and report.recorded == planned - partial
    with store.results_db(generated) as conn:
        counts = Counter(
            r[0] for r in conn.execute("select instance_id from results.trajectory where run_id = %s", (run_id,))
        )
    assert len(counts) == planned and set(counts.values()) == {1}
    scored = score_run(generated, run_id)
    assert len(scored.scores) == planned and scored.validation.success


def test_rescoring_calls_no_model_and_is_stable(gold_run: tuple[str, Scored], generated: Settings) -> None:
    run_id, first = gold_run
    said: list[str] = []
    again = score_run(generated, run_id, said.append)
    assert [s.model_dump() for s in again.scores] == [s.model_dump() for s in first.scores]
    assert {s.comparator_version for s in again.scores} == {COMPARATOR_VERSION}
    assert not any("comparator" in line for line in said)  # same rules: nothing to say


def test_rescoring_scores_of_an_older_comparator_says_so(gold_run: tuple[str, Scored], generated: Settings) -> None:
    run_id, _ = gold_run
    with store.results_db(generated) as conn:  # as scores stored before comparator versions were
        conn.execute("update results.score set body = body - 'comparator_version' where run_id = %s", (run_id,))
    said: list[str] = []
    score_run(generated, run_id, said.append)
    assert f"{run_id} was scored before by comparator v1; its scores now follow v{COMPARATOR_VERSION}" in said
    assert store.comparator_versions(generated, run_id) == {COMPARATOR_VERSION}


class _Counter(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: Counter[str] = Counter()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1


def test_report_is_self_contained_with_plots_and_drill_down(gold_run: tuple[str, Scored], generated: Settings) -> None:
    run_id, scored = gold_run
    path = report_run(generated, run_id, scored)
    text = path.read_text(encoding="utf-8")
    parser = _Counter()
    parser.feed(text)
    assert parser.tags["img"] >= 3 and "data:image/png;base64," in text
    # a row per instance in the page; the drill-downs, with every step, in the chunk files beside it
    ids = sorted(s.instance_id for s in scored.scores)
    assert sorted(r["instance_id"] for r in instance_table(path).decoded()) == ids
    held = [t for c in chunks(path).values() for t in c.trajectories]
    assert sorted(t.instance_id for t in held) == ids and all(t.steps for t in held)
    assert {t.instance_id: t.final_sql for t in held} == {s.instance_id: s.final_sql for s in scored.scores}
    assert "http://" not in text.replace("http://host", "")  # nothing fetched from elsewhere


def test_mlflow_holds_parent_and_shard_runs_metrics_and_traces(
    gold_run: tuple[str, Scored], generated: Settings
) -> None:
    import mlflow

    from evalpkg.pipeline.run import track_run
    from evalpkg.services import mlflow_server

    run_id, scored = gold_run
    mlflow_server.start(generated)
    try:
        parent_id = track_run(generated, run_id, scored, max_traces=50)
        mlflow.set_tracking_uri(generated.tracking_uri)
        client = mlflow.MlflowClient()
        parent = client.get_run(parent_id)
        assert parent.data.metrics["accuracy"] == 1.0
        assert "type.negation.accuracy" in parent.data.metrics
        # the other groups are the run's table, not some 180 metrics among the ones people compare first
        assert not [k for k in parent.data.metrics if k.startswith(("cell.", "difficulty.", "language."))]
        assert len(parent.data.metrics) < 60, sorted(parent.data.metrics)
        cells = mlflow.load_table(BREAKDOWN_TABLE, run_ids=[parent_id]).set_index("group")
        assert list(cells.index) == list(scored.table)  # every group once: overall, type.*, cell.*, ...
        assert cells.loc["cell.anomaly.hard", "accuracy"] == scored.table["cell.anomaly.hard"]["accuracy"]
        assert parent.data.params["testset_version"] == release.latest(generated.tasks_dir)
        assert parent.data.params["agent"] == "gold"
        assert (
            parent.data.params["comparator_version"]
            == parent.data.tags["evalpkg.comparator_version"]
            == str(COMPARATOR_VERSION)
        )
        assert parent.data.metrics["numeric_citation_error_rate"] == 0.0
        assert parent.data.metrics["unnecessary_question_rate"] == 0.0
        children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'")
        assert sorted(c.data.params["shard"] for c in children) == ["0", "1"]
        assert all("instances" not in c.data.params and c.data.metrics["instances"] > 0 for c in children)
        traces = mlflow.search_traces(run_id=parent_id, locations=[parent.info.experiment_id], return_type="list")
        assert len(traces) == 50
        kinds = Counter(s.span_type for s in traces[0].data.spans)
        assert kinds["AGENT"] == 1 and kinds["TOOL"] >= 1 and kinds["CHAT_MODEL"] >= 1
    finally:
        mlflow_server.stop(generated)


def test_tracking_cut_short_is_completed_by_a_rerun_that_logs_nothing_twice(
    gold_run: tuple[str, Scored], generated: Settings
) -> None:
    import mlflow

    from evalpkg.pipeline.run import track_run
    from evalpkg.pipeline.tracking import PARENT_TAG, RUN_ID_TAG
    from evalpkg.services import mlflow_server

    run_id, scored = gold_run

    def killed() -> None:  # Ctrl-C while the report is still being written: traces are on their way
        raise KeyboardInterrupt

    mlflow_server.start(generated)
    try:
        with pytest.raises(KeyboardInterrupt):
            track_run(generated, run_id, scored, max_traces=40, report_ready=killed)
        parent_id = track_run(generated, run_id, scored, max_traces=40)
        mlflow.set_tracking_uri(generated.tracking_uri)
        client = mlflow.MlflowClient()
        experiment = client.get_run(parent_id).info.experiment_id
        tagged = client.search_runs([experiment], f"tags.`{RUN_ID_TAG}` = '{run_id}'")
        assert [r.info.run_id for r in tagged if PARENT_TAG not in r.data.tags] == [parent_id]
        assert sorted(r.data.tags["evalpkg.shard"] for r in tagged if PARENT_TAG in r.data.tags) == ["0", "1"]
        traces = mlflow.search_traces(run_id=parent_id, locations=[experiment], return_type="list")
        roots = [next(s for s in t.data.spans if s.parent_id is None) for t in traces]
        instances = [root.attributes["instance_id"] for root in roots]
        assert len(instances) == len(set(instances)) == 40
        groups = mlflow.load_table(BREAKDOWN_TABLE, run_ids=[parent_id])["group"]
        assert sorted(groups) == sorted(scored.table)  # logged twice, held once
    finally:
        mlflow_server.stop(generated)


def test_traces_leave_as_answers_are_graded_and_a_stage_failing_after_is_completed_by_a_rerun(
    synced: SyncReport, generated: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """finish_run sends the traces while the stages after grading run (the first request is stored before
    clustering begins); a stage failing after that leaves no sender behind and its parent FAILED, and
    finishing again completes the parent with every trace once."""
    import threading

    import mlflow

    from evalpkg.pipeline import run
    from evalpkg.pipeline.mlflow_view import view_url
    from evalpkg.pipeline.tracking import RUN_ID_TAG, count_traces
    from evalpkg.services import mlflow_server

    run_id, scored = run_agent(generated, "gold", limit=40)  # 240 traces: three requests
    instances = len(scored.scores)
    mlflow.set_tracking_uri(generated.tracking_uri)
    client = mlflow.MlflowClient()
    cluster = run.cluster_failures
    held_at_clustering: list[int] = []

    def parent() -> Any:
        experiment = client.get_experiment_by_name("emr-agent-benchmark")
        return client.search_runs([experiment.experiment_id], f"tags.`{RUN_ID_TAG}` = '{run_id}'")[-1]

    def fails_after_counting(*args: Any, **kwargs: Any) -> Any:
        p = parent()
        held_at_clustering.append(count_traces(client, p.info.experiment_id, p.info.run_id))
        raise KeyboardInterrupt

    mlflow_server.start(generated)
    try:
        monkeypatch.setattr(run, "cluster_failures", fails_after_counting)
        with pytest.raises(KeyboardInterrupt):
            run.finish_run(generated, run_id, track=True)
        assert held_at_clustering and held_at_clustering[0] >= 100, held_at_clustering
        assert not [t.name for t in threading.enumerate() if t.name.startswith("otlp")]  # nothing left sending
        assert parent().info.status == "FAILED"
        monkeypatch.setattr(run, "cluster_failures", cluster)
        finished = run.finish_run(generated, run_id, track=True)
        assert finished.mlflow_run_id == parent().info.run_id and parent().info.status == "FINISHED"
        experiment = parent().info.experiment_id
        assert (
            finished.mlflow_run_url
            == f"{generated.tracking_uri}/#/experiments/{experiment}/runs/{parent().info.run_id}"
        )
        assert finished.mlflow_compare_url == view_url(generated.tracking_uri, experiment)
        assert finished.traces_s is not None and finished.traces_s > 0
        traces = mlflow.search_traces(
            run_id=finished.mlflow_run_id, locations=[parent().info.experiment_id], return_type="list"
        )
        roots = [next(s for s in t.data.spans if s.parent_id is None) for t in traces]
        assert sorted(r.attributes["instance_id"] for r in roots) == sorted(s.instance_id for s in scored.scores)
        assert len(traces) == instances
    finally:
        mlflow_server.stop(generated)


def test_mlflow_down_still_leaves_the_scores_and_the_report(
    gold_run: tuple[str, Scored], generated: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tracking starts as the answers are graded, but an unreachable MLflow fails only the tracking step:
    the scores are saved and the report written first, then the run says what failed."""
    from evalpkg.errors import ServiceError
    from evalpkg.net import free_port
    from evalpkg.pipeline import run

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # refused at once, not after MLflow's back-off
    down = generated.model_copy(update={"mlflow_uri": f"http://127.0.0.1:{free_port()}"})
    run_id, _ = gold_run
    report = store.run_dir(generated, run_id) / "report.html"
    report.unlink(missing_ok=True)  # (score_run writes none)
    with store.results_db(generated) as conn:
        conn.execute("delete from results.score where run_id = %s", (run_id,))
    with pytest.raises(ServiceError, match="unreachable"):
        run.finish_run(down, run_id, track=True)
    assert report.exists()
    with store.results_db(generated) as conn:
        saved = conn.execute("select count(*) from results.score where run_id = %s", (run_id,)).fetchone()
    assert saved is not None and saved[0] == len(gold_run[1].scores)


SMALL_WORLD = worlds.World(800, 9, 6)  # another seed, size and key than the run's snapshot


def test_gold_answers_hold_in_a_reference_world_and_hard_coded_numbers_do_not(
    gold_run: tuple[str, Scored], generated: Settings
) -> None:
    """Scored in every reference world: the gold agent is semantically correct everywhere; an answer that
    hard-codes the snapshot's numbers matches there only, and is caught as a coincidental match."""
    _, scored = gold_run
    tasks = release.load(generated.tasks_dir).by_id()
    scores = [s.model_copy(deep=True) for s in scored.scores]
    assert score_in_worlds(generated, scores, [], tasks, timeout_ms=GOLD_TIMEOUT_MS, reference=()) == 0
    assert all(s.semantic_correct is None for s in scores)  # no world built: not measured
    trajectories = {t.instance_id: t for t in scored.trajectories}
    # without `build` scoring reads the worlds built and builds none; a run (build) builds what is missing
    said: list[str] = []
    read = score_in_worlds(
        generated, scores, scored.trajectories, tasks, timeout_ms=GOLD_TIMEOUT_MS, reference=(SMALL_WORLD,)
    )
    assert read == 0 and not worlds.built(generated, (SMALL_WORLD,))
    read = score_in_worlds(
        generated,
        scores,
        scored.trajectories,
        tasks,
        timeout_ms=GOLD_TIMEOUT_MS,
        reference=(SMALL_WORLD,),
        build=True,
        progress=said.append,
    )
    assert read == 1 and worlds.built(generated, (SMALL_WORLD,)) == [SMALL_WORLD]
    assert "building the 1 missing" in said[0] and f"building the reference world {SMALL_WORLD.label()}" in said[1]
    assert all(s.semantic_correct for s in scores) and summarize(scores)["semantic_accuracy"] == 1.0

    hard_coded: list[Trajectory] = []
    forged: list[InstanceScore] = []
    with agent_connection(generated) as conn:
        for s in scores:
            task = tasks[s.task_id]
            if s.complexity != "plain" or s.language != "en" or not task.gold_sql or len(forged) == 12:
                continue
            result = run_on(conn, task.gold_sql[0], timeout_ms=GOLD_TIMEOUT_MS, row_cap=None)
            if len(result.rows) != 1 or not all(isinstance(v, int) and v > 20 for v in result.rows[0]):
                continue
            literal = ", ".join(f"{v} as {c}" for v, c in zip(result.rows[0], result.columns, strict=True))
            traj = trajectories[s.instance_id].model_copy(update={"final_sql": f"select {literal}"})
            hard_coded.append(traj)
            forged.append(s.model_copy(update={"world_misses": [], "semantic_correct": None}))
    assert len(forged) == 12
    said.clear()
    score_in_worlds(
        generated,
        forged,
        hard_coded,
        tasks,
        timeout_ms=GOLD_TIMEOUT_MS,
        reference=(SMALL_WORLD,),
        build=True,
        progress=said.append,
    )
    assert not [line for line in said if "building" in line]  # built once
    caught = [s for s in forged if s.correct and s.world_misses == [SMALL_WORLD.label()]]
    assert len(caught) >= 10, [(s.instance_id, s.world_misses) for s in forged]  # counts > 20 differ by world
    assert all(s.semantic_correct is False for s in caught)
    metrics = summarize(forged)
    assert metrics["semantic_accuracy"] < metrics["accuracy"] and metrics["coincidental_matches"] == len(caught)
    # with its CI, resampling tasks as accuracy's does: among right answers, the forged ones widen it
    mixed = summarize([*scores, *forged])
    low, high = mixed["semantic_accuracy_ci_low"], mixed["semantic_accuracy_ci_high"]
    assert low < mixed["semantic_accuracy"] < high < 1.0
