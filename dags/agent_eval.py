"""Airflow DAGs agent_eval and agent_eval_snapshot: normalize -> one mapped task per shard (a run with a
worker starts its model server inside the shard, executes and records, always stops it; a retry
resumes; pool and queue gpu) -> score + cluster + GX -> MLflow.

agent_eval: manual, with a Params form generated from RunConfig (its limit a run of minutes), and on
every new test-set release (the whole release).
agent_eval_snapshot: on every new eval DB snapshot, the configuration pinned in the Airflow Variable
agent_eval_pinned (RunConfig fields as JSON; unset: the gold agent, a self-test of the new snapshot)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Asset, Param, Variable, dag, task

from evalpkg import orchestration

TESTSET, EVAL_DB = Asset("testset"), Asset("eval_db")
PINNED = "agent_eval_pinned"
DEFAULT_ARGS = {"retries": 1, "retry_delay": timedelta(minutes=1), "owner": "ml-eng"}
# A shard that needs longer should be split into more shards. Under Celery the broker's visibility
# timeout (scripts/airflow) stays above it, so Redis never hands a still-running shard to a second worker.
SHARD_DEADLINE = timedelta(hours=24)
PARAMS = {name: Param(**schema) for name, schema in orchestration.eval_params().items()}


def agent_eval(dag_id: str, schedule: list[Asset], *, pinned: bool) -> None:
    @dag(
        dag_id=dag_id,
        schedule=schedule,
        start_date=datetime(2026, 1, 1),
        catchup=False,
        default_args=DEFAULT_ARGS,
        params=PARAMS,
        tags=["emr-benchmark", "evaluation"],
        max_active_runs=2,
    )
    def pipeline() -> None:
        @task
        def normalize(params: dict[str, Any] | None = None, dag_run: Any = None) -> str:
            return orchestration.eval_plan(
                dict(params or {}),
                manual=dag_run.run_type == "manual",
                pinned=Variable.get(PINNED, default={}, deserialize_json=True) if pinned else None,
            )

        @task
        def shards(eval_run: str) -> list[int]:
            return orchestration.eval_shards(eval_run)

        @task(
            pool="gpu",
            queue="gpu",
            retries=2,
            execution_timeout=SHARD_DEADLINE,
            map_index_template="shard {{ task.op_kwargs['shard'] }}",
        )
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

    pipeline()


agent_eval("agent_eval", [TESTSET], pinned=False)
agent_eval("agent_eval_snapshot", [EVAL_DB], pinned=True)
