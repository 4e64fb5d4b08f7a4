"""The DAGs: they load with no import errors and follow the project's policies; Params reject bad
values; agent_eval and ehr_deid_sync run end to end with dag.test() on the test cluster."""

from __future__ import annotations

import copy
import os
import time
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from evalpkg.settings import PROJECT_ROOT, Settings

DAGS = {"ehr_deid_sync", "agent_eval", "agent_eval_snapshot", "testset_refresh", "model_quantize"}


def test_dags_load_and_follow_policy(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == DAGS
    for dag_id in DAGS:
        dag = dagbag.get_dag(dag_id)
        assert "emr-benchmark" in dag.tags, dag_id
        assert dag.catchup is False, dag_id
        assert dag.default_args.get("retries", 0) >= 1 and dag.default_args.get("owner"), dag_id
    for stat in dagbag.dagbag_stats:  # thin DAG files: no heavy work at import
        assert stat.duration.total_seconds() < 20, stat.file


def test_dag_files_only_wire(dagbag: Any) -> None:
    for path in (PROJECT_ROOT / "dags").glob("*.py"):
        text = path.read_text()
        assert "from evalpkg import orchestration" in text and "airflow.operators" not in text, path
    for path in (PROJECT_ROOT / "evalpkg").rglob("*.py"):  # the product never imports Airflow
        assert not any(
            line.lstrip().startswith(("import airflow", "from airflow")) for line in path.read_text().splitlines()
        ), path


def test_params_reject_bad_values(dagbag: Any) -> None:
    from airflow.sdk.definitions.param import ParamValidationError  # type: ignore[import-not-found]

    dag = dagbag.get_dag("agent_eval")
    for bad in (  # each rule comes from RunConfig's JSON schema (or RUN_OPTIONS), none from the DAG file
        {"shards": 0},
        {"languages": ["fr"]},
        {"agent": "drop table"},
        {"strategy": "magic"},
        {"limit": 0},
        {"testset_version": 2},
        {"worker": "gpu"},
    ):
        params = copy.deepcopy(dag.params)
        with pytest.raises(ParamValidationError):
            for k, v in bad.items():
                params[k] = v
            params.validate()
    ok = copy.deepcopy(dag.params)
    ok["shards"] = 3
    ok["endpoint"] = ok["testset_version"] = ok["limit"] = None  # empty = RunConfig's default
    ok.validate()


def test_shards_run_on_the_gpu_queue_labelled_by_shard(dagbag: Any) -> None:
    execute = dagbag.get_dag("agent_eval").get_task("execute")
    assert (execute.pool, execute.queue) == ("gpu", "gpu")
    assert execute.map_index_template == "shard {{ task.op_kwargs['shard'] }}"


@pytest.mark.parametrize(
    ("dag_id", "asset", "reason"),
    [
        ("agent_eval", "testset", "a new test-set release is evaluated with the form's defaults"),
        ("ehr_deid_sync", None, "the sync is scheduled daily; it produces eval_db"),
        ("agent_eval_snapshot", "eval_db", "every new snapshot is evaluated with the pinned configuration"),
    ],
)
def test_what_schedules_each_dag(dagbag: Any, dag_id: str, asset: str | None, reason: str) -> None:
    condition = getattr(dagbag.get_dag(dag_id).timetable, "asset_condition", None)
    names = [a.name for a in condition.objects] if condition else None
    assert names == ([asset] if asset else None), reason


def test_the_snapshot_dag_runs_what_agent_eval_runs(dagbag: Any) -> None:
    a, b = dagbag.get_dag("agent_eval"), dagbag.get_dag("agent_eval_snapshot")
    assert {t.task_id: (t.pool, t.queue) for t in a.tasks} == {t.task_id: (t.pool, t.queue) for t in b.tasks}
    assert "eval_db" in {o.name for o in dagbag.get_dag("ehr_deid_sync").get_task("publish").outlets}


def test_agent_eval_snapshot_evaluates_the_pinned_configuration(dagbag: Any, generated: Settings) -> None:
    from airflow.models import Variable  # the metadata DB's, which the task reads through the API

    from evalpkg.pipeline import store

    pinned = {"limit": 2, "languages": ["en"], "complexities": ["technical"], "name": "pinned-on-snapshot"}
    Variable.set("agent_eval_pinned", pinned, serialize_json=True)
    try:
        run = dagbag.get_dag("agent_eval_snapshot").test(run_conf={"track": False, "limit": 1})
    finally:
        Variable.delete("agent_eval_pinned")
    assert str(run.state) == "success"
    with store.results_db(generated) as conn:
        row = conn.execute(
            "select r.run_id, count(s.*) from results.run r join results.score s using (run_id) "
            "where r.name = 'pinned-on-snapshot' group by 1 order by max(r.created_at) desc limit 1"
        ).fetchone()
    assert row is not None and row[1] == 2  # the Variable's limit, not the form's
    config, *_ = store.load_run(generated, row[0])
    assert (config.languages, config.complexities) == (["en"], ["technical"])


def test_agent_eval_triggered_as_its_form_opens_is_a_run_of_minutes(dagbag: Any, generated: Settings) -> None:
    """What a person gets who clicks Trigger without changing a field: the form's limit, not the release.
    (Only the name is set: dag.test() keeps a run's conf for the DAG's later test runs.)"""
    from evalpkg import orchestration
    from evalpkg.pipeline import store
    from evalpkg.services import mlflow_server

    mlflow_server.start(generated)
    try:
        started = time.monotonic()
        run = dagbag.get_dag("agent_eval").test(run_conf={"name": "form-defaults"})
        took = time.monotonic() - started
    finally:
        mlflow_server.stop(generated)
    print(f"\nagent_eval with the form's defaults: {took:.0f}s")
    assert str(run.state) == "success" and took < 300
    with store.results_db(generated) as conn:
        row = conn.execute(
            "select run_id, mlflow_run_id from results.run where name = 'form-defaults' order by created_at desc limit 1"
        ).fetchone()
    assert row is not None and row[1]  # tracked
    _, _, _, instances = store.load_run(generated, row[0])
    assert len({i.task_id for i in instances}) == orchestration.FORM_LIMIT < len(store.saved_scores(generated, row[0]))


def test_agent_eval_runs_end_to_end_and_lands_in_mlflow(dagbag: Any, generated: Settings) -> None:
    import mlflow

    from evalpkg.pipeline import store
    from evalpkg.services import mlflow_server

    mlflow_server.start(generated)
    try:
        run = dagbag.get_dag("agent_eval").test(
            run_conf={"limit": 3, "shards": 2, "languages": ["zh"], "complexities": ["plain"], "name": "dag-test"}
        )
        assert str(run.state) == "success"
        shard_labels = {ti.rendered_map_index for ti in run.get_task_instances() if ti.task_id == "execute"}
        assert shard_labels == {"shard 0", "shard 1"}
        with store.results_db(generated) as conn:
            run_id, mlflow_id = conn.execute(
                "select run_id, mlflow_run_id from results.run where name = 'dag-test' order by created_at desc limit 1"
            ).fetchone()  # type: ignore[misc]
            scored = conn.execute("select count(*) from results.score where run_id = %s", (run_id,)).fetchone()
        assert scored is not None and scored[0] == 3
        mlflow.set_tracking_uri(generated.tracking_uri)
        client = mlflow.MlflowClient()
        parent = client.get_run(mlflow_id)
        children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{mlflow_id}'")
        assert parent.data.metrics["accuracy"] == 1.0 and len(children) == 2
    finally:
        mlflow_server.stop(generated)


def test_ehr_deid_sync_renders_dbt_models_and_their_tests_as_tasks(dagbag: Any) -> None:
    # run end to end under the real scheduler in test_real_deployment.py
    dbt_tasks = [t for t in dagbag.get_dag("ehr_deid_sync").task_ids if t.startswith("dbt.")]
    assert any("t_lab_result" in t for t in dbt_tasks) and any(t.endswith(".test") for t in dbt_tasks)


def test_testset_refresh_mines_last_month_into_the_review_queue(
    dagbag: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DAG mines as `evalpkg testset refresh --month` does by default: each candidate checked in the
    reference worlds before review. Here in the testset tests' one small world (built once a session), not
    the six at the reference scale: the same code path, in minutes less."""
    import shutil
    from datetime import datetime

    from evalpkg.testset import refresh
    from evalpkg.testset.refresh_release import MINED_IN_WORLDS
    from evalpkg.testset.review_queue import Candidate
    from tests.testset.test_refresh_quality import WORLD

    monkeypatch.setattr(refresh, "MINING_WORLDS", (WORLD,))
    tasks_dir = tmp_path / "tasks"  # never the repository's own queue
    shutil.copytree(PROJECT_ROOT / "tasks", tasks_dir, ignore=shutil.ignore_patterns("review"))
    released = sorted(p.name for p in tasks_dir.iterdir() if p.name.startswith("v"))
    saved = os.environ.get("EVALPKG_TASKS_DIR")
    os.environ["EVALPKG_TASKS_DIR"] = str(tasks_dir)
    try:
        run = dagbag.get_dag("testset_refresh").test(logical_date=datetime(2026, 11, 15, tzinfo=UTC))
    finally:
        if saved is None:
            os.environ.pop("EVALPKG_TASKS_DIR", None)
        else:
            os.environ["EVALPKG_TASKS_DIR"] = saved
    assert str(run.state) == "success"
    queued = [Candidate.model_validate_json(p.read_text()) for p in (tasks_dir / "review" / "2026-10").glob("*.json")]
    assert queued  # October's tickets became candidates, waiting for review, each checked in the world first
    assert all(f"{MINED_IN_WORLDS} (1 checked)" in c.task.maintenance_notes for c in queued), queued[0].task
    assert sorted(p.name for p in tasks_dir.iterdir() if p.name.startswith("v")) == released  # nothing unreviewed


pytestmark = pytest.mark.server  # Airflow, dbt or the CLI starting its own services: not in --quick
