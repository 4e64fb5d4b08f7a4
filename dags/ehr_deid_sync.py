"""Airflow DAG ehr_deid_sync: bootstrap -> source freshness -> the dbt project as tasks (Cosmos), into
build schemas -> dbt unit tests -> Great Expectations on the build -> publish (one swap) -> Asset
eval_db. Agents query the previous snapshot until publish. Every dbt invocation runs in pool `dbt`
(scripts/airflow creates it). Wiring only; the logic lives in evalpkg."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import Asset, dag, task
from cosmos import DbtTaskGroup, ExecutionConfig, ProfileConfig, ProjectConfig, RenderConfig
from cosmos.constants import ExecutionMode, InvocationMode, LoadMode, TestBehavior

from evalpkg import orchestration

DBT_PROJECT = Path(__file__).resolve().parent.parent / "dbt_project"
EVAL_DB = Asset("eval_db")
DBT_POOL = "dbt"
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

    @task(pool=DBT_POOL)
    def source_freshness() -> None:
        orchestration.sync_freshness()

    dbt = DbtTaskGroup(
        group_id="dbt",
        project_config=ProjectConfig(DBT_PROJECT, env_vars=orchestration.dbt_env()),
        profile_config=ProfileConfig(
            profile_name="ehr_deid", target_name="eval", profiles_yml_filepath=DBT_PROJECT / "profiles.yml"
        ),
        execution_config=ExecutionConfig(execution_mode=ExecutionMode.LOCAL, invocation_mode=InvocationMode.DBT_RUNNER),
        operator_args={"pool": DBT_POOL},
        render_config=RenderConfig(
            load_method=LoadMode.DBT_LS,
            test_behavior=TestBehavior.AFTER_EACH,
            # a test reading several models (row parity, relationships) runs once all of them are built:
            # the build schemas hold nothing else (it used to read the previous snapshot's tables)
            should_detach_multiple_parents_tests=True,
            # Cosmos 1.15 renders no task for a dbt unit test (a model's test task picked up its unit
            # tests only when the model also had data tests): they all run in unit_tests below
            exclude=["test_type:unit"],
            invocation_mode=InvocationMode.DBT_RUNNER,
        ),
    )

    @task(pool=DBT_POOL)
    def unit_tests() -> list[str]:
        return orchestration.sync_unit_tests()

    @task
    def validate() -> str:
        return orchestration.sync_validate()

    @task(outlets=[EVAL_DB])
    def publish() -> None:
        orchestration.sync_publish()

    # unit tests read the column types of their models' parents, so they follow the build (staging
    # included); a failure stops the run before anything is validated or published
    prepare() >> source_freshness() >> dbt >> unit_tests() >> validate() >> publish()


ehr_deid_sync()
