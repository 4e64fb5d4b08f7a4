"""Issue 13's resume, the way Airflow runs it: a run planned from DAG params with a vLLM worker
(orchestration.eval_plan, the stand-in `vllm`), one shard's process SIGKILLed mid-way (its worker
does not outlive it), then resumed from the command line with `evalpkg run-shard RUN --shard N`,
the other shard run as the DAG task does: every instance recorded exactly once, no model errors."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalpkg import orchestration
from evalpkg.pipeline import store
from evalpkg.pipeline.run import score_run
from evalpkg.settings import Settings
from evalpkg.sync.runner import SyncReport
from tests.serving.stand_in import cli_env, install


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _worker_ports(log: Path) -> list[int]:
    return [int(line.split("--port ")[1].split()[0]) for line in log.read_text().splitlines() if line.startswith("===")]


def test_a_killed_shard_resumes_from_the_cli_recording_each_instance_once(
    synced: SyncReport, generated: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, model_dir = install(tmp_path)
    env = cli_env(generated, bin_dir)
    for key, value in env.items():  # orchestration reads its settings from the environment, as in a DAG task
        if key.startswith("EVALPKG_") or key == "PATH":
            monkeypatch.setenv(key, value)
    params = {
        "name": "resume",
        "worker": "vllm",
        "model_path": str(model_dir),
        "limit": 10,
        "complexities": ["plain"],
        "shards": 2,
    }
    params |= {"concurrency": 2, "endpoint": None, "testset_version": None}  # as the form sends them
    run_id = orchestration.eval_plan(params)
    config, _, _, instances = store.load_run(generated, run_id)
    assert (config.worker, config.agent, config.endpoint) == ("vllm", "openai", None)
    shard1 = {i.instance_id for i in instances if i.shard == 1}
    assert 4 <= len(shard1) < len(instances)

    slow = env | {"FAKE_VLLM_DELAY_S": "0.3"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "evalpkg", "run-shard", run_id, "--shard", "1"],
        env=slow,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 240
    while len(store.recorded_ids(generated, run_id, 1)) < 2:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        assert time.monotonic() < deadline, "the shard recorded nothing"
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)  # the task's process dies, as a lost Airflow worker's would
    proc.wait(timeout=30)
    killed = store.recorded_ids(generated, run_id, 1)
    assert 2 <= len(killed) < len(shard1), len(killed)
    log = store.run_dir(generated, run_id) / "worker-1.log"
    (port,) = _worker_ports(log)
    gone = time.monotonic() + 30
    while _listening(port):  # its server got SIGTERM when the shard's process died
        assert time.monotonic() < gone, "the killed shard's worker is still serving"
        time.sleep(0.2)

    resumed = subprocess.run(
        [sys.executable, "-m", "evalpkg", "run-shard", run_id, "--shard", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{len(shard1) - len(killed)} recorded, {len(killed)} recorded before" in resumed.stderr, resumed.stderr
    assert "shard 1: vllm worker up in" in resumed.stderr
    print(f"\n{resumed.stderr.strip()}")
    assert orchestration.eval_shard(run_id, 0)["recorded"] == len(instances) - len(shard1)  # the DAG task's way

    every = store.trajectories(generated, run_id)
    ids = [t.instance_id for t in every]
    assert len(ids) == len(set(ids)) == len(instances) and set(ids) == {i.instance_id for i in instances}
    assert not [t.instance_id for t in every if t.stop_reason == "model_error"]
    assert score_run(generated, run_id, save=False).table["overall"]["accuracy"] == 1.0
    assert len(_worker_ports(log)) == 2  # the killed attempt and the resume, in one log


def test_a_killed_cpu_worker_shard_resumes_from_the_cli(
    synced: SyncReport, generated: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same with the packaged CPU model (llama.cpp): the run stores no endpoint, so run-shard
    starts the worker itself, and nothing is recorded as a model error."""
    env = cli_env(generated, install(tmp_path)[0])
    for key, value in env.items():
        if key.startswith("EVALPKG_"):
            monkeypatch.setenv(key, value)
    params = {"name": "resume-cpu", "worker": "cpu", "limit": 3, "languages": ["zh"], "complexities": ["plain"]}
    run_id = orchestration.eval_plan(params | {"max_steps": 3, "concurrency": 1, "endpoint": None})
    config, _, _, instances = store.load_run(generated, run_id)
    assert (config.worker, config.agent, config.endpoint) == ("cpu", "openai", None)
    command = [sys.executable, "-m", "evalpkg", "run-shard", run_id, "--shard", "0"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while not store.recorded_ids(generated, run_id, 0):
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        assert time.monotonic() < deadline, "the CPU shard recorded nothing"
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    killed = store.recorded_ids(generated, run_id, 0)
    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{len(instances) - len(killed)} recorded, {len(killed)} recorded before" in resumed.stderr
    every = store.trajectories(generated, run_id)
    assert sorted(t.instance_id for t in every) == sorted(i.instance_id for i in instances)
    assert not [t.instance_id for t in every if t.stop_reason == "model_error"]
