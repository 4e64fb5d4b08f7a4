"""The vLLM worker's lifecycle without a GPU, through the stand-in `vllm` (tests/serving/fake_vllm):
the command line, start and health, the served model's identity, a server that never becomes healthy,
one that dies before it is, one that ignores SIGTERM; and RunConfig's worker rules."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from evalpkg.errors import ServiceError
from evalpkg.grading.comparator import COMPARATOR_VERSION
from evalpkg.runconfig import (
    ADDED_FIELDS,
    CPU_MODEL_NAME,
    JUDGE_FIELDS,
    SCORING_FIELDS,
    TRACKING_FIELDS,
    RunConfig,
    served_name,
)
from evalpkg.serving.identity import served_identity
from evalpkg.serving.worker import running, spec_for, vllm_spec
from tests.serving.gold_replay import VERSION
from tests.serving.stand_in import install, path_with


@pytest.fixture
def model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in first on PATH; its model directory."""
    bin_dir, model = install(tmp_path)
    monkeypatch.setenv("PATH", path_with(bin_dir))
    for key in ("FAKE_VLLM_NEVER_HEALTHY", "FAKE_VLLM_CRASH_AFTER", "FAKE_VLLM_IGNORE_SIGTERM", "FAKE_VLLM_DELAY_S"):
        monkeypatch.delenv(key, raising=False)
    return model


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_vllm_command_batches_the_runs_concurrency_and_uses_the_familys_template(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    templates = tmp_path / "examples" / "templates"
    templates.mkdir(parents=True)
    (templates / "tool_chat_template_llama3.1_json.jinja").write_text("{{ messages }}")
    monkeypatch.setenv("EVALPKG_VLLM_TEMPLATES", str(tmp_path / "examples"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    config = RunConfig(worker="vllm", model_path="/models/Llama-3.1-8B-Instruct", concurrency=24)
    spec = spec_for(config)
    cmd = spec.command
    assert cmd[:3] == ["vllm", "serve", "/models/Llama-3.1-8B-Instruct"]
    assert cmd[cmd.index("--served-model-name") + 1] == config.model == "Llama-3.1-8B-Instruct"
    assert cmd[cmd.index("--tool-call-parser") + 1] == "llama3_json"
    assert cmd[cmd.index("--chat-template") + 1] == str(templates / "tool_chat_template_llama3.1_json.jinja")
    assert cmd[cmd.index("--max-num-seqs") + 1] == "24"  # as many sequences batched as dialogues in flight
    assert spec.env == {"CUDA_VISIBLE_DEVICES": "1"} and spec.health_path == "/health"
    capped = spec_for(config.model_copy(update={"max_in_flight": 8})).command
    assert capped[capped.index("--max-num-seqs") + 1] == "8"
    qwen = vllm_spec("Qwen/Qwen2.5-7B-Instruct").command  # its own template renders tools the hermes way
    assert "--chat-template" not in qwen and qwen[qwen.index("--tool-call-parser") + 1] == "hermes"


def test_run_config_worker_rules() -> None:
    vllm = RunConfig(worker="vllm", model_path="/hf/models--Qwen--Qwen2.5-7B-Instruct/snapshots/abc1234")
    assert (vllm.agent, vllm.model, vllm.endpoint) == ("openai", "Qwen2.5-7B-Instruct", None)
    assert RunConfig(worker="vllm", model_path="/m/ckpt", model="mine").model == "mine"  # the name it is served as
    cpu = RunConfig(worker="cpu")
    assert (cpu.agent, cpu.model, cpu.quantization) == ("openai", CPU_MODEL_NAME, "gguf-q4_1")
    assert served_name("Qwen/Qwen2.5-7B-Instruct/") == "Qwen2.5-7B-Instruct"
    for bad, says in (
        ({"worker": "vllm"}, "worker vllm needs model_path"),
        ({"worker": "cpu", "endpoint": "http://127.0.0.1:8000/v1"}, "worker cpu serves its own endpoint"),
        ({"worker": "vllm", "model_path": "m", "agent": "perturb:extra_calls"}, "not agent perturb:extra_calls"),
        ({"worker": "cpu", "model": "llama"}, "worker cpu serves smollm2"),
        ({"model_path": "/m"}, "model_path needs a worker"),
        ({"worker": "gpu"}, "Input should be 'none', 'cpu' or 'vllm'"),
    ):
        with pytest.raises(ValidationError, match=says):
            RunConfig.model_validate(bad)
    # a stored config reloads as itself, with its fingerprint
    again = RunConfig.model_validate(vllm.model_dump(mode="json"))
    assert again == vllm and again.fingerprint() == vllm.fingerprint()
    # the worker and its model are part of the fingerprint, the port it listens on is not
    assert vllm.fingerprint() != RunConfig(worker="vllm", model_path="/m/other").fingerprint()
    assert vllm.fingerprint() == vllm.model_copy(update={"endpoint": "http://127.0.0.1:41234/v1"}).fingerprint()


def test_fingerprints_of_runs_without_a_worker_did_not_change() -> None:
    """Old stored configs (no worker fields, no byte or token bounds) load, and their fingerprint is what it was."""
    config = RunConfig(name="old", agent="openai", endpoint="http://h/v1", model="m", repeats=3)
    stored = config.model_dump(mode="json", exclude=set(ADDED_FIELDS))
    before = {k: v for k, v in stored.items() if k not in ("name", "shards", "concurrency", "api_key")}
    before = {k: v for k, v in before.items() if k not in ("max_in_flight", "eval_db_pool", "results_db_pool")}
    added_outside = (*JUDGE_FIELDS, *SCORING_FIELDS, *TRACKING_FIELDS)  # added since, outside the fingerprint
    before = {k: v for k, v in before.items() if k not in added_outside}
    before["comparator_version"] = COMPARATOR_VERSION  # in every fingerprint: it decides what "correct" means
    old_code = hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:12]
    assert RunConfig.model_validate(stored).fingerprint() == old_code


def test_fingerprint_follows_the_comparator_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalpkg import runconfig as config_module

    before = RunConfig().fingerprint()
    monkeypatch.setattr(config_module, "COMPARATOR_VERSION", COMPARATOR_VERSION + 1)
    assert RunConfig().fingerprint() != before


def test_stand_in_starts_healthy_is_identified_and_always_stopped(model_dir: Path, tmp_path: Path) -> None:
    config = RunConfig(worker="vllm", model_path=str(model_dir), concurrency=3)
    spec = spec_for(config)
    with running(spec, tmp_path / "w.log", deadline_s=60, grace_s=5) as worker:
        assert worker.failure() is None and _listening(spec.port)
        identity = served_identity(worker, config)
        print(f"\nstand-in vLLM healthy after {worker.start_s:.2f}s")
    assert not _listening(spec.port) and worker.proc.returncode is not None
    assert identity["served_model"] == "Qwen2.5-0.5B-Instruct" and identity["model_path"] == str(model_dir)
    assert identity["server_version"] == f"vllm {VERSION}" and identity["quantization"] == "none"
    assert identity["model_digest"].startswith("sha256:") and identity["gpu"]
    (model_dir / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "awq"}}))
    assert served_identity(worker, config)["model_digest"] != identity["model_digest"]  # other weights, other id
    log = (tmp_path / "w.log").read_text()
    assert "--max-num-seqs 3" in log and "gold-replay stand-in" in log  # the log is kept


def test_a_server_that_never_becomes_healthy_fails_within_the_deadline_with_its_log(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_NEVER_HEALTHY", "1")
    spec = spec_for(RunConfig(worker="vllm", model_path=str(model_dir)))
    log = tmp_path / "never.log"
    t0 = time.monotonic()
    with pytest.raises(ServiceError) as failed, running(spec, log, deadline_s=4, grace_s=5):
        pass
    assert time.monotonic() - t0 < 4 + 5
    message = str(failed.value)
    assert message.startswith("vLLM worker not healthy after 4s; last lines of ") and str(log) in message
    assert "this stand-in never finishes" in message and "\n" not in message
    assert not _listening(spec.port)


def test_a_server_that_exits_while_starting_is_reported_with_its_log(model_dir: Path, tmp_path: Path) -> None:
    (model_dir / "config.json").unlink()
    spec = spec_for(RunConfig(worker="vllm", model_path=str(model_dir)))
    with (
        pytest.raises(
            ServiceError,
            match=r"vLLM worker exited with 1 before it was healthy; last lines of .*not a model directory",
        ),
        running(spec, tmp_path / "w.log", deadline_s=60),
    ):
        pass


def test_a_server_that_ignores_sigterm_is_killed_after_the_grace(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_VLLM_IGNORE_SIGTERM", "1")
    spec = spec_for(RunConfig(worker="vllm", model_path=str(model_dir)))
    # what stop() does, in order: each signal to the group and each wait, with when and how long
    steps: list[tuple[str, float, float | None]] = []
    killpg, wait = os.killpg, subprocess.Popen.wait

    def record_kill(pgid: int, sig: int) -> None:
        steps.append((signal.Signals(sig).name, time.monotonic(), None))
        killpg(pgid, sig)

    def record_wait(proc: subprocess.Popen[bytes], timeout: float | None = None) -> int:
        steps.append(("wait", time.monotonic(), timeout))
        return wait(proc, timeout)

    with running(spec, tmp_path / "w.log", deadline_s=60, grace_s=1.5) as worker:
        monkeypatch.setattr(os, "killpg", record_kill)
        monkeypatch.setattr(subprocess.Popen, "wait", record_wait)
    assert worker.proc.returncode == -9, worker.proc.returncode  # SIGKILL, once the grace was over
    # SIGTERM, then a wait bounded by the grace (ignored: it runs out), then SIGKILL and a wait that reaps it
    assert [(name, timeout) for name, _, timeout in steps] == [
        ("SIGTERM", None),
        ("wait", 1.5),
        ("SIGKILL", None),
        ("wait", 10),
    ], steps
    assert steps[2][1] - steps[0][1] > 1.4, steps  # the grace was given in full before the kill
    assert not _listening(spec.port)


def test_the_served_identity_goes_to_mlflow_as_params_and_tags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow

    from evalpkg.pipeline import tracking

    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")  # what log_run sets, undone after the test
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = RunConfig(worker="vllm", model_path="/models/Qwen2.5-7B-Instruct-AWQ", shards=2)
    identity = {
        "worker": "vllm",
        "model_path": config.model_path or "",
        "model_digest": "sha256:ab",
        "quantization": "awq",
    }
    identity |= {"server_version": "vllm 0.11.0", "gpu": "NVIDIA H200 x1", "host": "gpu-1"}
    config.served.update({0: identity, 1: identity | {"host": "gpu-2"}})
    table = {"overall": {"instances": 0.0, "accuracy": 0.0}}
    parent = tracking.log_run(uri, "vllm-run", config, "v2", "snap", table, [], {0: [], 1: []}, [], [])
    config.served[1] = identity | {"gpu": "NVIDIA A100 x1"}  # shard 1 retried on another machine
    assert tracking.log_run(uri, "vllm-run", config, "v2", "snap", table, [], {0: [], 1: []}, [], []) == parent
    client = mlflow.MlflowClient(uri)
    run = client.get_run(parent)
    assert run.data.params["served.model_digest"] == "sha256:ab" and run.data.params["served.quantization"] == "awq"
    assert run.data.params["served.gpu"] == "NVIDIA H200 x1"  # a param never changes ...
    assert run.data.tags["served.gpu"] == "NVIDIA A100 x1 | NVIDIA H200 x1"  # ... the tags show the latest
    assert "served.host" not in run.data.params and run.data.params["worker"] == "vllm"
    children = client.search_runs([run.info.experiment_id], f"tags.mlflow.parentRunId = '{parent}'")
    assert {c.data.tags["evalpkg.shard"]: c.data.tags["served.gpu"] for c in children} == {
        "0": "NVIDIA H200 x1",
        "1": "NVIDIA A100 x1",
    }
