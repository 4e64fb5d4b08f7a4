"""The stand-in `vllm` (tests/serving/fake_vllm) put first on PATH, a model directory for it, and the
environment a CLI subprocess needs to reach the test cluster."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from evalpkg.settings import Settings

FAKE_VLLM = Path(__file__).with_name("fake_vllm")


def install(root: Path, model: str = "Qwen2.5-0.5B-Instruct") -> tuple[Path, Path]:
    """A `vllm` wrapper running the stand-in with this interpreter, and a model directory; returns both."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "vllm"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_VLLM}" "$@"\n')
    wrapper.chmod(0o755)
    model_dir = root / "models" / model
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"}))
    (model_dir / "model.safetensors").write_bytes(b"\0" * 1024)
    return bin_dir, model_dir


def path_with(bin_dir: Path) -> str:
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def cli_env(settings: Settings, bin_dir: Path, **extra: str) -> dict[str, str]:
    """os.environ without EVALPKG_* and FAKE_VLLM_*, then the test cluster's settings and the stand-in."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("EVALPKG_", "FAKE_VLLM_"))}
    return base | {
        "EVALPKG_STATE_DIR": str(settings.state_dir),
        "EVALPKG_PG_PORT": str(settings.pg_port),
        "EVALPKG_MLFLOW_PORT": str(settings.mlflow_port),
        "EVALPKG_TASKS_DIR": str(settings.tasks_dir),
        "PATH": path_with(bin_dir),
        **extra,
    }
