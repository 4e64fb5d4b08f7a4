"""The DAGs under a real local Airflow deployment (scripts/airflow: api-server, scheduler,
dag-processor, triggerer, LocalExecutor, metadata on the test cluster): runs triggered through the
REST API succeed (ehr_deid_sync's end-to-end checks are here: its one full run in the suite),
agent_eval's shards are mapped onto the gpu pool and queue, and land in MLflow."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from evalpkg.settings import PROJECT_ROOT, Settings
from evalpkg.sync import dbt
from evalpkg.sync.runner import SyncReport
from tests.conftest import free_port
from tests.dags.helpers import checkout_files, file_size
from tests.dags.test_dbt_tasks import UNIT_TESTS
from tests.pipeline.cdp import Browser
from tests.sync.helpers import content_fingerprint

SCRIPT = PROJECT_ROOT / "scripts" / "airflow"
# the wiring is tested here (semantic accuracy: tests/pipeline/test_pipeline.py; the form's defaults: test_dags.py)
EVAL_CONF = {
    "limit": 3,
    "shards": 2,
    "languages": ["zh"],
    "complexities": ["plain"],
    "name": "real-test",
    "reference_worlds": False,
}


@dataclass
class Deployment:
    api: httpx.Client
    home: Path

    def logs(self) -> str:
        """The tail of every component's and task's log, for failure messages."""
        out = []
        for path in sorted((self.home / "logs").rglob("*.log")):
            out.append(
                f"--- {path.relative_to(self.home)}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-25:])
            )
        return "\n".join(out)[-20_000:]


def deployment_env(generated: Settings, home: Path, api_port: int) -> dict[str, str]:
    """What `scripts/airflow start` gets: the test session's servers, its own home and ports."""
    return {
        **os.environ,
        "EVALPKG_STATE_DIR": str(generated.state_dir),
        "EVALPKG_PG_PORT": str(generated.pg_port),
        "EVALPKG_MLFLOW_PORT": str(generated.mlflow_port),
        "EVALPKG_TASKS_DIR": str(generated.tasks_dir),
        "EVALPKG_AIRFLOW_HOME": str(home),
        "AIRFLOW_API_PORT": str(api_port),
        "AIRFLOW_WORKER_LOG_PORT": str(free_port()),
        "AIRFLOW_TRIGGER_LOG_PORT": str(free_port()),
        # only the runs this test triggers: no scheduled ehr_deid_sync run queued ahead of them
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


@pytest.fixture(scope="module")
def deployment(
    synced: SyncReport, generated: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    from evalpkg.services import mlflow_server

    home = tmp_path_factory.mktemp("airflow-real")
    port = free_port()
    env = deployment_env(generated, home, port) | {"AIRFLOW_GPU_SLOTS": "2"}
    mlflow_server.start(generated)
    try:
        started = subprocess.run([str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=300)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v2", timeout=30) as api:
            deployment = Deployment(api, home)
            assert started.returncode == 0, started.stdout + started.stderr + deployment.logs()
            yield deployment
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        mlflow_server.stop(generated)


def _wait(what: str, deadline: float, check: Any, d: Deployment) -> Any:
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}\n{d.logs()}")
        time.sleep(3)


def _run_dag(d: Deployment, dag_id: str, conf: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """Wait for the DAG to be parsed, unpause it, trigger one run, poll it to a final state."""
    deadline = time.monotonic() + timeout_s
    _wait(f"{dag_id} to be parsed", deadline, lambda: d.api.get(f"/dags/{dag_id}").status_code == 200, d)
    d.api.patch(f"/dags/{dag_id}", json={"is_paused": False}).raise_for_status()
    response = d.api.post(f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
    assert response.status_code in (200, 201), response.text
    run_id = response.json()["dag_run_id"]

    def finished() -> dict[str, Any] | None:
        run: dict[str, Any] = d.api.get(f"/dags/{dag_id}/dagRuns/{run_id}").json()
        return run if run["state"] in ("success", "failed") else None

    def task_instances() -> list[dict[str, Any]]:
        response = d.api.get(f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances", params={"limit": 1000})
        return list(response.json()["task_instances"])

    def states() -> dict[tuple[str, int], str]:
        return {(ti["task_id"], ti["map_index"]): ti["state"] for ti in task_instances()}

    try:
        run = _wait(f"{dag_id} run {run_id}", deadline, finished, d)
    except pytest.fail.Exception as exc:
        raise AssertionError(f"{states()}\n{exc}") from None
    run["task_instances"] = task_instances()
    assert run["state"] == "success", f"{states()}\n{d.logs()}"
    return run


def test_real_ehr_deid_sync_runs_under_the_scheduler(deployment: Deployment, generated: Settings) -> None:
    """Every task for real (Cosmos' dozens of dbt tasks too), as the schedule runs it: the evalpkg tasks
    (source freshness, the dbt unit tests Cosmos renders no task for) succeed, a re-sync of the same
    production data changes no mart, evalpkg's dbt logs under the state directory, and neither it nor
    Cosmos writes into the checkout."""
    log = dbt.log_dir(generated) / "dbt.log"
    marts, checkout, log_size = content_fingerprint(generated), checkout_files(), file_size(log)
    run = _run_dag(deployment, "ehr_deid_sync", {}, timeout_s=600)

    states = {ti["task_id"]: ti["state"] for ti in run["task_instances"]}
    ours = {"prepare", "source_freshness", "unit_tests", "validate", "publish"}
    cosmos = {"dbt.stg_his__patients.run", "dbt.stg_his__patients.test"}
    assert {t: states.get(t) for t in ours | cosmos} == dict.fromkeys(ours | cosmos, "success")
    assert sum(t.startswith("dbt.") for t in states) > 20
    xcom = deployment.api.get(
        f"/dags/ehr_deid_sync/dagRuns/{run['dag_run_id']}/taskInstances/unit_tests/xcomEntries/return_value",
        params={"deserialize": True},
    )
    assert xcom.status_code == 200, xcom.text
    assert set(xcom.json()["value"]) == UNIT_TESTS
    assert content_fingerprint(generated) == marts  # a scheduled re-sync changes nothing
    assert file_size(log) > log_size
    assert checkout_files() == checkout


def assert_scored_and_tracked(generated: Settings, name: str, *, instances: int, shards: int) -> None:
    """The latest evaluation run called `name`: its instances scored, an MLflow parent with a child per shard."""
    import mlflow

    from evalpkg.pipeline import store

    with store.results_db(generated) as conn:
        row = conn.execute(
            "select run_id, mlflow_run_id from results.run where name = %s order by created_at desc limit 1", (name,)
        ).fetchone()
        assert row is not None
        scored = conn.execute("select count(*) from results.score where run_id = %s", (row[0],)).fetchone()
    assert scored is not None and scored[0] == instances
    mlflow.set_tracking_uri(generated.tracking_uri)
    client = mlflow.MlflowClient()
    parent = client.get_run(row[1])
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{row[1]}'")
    assert len(children) == shards


def test_real_agent_eval_maps_shards_on_the_gpu_pool_and_tracks(deployment: Deployment, generated: Settings) -> None:
    run = _run_dag(deployment, "agent_eval", EVAL_CONF, timeout_s=300)
    execute = [ti for ti in run["task_instances"] if ti["task_id"] == "execute"]
    assert sorted(ti["map_index"] for ti in execute) == [0, 1]
    assert all((ti["queue"], ti["pool"], ti["state"]) == ("gpu", "gpu", "success") for ti in execute), execute
    assert {ti["rendered_map_index"] for ti in execute} == {"shard 0", "shard 1"}
    assert_scored_and_tracked(generated, "real-test", instances=3, shards=2)
    # the scoring task's log leads to the MLflow run, in its own INFO line; MLflow's stdout lines are off
    (score,) = (ti for ti in run["task_instances"] if ti["task_id"] == "score_validate_track")
    log = deployment.api.get(
        f"/dags/agent_eval/dagRuns/{run['dag_run_id']}/taskInstances/score_validate_track/logs/{score['try_number']}",
        headers={"Accept": "application/json"},
    )
    assert log.status_code == 200, log.text
    lines = [e for e in log.json()["content"] if isinstance(e, dict) and "MLflow run: " in str(e.get("event"))]
    assert len(lines) == 1 and lines[0].get("level") == "info", lines
    assert f"{generated.tracking_uri}/#/experiments/" in lines[0]["event"], lines
    assert "View run" not in log.text


# agent_eval's trigger dialog (the page holds other dialogs: the grid's options)
TRIGGER_DIALOG = "[...document.querySelectorAll('[role=dialog]')].find(d => d.innerText.includes('Trigger Dag'))"


def _click(browser: Browser, within: str, text: str) -> None:
    """Click the last button in `within` whose text is `text` (the dialog's own Trigger comes after the page's)."""
    browser.evaluate(
        f"[...({within}).querySelectorAll('button')].filter(b => b.textContent.trim() === {text!r}).pop().click()"
    )


def _until(browser: Browser, expression: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := browser.evaluate(expression)):
        assert time.monotonic() < deadline, f"timed out waiting for {expression}"
        time.sleep(0.3)
    return value


def test_agent_eval_triggered_from_its_form_as_it_opens(
    deployment: Deployment, generated: Settings, tmp_path: Path
) -> None:
    """A person opens agent_eval's trigger form in a browser and clicks Trigger without changing a field: the
    form's sections in order, a limit of minutes, a run that succeeds and leads to its MLflow run."""
    import mlflow

    from evalpkg import orchestration
    from evalpkg.pipeline import store

    deadline = time.monotonic() + 120
    _wait(
        "agent_eval to be parsed",
        deadline,
        lambda: deployment.api.get("/dags/agent_eval").status_code == 200,
        deployment,
    )
    before = {r["dag_run_id"] for r in deployment.api.get("/dags/agent_eval/dagRuns").json()["dag_runs"]}
    with Browser(tmp_path / "profile") as browser:
        browser.send("Page.enable")
        browser.send("Page.navigate", url=str(deployment.api.base_url.join("/dags/agent_eval")))
        browser.wait_for("Page.loadEventFired")
        _until(browser, "[...document.querySelectorAll('button')].some(b => b.textContent.trim() === 'Trigger')")
        _click(browser, "document", "Trigger")
        _until(browser, f"({TRIGGER_DIALOG})?.innerText.includes('What to evaluate')")
        buttons = browser.evaluate(f"[...({TRIGGER_DIALOG}).querySelectorAll('button')].map(b => b.textContent.trim())")
        assert [b for b in buttons if b in orchestration.FORM_SECTIONS] == list(orchestration.FORM_SECTIONS)
        limit = browser.evaluate(f"({TRIGGER_DIALOG}).querySelector('input[name=element_limit]').value")
        assert limit == str(orchestration.FORM_LIMIT)  # not the whole release
        started = time.monotonic()
        _click(browser, TRIGGER_DIALOG, "Trigger")
        _until(browser, f"!({TRIGGER_DIALOG})")  # the dialog closes on a run created

    def the_new_run() -> dict[str, Any] | None:
        runs = deployment.api.get("/dags/agent_eval/dagRuns").json()["dag_runs"]
        new = [r for r in runs if r["dag_run_id"] not in before and r["state"] in ("success", "failed")]
        return new[0] if new else None

    run = _wait("the run the form triggered", time.monotonic() + 600, the_new_run, deployment)
    took = time.monotonic() - started
    print(f"\nagent_eval from the form as it opens: {run['state']} in {took:.0f}s")
    assert run["state"] == "success" and run["run_type"] == "manual", deployment.logs()
    assert run["conf"]["limit"] == orchestration.FORM_LIMIT and took < 600
    with store.results_db(generated) as conn:
        row = conn.execute(
            "select run_id, mlflow_run_id from results.run where name = %s order by created_at desc limit 1",
            (run["conf"]["name"],),
        ).fetchone()
    assert row is not None and row[1], row
    _, _, _, instances = store.load_run(generated, row[0])
    assert len({i.task_id for i in instances}) == orchestration.FORM_LIMIT
    mlflow.set_tracking_uri(generated.tracking_uri)
    tags = mlflow.MlflowClient().get_run(row[1]).data.tags  # and from MLflow back to the DAG run
    assert (tags["airflow.dag_id"], tags["airflow.run_id"]) == ("agent_eval", run["dag_run_id"])


pytestmark = pytest.mark.server  # Airflow, dbt or the CLI starting its own services: not in --quick
