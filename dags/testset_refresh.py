"""Airflow DAG testset_refresh (@monthly): mine last month's query tickets into the review queue as
`evalpkg testset refresh --month` does by default (each candidate checked in the reference worlds),
release what reviewers approved (every wording approved, a measured second annotation) and what holds in
every reference world, as `evalpkg testset release` does (a candidate that fails there is refused, its
reason in the task log and the queue), validate the release (GX inside), update Asset testset."""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import Asset, dag, get_current_context, task

from evalpkg import orchestration

TESTSET = Asset("testset")
DEFAULT_ARGS = {"retries": 2, "retry_delay": timedelta(minutes=5), "owner": "benchmark-maintainers"}


@dag(
    dag_id="testset_refresh",
    schedule="@monthly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    default_args=DEFAULT_ARGS,
    tags=["emr-benchmark", "testset"],
    max_active_runs=1,
)
def testset_refresh() -> None:
    @task
    def mine() -> list[str]:
        context = get_current_context()
        day = (context.get("logical_date") or datetime.now()).date()
        return orchestration.testset_refresh(orchestration.previous_month(day))

    @task
    def release(candidates: list[str]) -> str | None:
        return orchestration.testset_release()  # only approved, checked candidates; None if none

    @task(outlets=[TESTSET])
    def validate(version: str | None) -> str:
        return orchestration.testset_validate(version)

    validate(release(mine()))


testset_refresh()
