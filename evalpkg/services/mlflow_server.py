"""The embedded MLflow tracking server (SQLite backend, local artifact store)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from evalpkg.errors import ServiceError
from evalpkg.settings import Settings

START_DEADLINE_S = 90


def _root(settings: Settings) -> Path:
    return settings.state_dir / "mlflow"


def _pid_file(settings: Settings) -> Path:
    return _root(settings) / "server.pid"


def is_healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def start(settings: Settings) -> None:
    if is_healthy(settings.tracking_uri):
        return
    root = _root(settings)
    root.mkdir(parents=True, exist_ok=True)
    log = (root / "server.log").open("ab")
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen(
        [
            str(mlflow_bin),
            "server",
            "--backend-store-uri",
            f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(settings.mlflow_port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    _pid_file(settings).write_text(str(proc.pid))
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceError(f"MLflow server exited with {proc.returncode}; see {root / 'server.log'}")
        if is_healthy(settings.tracking_uri):
            return
        time.sleep(0.5)
    stop(settings)
    raise ServiceError(f"MLflow server not healthy after {START_DEADLINE_S}s; see {root / 'server.log'}")


def stop(settings: Settings) -> bool:
    pid_file = _pid_file(settings)
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text())
    pid_file.unlink()
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    for _ in range(50):
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    os.killpg(pid, signal.SIGKILL)
    return True
