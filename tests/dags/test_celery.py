"""The DAGs under `scripts/airflow start --celery` (Redis, the Airflow components, a `default` and a
`gpu` worker, metadata on the test cluster): agent_eval's shards run on the gpu worker and nothing
else does, the run lands in MLflow, a shard task delivered again records nothing twice, and the
broker's safe defaults hold (no visibility-timeout warning, the timeout above every GPU deadline)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from evalpkg.settings import Settings
from evalpkg.sync.runner import SyncReport
from tests.conftest import free_port
from tests.dags.test_real_deployment import (
    SCRIPT,
    Deployment,
    _run_dag,
    _wait,
    assert_scored_and_tracked,
    deployment_env,
)

# the wiring is tested here (semantic accuracy: tests/pipeline/test_pipeline.py; the form's defaults: test_dags.py)
EVAL_CONF = {
    "limit": 3,
    "shards": 2,
    "languages": ["zh"],
    "complexities": ["plain"],
    "name": "celery-test",
    "reference_worlds": False,
}
GPU_DAGS = ("agent_eval", "agent_eval_snapshot", "model_quantize")
# scripts/airflow names each worker <queue>@<host>, and each task instance records the worker's name
GPU_WORKER, DEFAULT_WORKER = f"gpu@{socket.gethostname()}", f"default@{socket.gethostname()}"


def gpus() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60).stdout
    return sum(line.startswith("GPU") for line in listed.splitlines())


@dataclass
class CeleryDeployment(Deployment):
    env: dict[str, str]  # what scripts/airflow start got, for the script's other commands

    def script(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(SCRIPT), *args], env=self.env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def celery_deployment(
    synced: SyncReport, generated: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryDeployment]:
    import httpx

    from evalpkg.services import mlflow_server

    home = tmp_path_factory.mktemp("airflow-celery")
    port = free_port()
    env = deployment_env(generated, home, port) | {
        "AIRFLOW_GPU_WORKER_LOG_PORT": str(free_port()),
        "AIRFLOW_REDIS_PORT": str(free_port()),
        "AIRFLOW_DEFAULT_SLOTS": "2",
    }
    # the defaults under test: none of them may come from the caller's environment
    for name in ("AIRFLOW_GPU_SLOTS", "AIRFLOW_VISIBILITY_TIMEOUT", "AIRFLOW__CORE__HOSTNAME_CALLABLE"):
        env.pop(name, None)
    mlflow_server.start(generated)
    try:
        started = subprocess.run(
            [str(SCRIPT), "start", "--celery"], env=env, capture_output=True, text=True, timeout=300
        )
        with httpx.Client(base_url=f"http://127.0.0.1:{port}/api/v2", timeout=30) as api:
            deployment = CeleryDeployment(api, home, env)
            assert started.returncode == 0, started.stdout + started.stderr + deployment.logs()
            yield deployment
    finally:
        subprocess.run([str(SCRIPT), "stop"], env=env, capture_output=True, timeout=180)
        mlflow_server.stop(generated)


@pytest.fixture(scope="module")
def celery_eval_run(celery_deployment: CeleryDeployment) -> dict[str, Any]:
    return _run_dag(celery_deployment, "agent_eval", EVAL_CONF, timeout_s=300)


def test_celery_status_lists_both_workers_and_no_component_warns_of_the_visibility_timeout(
    celery_deployment: CeleryDeployment, celery_eval_run: dict[str, Any]
) -> None:
    status = celery_deployment.script("status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert f"queue default, 2 slot(s), hostname {DEFAULT_WORKER}" in status.stdout, status.stdout
    assert f"queue gpu, {gpus() or 1} slot(s), hostname {GPU_WORKER}" in status.stdout, status.stdout
    assert "redis up" in status.stdout
    logs = sorted((celery_deployment.home / "logs").rglob("*.log"))
    assert {"scheduler.log", "worker-gpu.log", "worker-default.log"} <= {p.name for p in logs}
    warned = [str(p) for p in logs if "No visibility_timeout configured" in p.read_text(errors="replace")]
    assert not warned, warned


def test_celery_visibility_timeout_is_above_every_gpu_task_deadline(celery_deployment: CeleryDeployment) -> None:
    got = celery_deployment.script("config", "get-value", "celery_broker_transport_options", "visibility_timeout")
    assert got.returncode == 0, got.stderr
    visibility_timeout = int(got.stdout.strip())
    for dag_id in GPU_DAGS:
        tasks = celery_deployment.api.get(f"/dags/{dag_id}/tasks").json()["tasks"]
        for t in (t for t in tasks if t["queue"] == "gpu"):
            deadline = t["execution_timeout"]
            # without a deadline a GPU task could outlive the timeout, and Redis would start a second copy
            assert deadline is not None, f"{dag_id}.{t['task_id']} on the gpu queue has no execution_timeout"
            assert deadline["days"] * 86400 + deadline["seconds"] < visibility_timeout, (dag_id, t["task_id"])


def test_celery_agent_eval_runs_shards_on_the_gpu_worker_only_and_tracks(
    celery_eval_run: dict[str, Any], generated: Settings
) -> None:
    tis = celery_eval_run["task_instances"]
    execute = [ti for ti in tis if ti["task_id"] == "execute"]
    assert sorted(ti["map_index"] for ti in execute) == [0, 1]
    assert {(ti["queue"], ti["hostname"], ti["state"]) for ti in execute} == {("gpu", GPU_WORKER, "success")}
    others = [ti for ti in tis if ti["task_id"] != "execute"]
    assert {ti["task_id"] for ti in others} == {"normalize", "shards", "score_validate_track"}
    assert {(ti["hostname"], ti["state"]) for ti in others} == {(DEFAULT_WORKER, "success")}, others
    assert_scored_and_tracked(generated, "celery-test", instances=3, shards=2)


def test_celery_a_shard_task_delivered_again_records_nothing_twice(
    celery_deployment: CeleryDeployment, celery_eval_run: dict[str, Any], generated: Settings
) -> None:
    """A finished shard goes through the broker to the gpu worker once more (as after a lost worker's
    retry): it runs, finds every instance recorded, and records nothing."""
    from evalpkg.pipeline import store

    d, dag_run = celery_deployment, celery_eval_run["dag_run_id"]
    with store.results_db(generated) as conn:
        eval_run = conn.execute(
            "select run_id from results.run where name = 'celery-test' order by created_at desc limit 1"
        ).fetchone()
        assert eval_run is not None
        # the sample's instances fall to the shards by task: take the first shard that holds some
        shard = conn.execute("select min(shard) from results.trajectory where run_id = %s", eval_run).fetchone()
        assert shard is not None and shard[0] is not None, "no shard recorded anything the first time"
        query = "select instance_id, digest, recorded_at from results.trajectory where run_id = %s and shard = %s order by 1"
        recorded_before = conn.execute(query, (*eval_run, shard[0])).fetchall()
    assert recorded_before
    ti_path = f"/dags/agent_eval/dagRuns/{dag_run}/taskInstances/execute/{shard[0]}"
    first = d.api.get(ti_path).json()

    cleared = d.api.post(
        "/dags/agent_eval/clearTaskInstances",
        json={"dry_run": False, "only_failed": False, "dag_run_id": dag_run, "task_ids": [["execute", shard[0]]]},
    )
    assert cleared.status_code == 200, cleared.text

    def ran_again() -> dict[str, Any] | None:
        ti: dict[str, Any] = d.api.get(ti_path).json()
        return ti if ti["try_number"] > first["try_number"] and ti["state"] in ("success", "failed") else None

    again = _wait(f"shard {shard[0]} to run again", time.monotonic() + 180, ran_again, d)
    assert (again["state"], again["hostname"]) == ("success", GPU_WORKER), again
    report = d.api.get(f"{ti_path.rsplit('/', 1)[0]}/xcomEntries/return_value", params={"map_index": shard[0]}).json()
    shard_report = report["value"]
    assert (shard_report["recorded"], shard_report["skipped"], shard_report["planned"]) == (
        0,
        *[len(recorded_before)] * 2,
    )
    with store.results_db(generated) as conn:
        assert conn.execute(query, (*eval_run, shard[0])).fetchall() == recorded_before


def test_after_stop_status_still_lists_the_workers_and_the_broker(celery_deployment: CeleryDeployment) -> None:
    """Last in this module: it stops the deployment (the fixture's own stop then finds nothing to do)."""
    stopped = celery_deployment.script("stop")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    status = celery_deployment.script("status")
    assert status.returncode == 3, status.stdout  # something is down
    lines = status.stdout.splitlines()
    for process in ("api-server", "scheduler", "worker-default", "worker-gpu", "redis"):
        assert any(line.startswith(f"{process} down") for line in lines), (process, status.stdout)
    assert " up (pid " not in status.stdout, status.stdout


pytestmark = pytest.mark.server  # Airflow, Redis and Celery workers started by scripts/airflow: not in --quick
