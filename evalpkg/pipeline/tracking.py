"""MLflow: one parent run per evaluation, a child run per shard, metrics named so they line up in
the comparison UI, trajectories as traces (a span per model call and per tool call)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from evalpkg.agent.trajectory import Trajectory
from evalpkg.errors import ServiceError
from evalpkg.pipeline.config import RunConfig
from evalpkg.pipeline.metrics import flat_metrics, summarize
from evalpkg.pipeline.score import InstanceScore

EXPERIMENT = "emr-agent-benchmark"


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
    root.set_outputs(
        {"answer": traj.final_answer, "final_sql": traj.final_sql, "correct": score.correct if score else None}
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
) -> str:
    """Returns the parent MLflow run id."""
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")
    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(tracking_uri)
    try:
        mlflow.set_experiment(EXPERIMENT)
    except Exception as exc:
        raise ServiceError(f"MLflow at {tracking_uri} is unreachable: {str(exc).splitlines()[0][:200]}") from exc
    params = config.model_dump(mode="json", exclude={"api_key"})
    params.update(
        testset_version=testset_version,
        snapshot_version=snapshot,
        config_fingerprint=config.fingerprint(),
        run_id=run_id,
    )
    by_id = {s.instance_id: s for s in scores}
    # MLflow prints run links on stdout; keep stdout for our own output (report path).
    with contextlib.redirect_stdout(sys.stderr), mlflow.start_run(run_name=f"{config.name} {run_id}") as parent:
        mlflow.log_params({k: str(v) for k, v in params.items()})
        mlflow.set_tags({"benchmark": "emr-agent", "model": config.model, "agent": config.agent})
        mlflow.log_metrics(flat_metrics(table))
        for shard, ids in sorted(shards.items()):
            with mlflow.start_run(run_name=f"shard {shard}", nested=True):
                mlflow.log_params({"shard": shard, "run_id": run_id, "instances": len(ids)})
                shard_scores = [by_id[i] for i in ids if i in by_id]
                mlflow.log_metrics({k: v for k, v in summarize(shard_scores).items() if v == v})
        for traj in trajectories[: max_traces if max_traces is not None else len(trajectories)]:
            _log_trace(mlflow, traj, by_id.get(traj.instance_id))
        for path in artifacts:
            if path.exists():
                mlflow.log_artifact(str(path))
        return str(parent.info.run_id)
