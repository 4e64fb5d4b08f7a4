"""Model workers: the vLLM command line, health-check failures, and the real llama.cpp CPU server."""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import pytest

from evalpkg.errors import ConfigError, ServiceError
from evalpkg.serving.worker import WorkerSpec, llamacpp_spec, running, vllm_spec


def test_vllm_command_for_an_awq_checkpoint(tmp_path: Path) -> None:
    model = tmp_path / "Qwen2.5-7B-Instruct-AWQ"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"quantization_config": {"quant_method": "awq", "bits": 4}}))
    spec = vllm_spec(str(model), port=8001, max_model_len=4096, gpu_memory_utilization=0.85)
    cmd = spec.command
    assert cmd[:3] == ["vllm", "serve", str(model)]
    assert cmd[cmd.index("--quantization") + 1] == "awq_marlin"
    assert "--enable-auto-tool-choice" in cmd and cmd[cmd.index("--tool-call-parser") + 1] == "hermes"
    assert cmd[cmd.index("--max-model-len") + 1] == "4096" and cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.85"
    assert spec.served_model == "Qwen2.5-7B-Instruct-AWQ" and spec.base_url == "http://127.0.0.1:8001/v1"


def test_vllm_parser_by_family_and_unquantized_checkpoints(tmp_path: Path) -> None:
    cmd = vllm_spec("meta-llama/Llama-3.1-8B-Instruct", port=8002).command
    assert cmd[cmd.index("--tool-call-parser") + 1] == "llama3_json" and "--quantization" not in cmd
    with pytest.raises(ConfigError, match="gpu_memory_utilization"):
        vllm_spec("x", gpu_memory_utilization=1.5)


def _free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_a_server_that_never_becomes_healthy_is_reported_and_killed(tmp_path: Path) -> None:
    spec = WorkerSpec([sys.executable, "-c", "import time; print('loading...', flush=True); time.sleep(60)"], 9, "m")
    t0 = time.monotonic()
    with (
        pytest.raises(ServiceError, match=r"not healthy after 2s; last lines of .*w\.log: .* \| loading\.\.\.$"),
        running(spec, tmp_path / "w.log", deadline_s=2),
    ):
        pass
    assert time.monotonic() - t0 < 30


def test_a_server_that_exits_is_reported(tmp_path: Path) -> None:
    spec = WorkerSpec([sys.executable, "-c", "import sys; print('CUDA out of memory'); sys.exit(3)"], 9, "m")
    with (
        pytest.raises(
            ServiceError, match=r"exited with 3 before it was healthy; last lines of .* \| CUDA out of memory$"
        ),
        running(spec, tmp_path / "w.log"),
    ):
        pass


@pytest.mark.server  # a real model server
def test_real_llamacpp_server_starts_answers_with_tool_calls_and_stops(tmp_path: Path) -> None:
    from openai import OpenAI

    spec = llamacpp_spec(n_ctx=4096, threads=2)
    with running(spec, tmp_path / "cpu.log", deadline_s=180) as w:
        client = OpenAI(base_url=w.base_url, api_key="EMPTY")
        response = client.chat.completions.create(
            model=w.served_model,
            temperature=0,
            max_tokens=64,
            messages=[{"role": "user", "content": "How many patients are there? Use the tool."}],
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "execute_sql",
                        "description": "run SQL",
                        "parameters": {
                            "type": "object",
                            "properties": {"sql": {"type": "string"}},
                            "required": ["sql"],
                        },
                    },
                }
            ],
            tool_choice="auto",
        )
        message = response.choices[0].message
        assert message.tool_calls or message.content  # a real model answered, one way or the other
    assert _free(spec.port)


def test_cpu_worker_runs_through_the_pipeline(synced: object, generated: object) -> None:
    """A run planned with worker cpu: the shard starts the llama.cpp server itself and always stops it."""
    from evalpkg.pipeline import store
    from evalpkg.pipeline.execute import execute_shard
    from evalpkg.pipeline.run import plan_run, score_run
    from evalpkg.runconfig import RunConfig
    from evalpkg.settings import Settings

    assert isinstance(generated, Settings)
    config = RunConfig(
        name="cpu", worker="cpu", limit=1, languages=["zh"], complexities=["plain"], max_steps=3, concurrency=1
    )
    run_id = plan_run(generated, config)
    report = execute_shard(generated, run_id, 0)
    print(f"\nllama.cpp worker healthy after {report.worker_start_s:.1f}s; shard {report.seconds:.1f}s")
    assert report.served is not None and report.served["quantization"] == "gguf-q4_1"
    assert report.served["model_digest"].startswith("sha256:") and "llama-cpp-python" in report.served["server_version"]
    assert store.load_run(generated, run_id)[0].served == {0: report.served}  # recorded on the run
    log = store.run_dir(generated, run_id) / "worker-0.log"
    port = int(log.read_text().split("--port ")[1].split()[0])
    assert _free(port)  # stopped
    (traj,) = store.trajectories(generated, run_id)
    assert traj.stop_reason != "model_error", traj.steps[-1].parse_error
    assert len(traj.steps) >= 2 and traj.tool_calls() and traj.agent == "openai"
    assert traj.steps[0].prompt_tokens > 0  # a real model, with real usage counts
    scored = score_run(generated, run_id)
    assert len(scored.scores) == 1 and scored.validation.success


ROOT = Path(__file__).resolve().parents[2]


def demo_command(run_name: str) -> str:
    """The `evalpkg run` command scripts/demo runs for one of its stages, as it is written there."""
    lines = (ROOT / "scripts" / "demo").read_text().replace("\\\n", " ").splitlines()
    (command,) = [line.strip() for line in lines if f"--name {run_name} " in line]
    return command


def test_the_demo_cpu_model_stage_completes(synced: object, generated: object, tmp_path: Path) -> None:
    """scripts/demo's CPU stage, its exact command (the packaged model, its limits), on the test cluster."""
    import os
    import subprocess

    from evalpkg.pipeline import store
    from evalpkg.settings import Settings

    assert isinstance(generated, Settings)
    command = demo_command("demo-cpu")
    assert command.startswith(".venv/bin/evalpkg run ") and "--worker cpu" in command, command
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALPKG_")} | {
        "EVALPKG_STATE_DIR": str(generated.state_dir),
        "EVALPKG_PG_PORT": str(generated.pg_port),
        "EVALPKG_TASKS_DIR": str(generated.tasks_dir),
        "EVALPKG_MLFLOW_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
    }
    t0 = time.monotonic()
    # run from the test's own directory (an MLflow SQLite store keeps artifacts under ./mlruns), the
    # checkout's evalpkg by its full path
    command = command.replace(".venv/bin/evalpkg", str(ROOT / ".venv" / "bin" / "evalpkg"), 1)
    proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    print(f"\ndemo CPU stage: {time.monotonic() - t0:.0f}s\n{proc.stderr[-600:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = Path(proc.stdout.split("report: ")[1].strip()).parent.name
    config, _, _, instances = store.load_run(generated, run_id)
    assert config.worker == "cpu" and config.max_tokens == 256 and len(instances) == 3
    every = store.trajectories(generated, run_id)
    assert len(every) == 3 and not [t for t in every if t.stop_reason == "model_error"]
    assert all(s.completion_tokens <= 3 * 256 for t in every for s in t.steps)  # each call within its bound


@pytest.mark.parametrize(
    ("load", "threads", "why"),
    [
        (0.1, 2, "a quiet machine: every core"),
        (1.2, 1, "one core busy with other work"),
        (6.0, 1, "all busy: still one thread"),
    ],
)
def test_llamacpp_threads_leave_busy_cores_alone(
    monkeypatch: pytest.MonkeyPatch, load: float, threads: int, why: str
) -> None:
    import os

    from evalpkg.serving import worker

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load))
    command = worker.llamacpp_spec(model_path=Path("m.gguf"), port=9).command
    assert command[command.index("--n_threads") + 1] == str(threads), why
