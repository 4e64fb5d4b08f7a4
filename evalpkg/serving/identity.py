"""What a worker served, recorded on the run so that two runs' models can be told apart: the model's
path and a digest of its files (config and weights index, or the GGUF), its revision where the path
names one, its quantization, the server's version and the GPU it ran on."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from evalpkg.runconfig import RunConfig

if TYPE_CHECKING:
    from evalpkg.serving.worker import Worker

CHECKPOINT_FILES = ("config.json", "model.safetensors.index.json", "pytorch_model.bin.index.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")
FULL_HASH_LIMIT = 1 << 30  # larger single files: size plus their first and last 16 MiB
SAMPLE = 16 << 20
SNAPSHOT_RE = re.compile(r"/snapshots/([0-9a-f]{7,64})(?:/|$)")


def file_digest(path: Path) -> str:
    size = path.stat().st_size
    h = hashlib.sha256()
    with path.open("rb") as f:
        if size <= FULL_HASH_LIMIT:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
            return f"sha256:{h.hexdigest()}"
        h.update(str(size).encode())
        h.update(f.read(SAMPLE))
        f.seek(size - SAMPLE)
        h.update(f.read(SAMPLE))
    return f"sha256-sampled:{h.hexdigest()}"


def checkpoint_digest(model_dir: Path) -> str:
    """The checkpoint's config and weights index (their bytes) and its weight files (names and sizes):
    what changes whenever the weights do, without reading gigabytes."""
    h = hashlib.sha256()
    for name in CHECKPOINT_FILES:
        if (model_dir / name).is_file():
            h.update(name.encode() + b"\0" + (model_dir / name).read_bytes())
    for p in sorted(model_dir.rglob("*")):
        if p.is_file() and p.suffix in WEIGHT_SUFFIXES:
            h.update(f"{p.relative_to(model_dir)}\0{p.stat().st_size}\n".encode())
    return f"sha256:{h.hexdigest()}"


def _run(command: list[str], timeout: float = 60) -> str:
    if shutil.which(command[0]) is None:
        return ""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def gpu_names() -> str:
    """The GPUs this machine shows the server (nvidia-smi), e.g. 'NVIDIA H200 x1'; '' without one."""
    names = [n.strip() for n in _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], 20).splitlines()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and all(v.strip().isdigit() for v in visible.split(",") if v.strip()):
        wanted = {int(v) for v in visible.split(",") if v.strip()}
        names = [n for i, n in enumerate(names) if i in wanted]
    names = [n for n in names if n]
    return ", ".join(f"{n} x{names.count(n)}" for n in dict.fromkeys(names))


def vllm_version(worker: Worker) -> str:
    """From the running server's /version, else from `vllm --version`."""
    from evalpkg.serving.worker import _get

    body = _get(worker.spec.root_url + "/version")
    if body:
        try:
            return str(json.loads(body).get("version", "")) or body.strip()
        except (json.JSONDecodeError, AttributeError):
            return body.strip()[:100]
    lines = _run(["vllm", "--version"]).splitlines()
    return lines[-1].strip() if lines else ""


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ""


def served_identity(worker: Worker, config: RunConfig) -> dict[str, str]:
    from evalpkg.serving.worker import checkpoint_quantization, smollm2_gguf

    out = {"worker": config.worker, "served_model": worker.served_model, "host": socket.gethostname()}
    if config.worker == "cpu":
        gguf = Path(config.model_path) if config.model_path else smollm2_gguf()
        quant = re.search(r"(?i)\b(q\d(?:_[a-z0-9]+)*|f16|bf16|f32)\.gguf$", gguf.name)
        out |= {
            "model_path": str(gguf),
            "model_digest": file_digest(gguf),
            "quantization": f"gguf-{quant.group(1).lower()}" if quant else "gguf",
            "server_version": f"llama-cpp-python {_package_version('llama_cpp_python')}".strip(),
        }
    else:
        path = config.model_path or ""
        local = Path(path).expanduser()
        out["model_path"] = path
        if local.is_dir():
            out["model_digest"] = checkpoint_digest(local)
            out["quantization"] = checkpoint_quantization(local) or "none"
        if revision := SNAPSHOT_RE.search(str(local.resolve()) if local.exists() else path):
            out["revision"] = revision.group(1)
        out["server_version"] = f"vllm {vllm_version(worker)}".strip()
    out["gpu"] = gpu_names() or "none"
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        out["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return out
