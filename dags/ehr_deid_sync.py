"""Airflow DAG ehr_deid_sync: bootstrap -> source freshness -> the dbt project as tasks (Cosmos), into
build schemas -> Great Expectations on the build -> publish (one swap) -> Asset eval_db. Agents query
the previous snapshot until publish. Wiring only; the logic lives in evalpkg."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import Asset, dag, task
from cosmos import DbtTaskGroup, ExecutionConfig, ProfileConfig, ProjectConfig, RenderConfig
from cosmos.constants import ExecutionMode, InvocationMode, LoadMode, TestBehavior

from evalpkg import orchestration

DBT_PROJECT = Path(__file__).resolve().parent.parent / "dbt_project"
EVAL_DB = Asset("eval_db")
DEFAULT_ARGS = {"retries": 2, "retry_delay": timedelta(minutes=2), "owner": "data-team"}


@dag(
    dag_id="ehr_deid_sync",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    default_args=DEFAULT_ARGS,
    tags=["emr-benchmark", "sync", "de-identification"],
    max_active_runs=1,
)
def ehr_deid_sync() -> None:
    @task
    def prepare() -> None:
        orchestration.sync_prepare()

    @task
    def source_freshness() -> None:
        orchestration.sync_freshness()

    dbt = DbtTaskGroup(
        group_id="dbt",
        project_config=ProjectConfig(DBT_PROJECT, env_vars=orchestration.dbt_env()),
        profile_config=ProfileConfig(
            profile_name="ehr_deid", target_name="eval", profiles_yml_filepath=DBT_PROJECT / "profiles.yml"
        ),
        execution_config=ExecutionConfig(execution_mode=ExecutionMode.LOCAL, invocation_mode=InvocationMode.DBT_RUNNER),
        render_config=RenderConfig(
            load_method=LoadMode.DBT_LS,
            test_behavior=TestBehavior.AFTER_EACH,
            # a test reading several models (row parity, relationships) runs once all of them are built:
            # the build schemas hold nothing else (it used to read the previous snapshot's tables)
            should_detach_multiple_parents_tests=True,
            invocation_mode=InvocationMode.DBT_RUNNER,
        ),
    )

    @task
    def validate() -> str:
        return orchestration.sync_validate()

    @task(outlets=[EVAL_DB])
    def publish() -> None:
        orchestration.sync_publish()

    prepare() >> source_freshness() >> dbt >> validate() >> publish()


ehr_deid_sync()
