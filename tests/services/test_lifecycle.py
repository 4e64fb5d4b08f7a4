"""The embedded services as a new user meets them through the command line: real subprocesses, up, status and
down, one-line errors, exit codes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port, make_state_dir

EVALPKG = [sys.executable, "-m", "evalpkg"]


def run(env: dict[str, str], *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EVALPKG, *args], env=env, capture_output=True, text=True, timeout=timeout, check=False)


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("evalpkg: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def cli_env() -> Iterator[dict[str, str]]:
    state = make_state_dir()
    env = {
        **os.environ,
        "EVALPKG_STATE_DIR": str(state),
        "EVALPKG_PG_PORT": str(free_port()),
        "EVALPKG_MLFLOW_PORT": str(free_port()),
    }
    env.pop("EVALPKG_PG_URL", None)
    env.pop("EVALPKG_MLFLOW_URI", None)
    try:
        yield env
    finally:
        run(env, "down")
        shutil.rmtree(state, ignore_errors=True)


def test_unknown_option_is_one_line_and_exit_2(cli_env: dict[str, str]) -> None:
    proc = run(cli_env, "prod", "generate", "--patiens", "10")
    assert proc.returncode == 2
    assert "--patiens" in one_line_error(proc)


def test_patient_count_out_of_range(cli_env: dict[str, str]) -> None:
    proc = run(cli_env, "prod", "generate", "--patients", "50")
    assert proc.returncode == 2
    assert "50" in one_line_error(proc)


def test_unreachable_database_url(cli_env: dict[str, str]) -> None:
    env = {**cli_env, "EVALPKG_PG_URL": "postgresql://nobody@127.0.0.1:9/nowhere"}
    proc = run(env, "sync")
    assert proc.returncode == 1
    assert "cannot connect to postgresql://nobody@127.0.0.1:9/" in one_line_error(proc)


def test_status_of_stopped_services_exits_non_zero(cli_env: dict[str, str]) -> None:
    proc = run(cli_env, "status")
    assert proc.returncode == 3
    assert "postgresql  down" in proc.stdout


def test_lifecycle_up_sync_before_generate_generate_sync_down(cli_env: dict[str, str]) -> None:
    assert run(cli_env, "up").returncode == 0
    status = run(cli_env, "status")
    assert status.returncode == 0, status.stdout
    assert "postgresql  up" in status.stdout and "mlflow      up" in status.stdout

    early = run(cli_env, "sync")
    assert early.returncode == 1
    assert "run `evalpkg prod generate` first" in one_line_error(early)

    url = run(cli_env, "db-url", "eval").stdout.strip()
    assert url == f"postgresql://postgres@127.0.0.1:{cli_env['EVALPKG_PG_PORT']}/ehr_eval"
    agent_url = run(cli_env, "db-url", "agent").stdout.strip()
    assert agent_url.startswith("postgresql://evalpkg_agent@")

    gen = run(cli_env, "prod", "generate", "--patients", "120", "--seed", "5")
    assert gen.returncode == 0, gen.stderr
    synced = run(cli_env, "sync")
    assert synced.returncode == 0, synced.stderr[-2000:]
    assert "GX suite eval_db:" in synced.stderr and "expectations passed" in synced.stderr
    psql = shutil.which("psql")
    if psql:  # the printed URL is what users paste into psql
        out = subprocess.run(
            [psql, agent_url, "-Atc", "select count(*) > 0 from t_patient_info"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == "t"

    # production generated anew under the same "now": the incremental lab table must not keep the old world's
    # rows, whose update times the watermark has already passed (dbt's relationship and parity tests fail)
    again = run(cli_env, "prod", "generate", "--patients", "300", "--seed", "5")
    assert again.returncode == 0, again.stderr
    resynced = run(cli_env, "sync")
    assert resynced.returncode == 0, resynced.stderr[-2000:]

    assert run(cli_env, "down").returncode == 0
    after = run(cli_env, "status")
    assert after.returncode == 3
    assert not (Path(cli_env["EVALPKG_STATE_DIR"]) / "pg" / "data" / "postmaster.pid").exists()


pytestmark = pytest.mark.server  # starts the CLI's own services: not in --quick
