"""Real shards through the stand-in `vllm` (gold replay): `evalpkg run --worker vllm --model-path DIR`
scores 100% with each shard starting and stopping its own server; a server that dies mid-shard makes
the shard raise without recording what it did not finish, and a re-run records those once each."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalpkg.errors import ServiceError
from evalpkg.pipeline import store
from evalpkg.pipeline.execute import execute_shard
from evalpkg.pipeline.run import plan_run, score_run
from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings
from evalpkg.sync.runner import SyncReport
from tests.serving.stand_in import cli_env, install, path_with


def test_evalpkg_run_with_a_vllm_worker_scores_100_percent(
    synced: SyncReport, generated: Settings, tmp_path: Path
) -> None:
    bin_dir, model_dir = install(tmp_path)
    command = [sys.executable, "-m", "evalpkg", "run", "--worker", "vllm", "--model-path", str(model_dir)]
    command += [
        "--name",
        "vllm-standin",
        "--complexity",
        "plain",
        "--limit",
        "12",
        "--shards",
        "2",
        "--concurrency",
        "4",
        "--no-track",
        "--no-reference-worlds",  # the workers are tested here; semantic accuracy in tests/pipeline/test_pipeline.py
    ]
    t0 = time.monotonic()
    done = subprocess.run(command, env=cli_env(generated, bin_dir), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"\n{done.stderr.strip().splitlines()[-1]} ({time.monotonic() - t0:.1f}s)")
    assert re.search(r"accuracy 100\.0% \(95% CI [\d.]+%-100\.0%\) over 24 instances", done.stderr), done.stderr
    starts = re.findall(
        r"shard (\d): vllm worker up in ([\d.]+)s \(model_path (\S+), .*server_version vllm", done.stderr
    )
    assert [(s, p) for s, _, p in starts] == [("0", str(model_dir)), ("1", str(model_dir))], done.stderr
    run_id = re.search(r"run (\S+): planned", done.stderr).group(1)  # type: ignore[union-attr]
    config, *_ = store.load_run(generated, run_id)
    assert (config.worker, config.agent, config.model, config.endpoint) == (
        "vllm",
        "openai",
        "Qwen2.5-0.5B-Instruct",
        None,
    )
    assert set(config.served) == {0, 1} and config.served[0]["model_digest"] == config.served[1]["model_digest"]
    for shard in (0, 1):
        log = (store.run_dir(generated, run_id) / f"worker-{shard}.log").read_text()
        assert "--max-num-seqs 4" in log and "--tool-call-parser hermes" in log
    assert all(t.agent == "openai" for t in store.trajectories(generated, run_id))


def test_a_worker_that_dies_mid_shard_fails_it_and_a_rerun_records_the_rest_once(
    synced: SyncReport, generated: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, model_dir = install(tmp_path)
    monkeypatch.setenv("PATH", path_with(bin_dir))
    monkeypatch.setenv("FAKE_VLLM_CRASH_AFTER", "25")  # a few dialogues' worth of chat requests
    config = RunConfig(
        name="vllm-crash",
        worker="vllm",
        model_path=str(model_dir),
        limit=10,
        complexities=["plain"],
        concurrency=3,
        reference_worlds=False,
    )
    run_id = plan_run(generated, config)
    with pytest.raises(ServiceError) as failed:
        execute_shard(generated, run_id, 0)
    log = store.run_dir(generated, run_id) / "worker-0.log"
    message = str(failed.value)
    assert message.startswith(f"vLLM worker exited with 1 while serving; last lines of {log}: "), message
    assert message.endswith("illegal memory access was encountered"), message
    first = store.trajectories(generated, run_id)
    assert 0 < len(first) < 20  # what finished before the crash, nothing after
    assert not [t.instance_id for t in first if t.stop_reason == "model_error"]

    monkeypatch.delenv("FAKE_VLLM_CRASH_AFTER")
    report = execute_shard(generated, run_id, 0)  # the retry: a fresh worker, only the missing instances
    assert (report.skipped, report.recorded, report.planned) == (len(first), 20 - len(first), 20)
    every = store.trajectories(generated, run_id)
    assert sorted(t.instance_id for t in every) == sorted({t.instance_id for t in every}) and len(every) == 20
    assert {t.instance_id: t.digest() for t in every if t.instance_id in {f.instance_id for f in first}} == {
        t.instance_id: t.digest() for t in first
    }  # the first attempt's trajectories are kept as they were
    assert all(t.stop_reason != "model_error" for t in every)
    assert score_run(generated, run_id, save=False).table["overall"]["accuracy"] == 1.0
    assert log.read_text().count("=== ") == 2  # one log, both attempts


def test_a_worker_busy_generating_is_alive_and_the_shard_records_every_instance(
    synced: SyncReport, generated: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One chat request takes 20 s and no health route answers meanwhile (llama.cpp generating a long
    answer): the dialogue that gave up on it is that instance's model error, the probes wait the
    server out, and the shard records every instance."""
    bin_dir, model_dir = install(tmp_path)
    monkeypatch.setenv("PATH", path_with(bin_dir))
    monkeypatch.setenv("FAKE_VLLM_STALL_AFTER", "6")
    monkeypatch.setenv("FAKE_VLLM_STALL_S", "20")
    config = RunConfig(
        name="vllm-busy",
        worker="vllm",
        model_path=str(model_dir),
        limit=4,
        complexities=["plain"],
        languages=["zh"],
        concurrency=2,
        instance_timeout_s=5,
    )
    run_id = plan_run(generated, config)
    t0 = time.monotonic()
    report = execute_shard(generated, run_id, 0)
    took = time.monotonic() - t0
    assert (report.recorded, report.planned) == (4, 4)
    every = store.trajectories(generated, run_id)
    (gave_up,) = [t for t in every if t.stop_reason == "model_error"]
    assert "Timeout" in (gave_up.steps[-1].parse_error or "")  # the call ended by the dialogue's deadline
    assert all(t.stop_reason == "final_answer" for t in every if t is not gave_up)
    log = (store.run_dir(generated, run_id) / "worker-0.log").read_text()
    assert "health probe 1 failed: /health no answer within 2s" in log
    assert re.search(r"health probe \d+ answered after (1\d|2\d)s", log), log  # the 20 s stall, waited out
    assert took < 60
