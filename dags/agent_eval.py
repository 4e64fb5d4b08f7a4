"""Airflow DAG agent_eval: normalize -> one mapped task per shard (each starts its model worker,
executes and records, always stops the worker; pool gpu) -> score + cluster + GX -> MLflow.
Manual trigger with a validated Params form, and on every new test-set release."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import great_expectations  # noqa: F401  (imported before Airflow: quieter logging)
from airflow.sdk import Asset, Param, dag, task

from evalpkg import orchestration

TESTSET = Asset("testset")
DEFAULT_ARGS = {"retries": 1, "retry_delay": timedelta(minutes=1), "owner": "ml-eng"}
PARAMS = {
    "name": Param("airflow-eval", type="string", minLength=1, maxLength=64),
    "agent": Param("gold", type="string", pattern=r"^(gold|openai|perturb:[a-z_]+)$"),
    "model": Param("gold-replay", type="string", minLength=1),
    "endpoint": Param("", type="string", description="OpenAI-compatible base URL; empty = use the worker"),
    "worker": Param("none", type="string", enum=["none", "cpu"], description="start a model server per shard"),
    "quantization": Param("none", type="string"),
    "strategy": Param("react", type="string", enum=["react", "plan"]),
    "toolset": Param("emr-v1", type="string", enum=["emr-v1", "emr-v1+state"]),
    "testset_version": Param("", type="string", pattern=r"^(v\d+)?$"),
    "languages": Param(["zh", "en"], type="array", items={"type": "string", "enum": ["zh", "en"]}, minItems=1),
    "repeats": Param(1, type="integer", minimum=1, maximum=10),
    "shards": Param(2, type="integer", minimum=1, maximum=64),
    "concurrency": Param(4, type="integer", minimum=1, maximum=64),
    "limit": Param(None, type=["null", "integer"], minimum=1),
    "track": Param(True, type="boolean"),
}


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

    @task(pool="gpu", retries=2)
    def execute(eval_run: str, shard: int, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return orchestration.eval_shard(eval_run, shard, (params or {}).get("worker", "none"))

    @task
    def score_validate_track(
        eval_run: str, shard_reports: list[dict[str, Any]], params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return orchestration.eval_score_and_log(eval_run, track=bool((params or {}).get("track", True)))

    eval_run = normalize()
    reports = execute.partial(eval_run=eval_run).expand(shard=shards(eval_run))
    score_validate_track(eval_run, reports)


agent_eval()
