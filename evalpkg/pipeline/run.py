"""The whole pipeline for the CLI and the DAGs: plan, execute shards, score, cluster, validate,
track, report. Each stage is callable on its own; re-scoring never calls a model."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from evalpkg.agent.tools import TOOL_NAMES
from evalpkg.agent.trajectory import Trajectory, sha256_text
from evalpkg.errors import DataError, ServiceError
from evalpkg.expectations import ValidationReport, load_suite, validate_frames
from evalpkg.grading.comparator import COMPARATOR_VERSION
from evalpkg.grading.execution import GoldCache
from evalpkg.pipeline import store
from evalpkg.pipeline.cluster import Cluster, cluster_failures
from evalpkg.pipeline.execute import ShardReport, execute_shard
from evalpkg.pipeline.judge import Judge
from evalpkg.pipeline.metrics import breakdown
from evalpkg.pipeline.plan import Instance, normalize, sampled_cells
from evalpkg.pipeline.report import write_report
from evalpkg.pipeline.score import InstanceScore, score_instance
from evalpkg.pipeline.semantic import score_in_worlds
from evalpkg.pipeline.tracking import Tracker
from evalpkg.progress import Progress, quiet
from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings
from evalpkg.sql.executor import ReadOnlyExecutor
from evalpkg.sql.gold import GoldRunner, agent_connection, snapshot_version
from evalpkg.testset import release
from evalpkg.testset.models import Task

LIST_FIELDS = {"tool_names", "missed_points", "unsupported_numbers", "world_misses"}  # not columns for the GX suite


@dataclass
class Scored:
    scores: list[InstanceScore]
    table: dict[str, dict[str, float]]
    clusters: list[Cluster]
    validation: ValidationReport
    trajectories: list[Trajectory]  # read from the store once, for the report and MLflow too
    seconds: dict[str, float] = field(default_factory=dict)  # per stage: score, semantic, cluster, gx
    assignment: dict[str, int] = field(default_factory=dict)  # failed instance id -> its error cluster


@dataclass
class Finished:
    scored: Scored
    report: Path
    mlflow_run_id: str | None
    traces_s: float | None = None  # from the first trace sent to the last stored, beside the stages after grading
    mlflow_run_url: str | None = None  # the run's page in the MLflow UI
    mlflow_compare_url: str | None = None  # the experiment's runs on the headline measures


def new_run_id(config: RunConfig) -> str:
    return f"{config.name}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}-{config.fingerprint()[:6]}"


def plan_run(settings: Settings, config: RunConfig, run_id: str | None = None, progress: Progress = quiet) -> str:
    """Stage 1: persist the plan (in the results store and as plan.json) and return the run id."""
    rel = release.load(settings.tasks_dir, config.testset_version)
    config = config.model_copy(update={"testset_version": rel.version})
    with agent_connection(settings) as conn:
        snap = snapshot_version(conn)
    run_id = run_id or new_run_id(config)
    instances = normalize(rel.tasks, config)
    store.create_run(settings, run_id, config, rel.version, snap, instances)
    d = store.run_dir(settings, run_id)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(config.model_dump_json(indent=2, exclude={"api_key"}), encoding="utf-8")
    (d / "plan.json").write_text(json.dumps([i.model_dump() for i in instances], indent=1), encoding="utf-8")
    chosen = {i.task_id for i in instances}
    what = sampled_cells(rel.tasks, [t for t in rel.tasks if t.id in chosen]) if config.limit else "every task"
    progress(f"run {run_id}: planned {len(instances)} instances over {what}")
    return run_id


def _judge(config: RunConfig) -> Judge | None:
    if config.judge_endpoint is None or config.judge_model is None:
        return None
    from evalpkg.agent.model_client import ModelClient

    return Judge(ModelClient(config.judge_endpoint, config.api_key), config.judge_model)


def _frames(scores: list[InstanceScore], trajectories: list[Trajectory]) -> dict[str, pd.DataFrame]:
    calls = [
        {  # a name the toolkit refused is "(invalid)"; one that ran keeps its name, for the suite to check
            "name": c.name if c.ok or c.name in TOOL_NAMES else "(invalid)",
            "hash_ok": sha256_text(c.result) == c.result_sha256,
        }
        for t in trajectories
        for c in t.tool_calls()
    ]
    steps = [
        {"ordered": t.started_at <= s.started_at <= s.ended_at <= t.ended_at} for t in trajectories for s in t.steps
    ]
    texts = [{"value": v} for t in trajectories for v in (t.final_answer, *(c.result for c in t.tool_calls()))]
    return {
        "scores": pd.DataFrame([s.model_dump(exclude=LIST_FIELDS) for s in scores]),
        "tool_calls": pd.DataFrame(calls or [{"name": "execute_sql", "hash_ok": True}]),
        "steps": pd.DataFrame(steps or [{"ordered": True}]),
        "texts": pd.DataFrame(texts or [{"value": ""}]),
    }


@dataclass
class Graded:
    """Stage 4's first half: every answer graded on the run's snapshot (what a trace shows)."""

    config: RunConfig
    testset_version: str
    snapshot: str
    instances: list[Instance]
    tasks: dict[str, Task]
    trajectories: list[Trajectory]
    scores: list[InstanceScore]
    clock: _Stages


def grade_run(settings: Settings, run_id: str, progress: Progress = quiet) -> Graded:
    """Every recorded answer graded on the run's snapshot, from the store alone (no model is called)."""
    clock = _Stages()  # reading the run back is part of scoring it
    config, testset_version, snapshot, instances = store.load_run(settings, run_id)
    tasks = release.load(settings.tasks_dir, testset_version).by_id()
    trajectories = store.trajectories(settings, run_id)
    repeats = {i.instance_id: i.repeat for i in instances}
    executor = ReadOnlyExecutor(
        settings.agent_url(),
        timeout_ms=config.sql_timeout_ms * 2,
        max_bytes=config.max_result_bytes,
        max_row_bytes=config.max_row_bytes,
    )
    gold = GoldCache(GoldRunner(executor))  # golds under the agents' row cap: a gold over it could never match
    judge = _judge(config)
    try:
        scores = [score_instance(tasks[t.task_id], t, repeats[t.instance_id], gold, judge) for t in trajectories]
    finally:
        executor.close()
        if judge is not None:
            judge.close()
    clock.lap("score")
    progress(f"scored {len(scores)} instances")
    return Graded(config, testset_version, snapshot, instances, tasks, trajectories, scores, clock)


def complete_scoring(
    settings: Settings, run_id: str, graded: Graded, progress: Progress = quiet, *, save: bool = True
) -> Scored:
    """The rest of stages 4 and 5: scored in the reference worlds, failures clustered, the outputs validated
    (GX) and the scores saved (`save=False` writes nothing)."""
    config, scores, trajectories, clock = graded.config, graded.scores, graded.trajectories, graded.clock
    if config.reference_worlds:  # the worlds are built when a run first needs them
        score_in_worlds(
            settings,
            scores,
            trajectories,
            graded.tasks,
            timeout_ms=config.sql_timeout_ms * 2,
            build=True,
            progress=progress,
        )
    clock.lap("semantic")
    if save and (before := store.comparator_versions(settings, run_id) - {COMPARATOR_VERSION}):
        earlier = ", ".join(sorted(f"v{v or 1}" for v in before))  # scores without a version predate v2
        progress(f"{run_id} was scored before by comparator {earlier}; its scores now follow v{COMPARATOR_VERSION}")
    clusters, assignment = cluster_failures(scores, graded.tasks, seed=config.seed)
    clock.lap("cluster")
    validation = validate_frames(
        load_suite(settings.expectations_dir / "run_outputs.json"),
        _frames(scores, trajectories),
        {"planned_instances": len(graded.instances)},
    )
    validation.raise_on_failure(DataError)
    clock.lap("gx")
    if save:
        _save_scores(settings, run_id, scores, clusters, assignment)
        clock.lap("score")  # saving the scores belongs to scoring
    return Scored(scores, breakdown(scores), clusters, validation, trajectories, clock.seconds, assignment)


def score_run(settings: Settings, run_id: str, progress: Progress = quiet, *, save: bool = True) -> Scored:
    """Stages 4 and 5 from the store alone: re-scoring never calls a model; `save=False` writes nothing."""
    return complete_scoring(settings, run_id, grade_run(settings, run_id, progress), progress, save=save)


class _Stages:
    """Seconds per stage: each lap is charged to the stage named (a stage may be charged twice)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.seconds[stage] = self.seconds.get(stage, 0.0) + now - self._last
        self._last = now


def _save_scores(
    settings: Settings, run_id: str, scores: list[InstanceScore], clusters: list[Cluster], assignment: dict[str, int]
) -> None:
    store.save_scores(settings, run_id, [s.model_dump() for s in scores])
    d = store.run_dir(settings, run_id)
    d.mkdir(parents=True, exist_ok=True)
    with (d / "scores.jsonl").open("w", encoding="utf-8") as f:
        for s in scores:
            f.write(s.model_dump_json() + "\n")
    with (d / "clusters.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["instance_id", "task_id", "type", "cluster", "cluster_name", "stop_reason", "error_text"])
        names = {c.cluster: c.name for c in clusters}
        for s in scores:
            if s.instance_id in assignment:
                c = assignment[s.instance_id]
                w.writerow([s.instance_id, s.task_id, s.type, c, names[c], s.stop_reason, s.error_text[:300]])


def report_run(settings: Settings, run_id: str, scored: Scored) -> Path:
    config, *_ = store.load_run(settings, run_id)
    return write_report(
        store.run_dir(settings, run_id) / "report.html",
        run_id,
        config.model_dump(mode="json"),
        scored.table,
        scored.scores,
        scored.clusters,
        scored.trajectories,
        scored.assignment,
    )


def _tracker(
    settings: Settings, run_id: str, config: RunConfig, graded: Graded | Scored, max_traces: int | None = None
) -> Tracker:
    max_traces = config.max_traces if max_traces is None else max_traces
    return Tracker(settings.tracking_uri, run_id, config, graded.scores, graded.trajectories, max_traces)


def _finish_tracking(
    settings: Settings,
    run_id: str,
    tracker: Tracker,
    run: tuple[str, str, list[Instance]],  # its test-set version, snapshot and instances, as the store has them
    scored: Scored,
    report_ready: Callable[[], object],
) -> str:
    testset_version, snap, instances = run
    shards: dict[int, list[str]] = {s: [] for s in range(tracker.config.shards)}  # a child run per shard, even empty
    for i in instances:
        shards.setdefault(i.shard, []).append(i.instance_id)
    d = store.run_dir(settings, run_id)
    names = ("report.html", "report_files", "clusters.csv", "scores.jsonl", "config.json", "plan.json")
    parent = tracker.finish(testset_version, snap, scored.table, shards, [d / n for n in names], report_ready)
    store.set_mlflow_run(settings, run_id, parent)
    return parent


def track_run(
    settings: Settings,
    run_id: str,
    scored: Scored,
    max_traces: int | None = None,
    report_ready: Callable[[], object] = lambda: None,
) -> str:
    """A scored run logged to MLflow at once (finish_run starts its traces earlier)."""
    config, testset_version, snap, instances = store.load_run(settings, run_id)
    with _tracker(settings, run_id, config, scored, max_traces) as tracker:
        return _finish_tracking(settings, run_id, tracker, (testset_version, snap, instances), scored, report_ready)


def finish_run(settings: Settings, run_id: str, *, track: bool, progress: Progress = quiet) -> Finished:
    """The one path after execution, for the CLI, the DAG and re-scoring: score and cluster, validate
    the outputs (GX), write the HTML report, log to MLflow when `track`."""
    graded = grade_run(settings, run_id, progress)
    with ExitStack() as stack:
        # the traces leave as soon as the answers are graded, beside the reference worlds, clustering, GX
        # and the report; what tracking adds is the wait for them after those
        export_started = time.perf_counter()
        tracker, unreachable = None, None
        if track:
            try:
                tracker = stack.enter_context(_tracker(settings, run_id, graded.config, graded))
            except ServiceError as exc:  # MLflow is down: the scores and the report still come, then this
                unreachable = exc
        scored = complete_scoring(settings, run_id, graded, progress)
        clock = _Stages()
        with ThreadPoolExecutor(1, thread_name_prefix="report") as writer:
            # the report is logged once it is there
            report = writer.submit(_timed, report_run, settings, run_id, scored)
            run = (graded.testset_version, graded.snapshot, graded.instances)
            mlflow_run_id = _finish_tracking(settings, run_id, tracker, run, scored, report.result) if tracker else None
            path, scored.seconds["report"] = report.result()
        clock.lap("tracking")
    if unreachable is not None:
        raise unreachable
    if track:
        scored.seconds["tracking"] = clock.seconds["tracking"]
    traces_s = time.perf_counter() - export_started if track else None
    if tracker is None or mlflow_run_id is None:
        return Finished(scored, path, mlflow_run_id, traces_s)
    return Finished(scored, path, mlflow_run_id, traces_s, tracker.run_url, tracker.compare_url)


def _timed(fn: Callable[..., Path], *args: Any) -> tuple[Path, float]:
    started = time.perf_counter()
    return fn(*args), time.perf_counter() - started


def run_all(
    settings: Settings,
    config: RunConfig,
    *,
    progress: Progress = quiet,
    shard_progress: Callable[[int, int], None] = lambda d, t: None,
    track: bool = True,
    run_id: str | None = None,
) -> dict[str, Any]:
    clock = _Stages()
    run_id = plan_run(settings, config, run_id, progress)
    clock.lap("plan")
    reports: list[ShardReport] = []
    for shard in range(config.shards):
        reports.append(execute_shard(settings, run_id, shard, progress=shard_progress))
    finished = finish_run(settings, run_id, track=track, progress=progress)
    # recording happens inside the shards' wall time, on their dialogue threads: its seconds are summed
    # over those threads, beside execute's, not out of it
    seconds = clock.seconds | {"execute": sum(r.seconds for r in reports), "record": sum(r.record_s for r in reports)}
    return {
        "seconds": seconds | finished.scored.seconds,
        "run_id": run_id,
        "report": finished.report,
        "mlflow_run_id": finished.mlflow_run_id,
        "mlflow_run_url": finished.mlflow_run_url,
        "mlflow_compare_url": finished.mlflow_compare_url,
        "traces_s": finished.traces_s,
        "shards": reports,
        "overall": finished.scored.table["overall"],
        "table": finished.scored.table,
        "clusters": finished.scored.clusters,
    }
