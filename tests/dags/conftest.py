"""Shared by test_dags.py and test_dbt_tasks.py: one migrated Airflow home and DagBag on the test
cluster. (ehr_deid_sync runs end to end once, under the real scheduler: test_real_deployment.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalpkg.settings import PROJECT_ROOT, Settings
from evalpkg.sync.runner import SyncReport


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
