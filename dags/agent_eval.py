"""Airflow DAG agent_eval: normalize -> one mapped task per shard (a run with a worker starts its model
server inside the shard, executes and records, always stops it; a retry resumes; pool and queue gpu)
-> score + cluster + GX -> MLflow.
Manual trigger with a Params form generated from RunConfig, and on every new test-set release."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Asset, Param, dag, task

from evalpkg import orchestration

TESTSET = Asset("testset")
DEFAULT_ARGS = {"retries": 1, "retry_delay": timedelta(minutes=1), "owner": "ml-eng"}
PARAMS = {name: Param(**schema) for name, schema in orchestration.eval_params().items()}


@dag(
    dag_id="agent_eval",
    schedule=[TESTSET],
    start_date=datetime(2026, 1, 1),
    catchup=False,
    default_args=DEFAULT_ARGS,
    params=PARAMS,
    tags=["emr-benchmark", "evaluation"],
    max_active_runs=2,
)
def agent_eval() -> None:
    @task
    def normalize(params: dict[str, Any] | None = None) -> str:
        return orchestration.eval_plan(dict(params or {}))

    @task
    def shards(eval_run: str) -> list[int]:
        return orchestration.eval_shards(eval_run)

    @task(pool="gpu", queue="gpu", retries=2, map_index_template="shard {{ task.op_kwargs['shard'] }}")
    def execute(eval_run: str, shard: int) -> dict[str, Any]:
        return orchestration.eval_shard(eval_run, shard)

    @task
    def score_validate_track(
        eval_run: str, shard_reports: list[dict[str, Any]], params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return orchestration.eval_score_and_log(eval_run, track=bool((params or {}).get("track", True)))

    eval_run = normalize()
    reports = execute.partial(eval_run=eval_run).expand(shard=shards(eval_run))
    score_validate_track(eval_run, reports)


agent_eval()
