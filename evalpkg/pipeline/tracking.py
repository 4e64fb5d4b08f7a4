"""MLflow: one parent run per evaluation, a child run per shard, metrics named so they line up in
the comparison UI, trajectories as traces (a span per model call and per tool call).

Logging the same evaluation again (a retried Airflow task, `evalpkg score RUN`) reuses its parent
and child runs, found by their tags, and replaces the parent's traces: one parent per run id."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from evalpkg.agent.trajectory import Trajectory
from evalpkg.errors import ServiceError
from evalpkg.grading.comparator import COMPARATOR_VERSION
from evalpkg.pipeline.metrics import flat_metrics, summarize
from evalpkg.pipeline.score import InstanceScore
from evalpkg.runconfig import RunConfig

EXPERIMENT = "emr-agent-benchmark"
RUN_ID_TAG = "evalpkg.run_id"  # on the parent and every child: the evalpkg run they belong to
SHARD_TAG = "evalpkg.shard"  # on a child: its shard
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own tag on nested runs
COMPARATOR_TAG = "evalpkg.comparator_version"  # tags, unlike params, follow a re-score
FINGERPRINT_TAG = "evalpkg.config_fingerprint"
TRACES_TAG = "evalpkg.traces"  # "N of M": how many trajectories are traces (--max-traces leaves some out)
SERVED_PREFIX = "served."  # what the workers served: params (comparable) and tags (everything, per shard too)
# Traces leave in batches of spans from background threads (MLflow's own async export): one request
# per batch, not per span; log_run flushes and counts them before it returns. A user's own setting wins.
BATCHED_TRACES = {
    "MLFLOW_ENABLE_ASYNC_TRACE_LOGGING": "true",
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE": "500",
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_INTERVAL_MILLIS": "500",
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_QUEUE_SIZE": "1000000",  # a full queue drops traces: never full here
}
SERVED_PARAMS = ("served_model", "model_path", "model_digest", "revision", "quantization", "server_version", "gpu")


def served_summary(served: dict[int, dict[str, str]]) -> dict[str, str]:
    """One value per identity field over the shards' workers ("a | b" when shards differ)."""
    values: dict[str, set[str]] = {}
    for identity in served.values():
        for key, value in identity.items():
            values.setdefault(key, set()).add(str(value))
    return {SERVED_PREFIX + k: " | ".join(sorted(v)) for k, v in sorted(values.items())}


def _served_params(summary: dict[str, str]) -> dict[str, str]:
    """The comparable fields of what the workers served, as params."""
    return {k: v for k, v in summary.items() if k.removeprefix(SERVED_PREFIX) in SERVED_PARAMS}


def _loggable(client: Any, parent_id: str | None, params: dict[str, str]) -> dict[str, str]:
    """MLflow never changes a logged param, so a reused parent keeps the values it has (a re-score by
    a newer comparator changes the fingerprint, for one; the tags show the latest)."""
    if parent_id is None:
        return params
    logged = client.get_run(parent_id).data.params
    return {k: v for k, v in params.items() if logged.get(k, v) == v}


def _ns(stamp: str) -> int | None:
    try:
        return int(datetime.fromisoformat(stamp).timestamp() * 1e9)
    except ValueError:
        return None


def _log_trace(mlflow: Any, traj: Trajectory, score: InstanceScore | None) -> None:
    root = mlflow.start_span_no_context(
        name=traj.task_id,
        span_type="AGENT",
        inputs={"question": traj.question, "language": traj.language},
        attributes={"instance_id": traj.instance_id, "agent": traj.agent, "stop_reason": traj.stop_reason},
        start_time_ns=_ns(traj.started_at),
    )
    for step in traj.steps:
        step_start = _ns(step.started_at)
        llm = mlflow.start_span_no_context(
            name=f"model step {step.index}",
            span_type="CHAT_MODEL",
            parent_span=root,
            inputs={"reasoning": step.reasoning},
            start_time_ns=step_start,
            attributes={"prompt_tokens": str(step.prompt_tokens), "completion_tokens": str(step.completion_tokens)},
        )
        llm.set_outputs({"text": step.model_text, "parse_error": step.parse_error})
        llm.end(end_time_ns=step_start + int(step.latency_ms * 1e6) if step_start else None)
        for call in step.tool_calls:
            start = _ns(call.started_at)
            tool = mlflow.start_span_no_context(
                name=call.name,
                span_type="TOOL",
                parent_span=root,
                inputs={"arguments": call.arguments},
                start_time_ns=start,
                attributes={"ok": str(call.ok), "cached": str(call.cached), "result_sha256": call.result_sha256},
            )
            tool.set_outputs({"result": call.result[:4000]})
            tool.end(end_time_ns=start + int(call.elapsed_ms * 1e6) if start else None)
    state = traj.final_state()
    root.set_outputs(
        {"answer": traj.final_answer, "final_sql": traj.final_sql, "correct": score.correct if score else None}
        | (  # the dialogue state where the run kept one, and its score against the hidden slots
            {"state": state.model_dump(mode="json"), "slot_accuracy": score.slot_accuracy if score else None}
            if state is not None
            else {}
        )
        | (  # a dialogue with follow-ups: each turn's answer and outcome
            {
                "turn_answers": [a.model_dump() for a in traj.turn_answers],
                "turn_correct": score.turn_correct if score else None,
            }
            if traj.turn_answers
            else {}
        )
    )
    root.end(end_time_ns=_ns(traj.ended_at))


def log_run(
    tracking_uri: str,
    run_id: str,
    config: RunConfig,
    testset_version: str,
    snapshot: str,
    table: dict[str, dict[str, float]],
    scores: list[InstanceScore],
    shards: dict[int, list[str]],
    trajectories: list[Trajectory],
    artifacts: list[Path],
    max_traces: int | None = None,
    artifacts_ready: Callable[[], object] = lambda: None,
) -> str:
    """Returns the parent MLflow run id; logging the same run id again reuses that parent. Traces go
    out in batches off this thread; `artifacts_ready` is waited for (a report being written meanwhile)
    before the artifacts are logged, and the run fails unless every trace reached the server."""
    for key, value in BATCHED_TRACES.items():
        os.environ.setdefault(key, value)
    # Telemetry off (it must be set before mlflow is imported): it cannot reach its endpoint here, and its
    # session id, kept in os.environ, raced with requests reading the environment in a retried DAG task.
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(tracking_uri)
    try:
        experiment_id = mlflow.set_experiment(EXPERIMENT).experiment_id
    except Exception as exc:
        raise ServiceError(f"MLflow at {tracking_uri} is unreachable: {str(exc).splitlines()[0][:200]}") from exc
    client = mlflow.MlflowClient()
    tagged = _runs_of(client, experiment_id, run_id)
    parents = [r for r in tagged if PARENT_TAG not in r.data.tags]
    parent_id = parents[0].info.run_id if parents else None
    children = {
        int(r.data.tags[SHARD_TAG]): r.info.run_id
        for r in reversed(tagged)  # the newest child of a shard wins
        if parent_id and r.data.tags.get(PARENT_TAG) == parent_id and r.data.tags.get(SHARD_TAG, "").isdigit()
    }
    if parent_id:
        mlflow.flush_trace_async_logging()  # an attempt this process abandoned sends its last traces first
        _delete_traces(client, experiment_id, parent_id)
    params = config.model_dump(mode="json", exclude={"api_key"})
    params.update(
        testset_version=testset_version,
        snapshot_version=snapshot,
        config_fingerprint=config.fingerprint(),
        comparator_version=COMPARATOR_VERSION,
        run_id=run_id,
    )
    summary = served_summary(config.served)
    params.update(_served_params(summary))
    params = _loggable(client, parent_id, {k: str(v) for k, v in params.items()})
    by_id = {s.instance_id: s for s in scores}
    # MLflow prints run links on stdout; keep stdout for our own output (report path).
    with (
        contextlib.redirect_stdout(sys.stderr),
        # the run id tag goes on at creation, so a run that an interrupted attempt left behind is found
        mlflow.start_run(
            run_id=parent_id,
            run_name=None if parent_id else f"{config.name} {run_id}",
            tags={RUN_ID_TAG: run_id, "benchmark": "emr-agent", "model": config.model, "agent": config.agent},
        ) as parent,
    ):
        mlflow.log_params(params)
        mlflow.set_tags({**summary, COMPARATOR_TAG: str(COMPARATOR_VERSION), FINGERPRINT_TAG: config.fingerprint()})
        mlflow.log_metrics(flat_metrics(table))
        for shard, ids in sorted(shards.items()):
            child_id = children.get(shard)
            with mlflow.start_run(
                run_id=child_id,
                run_name=None if child_id else f"shard {shard}",
                nested=True,
                tags={RUN_ID_TAG: run_id, SHARD_TAG: str(shard)},
            ):
                mlflow.log_params({"shard": shard, "run_id": run_id, "instances": len(ids)})
                if identity := config.served.get(shard):
                    mlflow.set_tags({SERVED_PREFIX + k: str(v) for k, v in identity.items()})
                shard_scores = [by_id[i] for i in ids if i in by_id]
                mlflow.log_metrics({k: v for k, v in summarize(shard_scores).items() if v == v})
        traced = _traced(trajectories, by_id, max_traces)
        mlflow.set_tags({TRACES_TAG: f"{len(traced)} of {len(trajectories)}"})
        for traj in traced:
            _log_trace(mlflow, traj, by_id.get(traj.instance_id))
        artifacts_ready()
        for path in artifacts:
            if path.is_dir():  # the report's trajectories, loaded as a row is opened
                mlflow.log_artifacts(str(path), path.name)
            elif path.exists():
                mlflow.log_artifact(str(path))
        mlflow.flush_trace_async_logging()
        if (held := count_traces(client, experiment_id, parent.info.run_id)) != len(traced):
            raise ServiceError(
                f"MLflow at {tracking_uri} holds {held} of the {len(traced)} traces of run {run_id}: "
                f"`evalpkg score {run_id} --track` logs them again (it replaces them, nothing is logged twice)"
            )
        return str(parent.info.run_id)


def _runs_of(client: Any, experiment_id: str, run_id: str) -> list[Any]:
    """Every active MLflow run tagged with this evalpkg run id, newest first. MLflow's filter strings
    have no escapes: quote with the quote the id lacks, or (it has both) match every tagged run here."""
    quote = '"' if "'" in run_id else "'"
    value = f"{quote}{run_id}{quote}" if quote not in run_id else None
    runs = client.search_runs(
        [experiment_id],
        f"tags.`{RUN_ID_TAG}` = {value}" if value else f"tags.`{RUN_ID_TAG}` LIKE '%'",
        max_results=1000 if value else 50000,
        order_by=["attributes.start_time DESC"],
    )
    return [r for r in runs if r.data.tags.get(RUN_ID_TAG) == run_id]


def _traced(trajectories: list[Trajectory], scores: dict[str, InstanceScore], limit: int | None) -> list[Trajectory]:
    """Every trajectory, or at most `limit` of them: the failures first (what a user opens), in run order."""
    if limit is None or limit >= len(trajectories):
        return trajectories

    def passed(t: Trajectory) -> bool:
        return bool((s := scores.get(t.instance_id)) and s.correct)

    return sorted(trajectories, key=passed)[:limit]  # a stable sort keeps run order within each


def count_traces(client: Any, experiment_id: str, mlflow_run_id: str) -> int:
    """The traces MLflow holds for a run, page by page."""
    held, token = 0, None
    while True:
        page = client.search_traces(
            locations=[experiment_id], run_id=mlflow_run_id, include_spans=False, max_results=500, page_token=token
        )
        held += len(page)
        token = page.token
        if not token:
            return held


def _delete_traces(client: Any, experiment_id: str, mlflow_run_id: str) -> None:
    """A reused parent gets its traces again: drop the ones an earlier attempt logged."""
    while traces := client.search_traces(
        locations=[experiment_id], run_id=mlflow_run_id, include_spans=False, max_results=100
    ):
        if not client.delete_traces(experiment_id, trace_ids=[t.info.trace_id for t in traces]):
            return
