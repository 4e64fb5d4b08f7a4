"""Shared by test_dags.py and test_dbt_tasks.py: one migrated Airflow home and DagBag on the test
cluster, and one end-to-end ehr_deid_sync run with dag.test() (minutes), which both check."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalpkg.settings import PROJECT_ROOT, Settings
from evalpkg.sync import dbt
from evalpkg.sync.runner import SyncReport
from tests.dags.helpers import SyncDagRun, checkout_files, file_size
from tests.sync.helpers import content_fingerprint


@pytest.fixture(scope="package")
def dagbag(synced: SyncReport, generated: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # Package scope: Airflow reads its home once per process, so a second home would only be migrated
    # for nothing. The environment stays set to the package's end: test_real_deployment.py, which runs
    # last, sets its own AIRFLOW_HOME and EVALPKG_* values, and scripts/airflow's defaults equal the rest.
    home = tmp_path_factory.mktemp("airflow")
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__COSMOS__ENABLE_TELEMETRY": "False",
        "EVALPKG_STATE_DIR": str(generated.state_dir),
        "EVALPKG_PG_PORT": str(generated.pg_port),
        "EVALPKG_MLFLOW_PORT": str(generated.mlflow_port),
        "EVALPKG_TASKS_DIR": str(generated.tasks_dir),
        # Cosmos runs dbt in-process (dbtRunner) but looks for `dbt` on PATH first
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        subprocess.run(
            [str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
            check=True,
            capture_output=True,
            env=os.environ.copy(),
        )
        from airflow.dag_processing.dagbag import DagBag

        yield DagBag(dag_folder=str(PROJECT_ROOT / "dags"))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="package")
def ehr_deid_sync_run(dagbag: Any, generated: Settings) -> SyncDagRun:
    # One run for every test that checks it: each task runs for real, Cosmos' dozens of dbt tasks too.
    log = dbt.log_dir(generated) / "dbt.log"
    marts, checkout, log_size = content_fingerprint(generated), checkout_files(), file_size(log)
    run = dagbag.get_dag("ehr_deid_sync").test()
    return SyncDagRun(run, marts, content_fingerprint(generated), checkout, checkout_files(), log_size, file_size(log))
