"""AWQ 4-bit quantization of a model directory for the GPU workers: llm-compressor's AWQ (the
maintained successor; vLLM serves its output as compressed-tensors), autoawq as the fallback the
design named (deprecated upstream). Calibrated on the benchmark's own prompts (the agent's system
prompt and the test set's questions, no patient data), so the scales fit the inputs the model will see.

The checkpoint is written to a hidden directory next to the output and renamed into place with its
manifest (source model and digest, recipe, calibration set and its hash): an output directory
exists whole or not at all. Everything before the model is loaded runs anywhere; the rest needs the
method's packages and a CUDA GPU, and says so in one line where they are missing."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from evalpkg.errors import ConfigError, ServiceError
from evalpkg.progress import Progress, quiet
from evalpkg.serving.identity import checkpoint_digest

QUANTIZE_FORMAT_VERSION = 1
MANIFEST = "quantize_manifest.json"
CALIBRATION = "calibration.jsonl"
Method = Literal["llm-compressor", "autoawq"]
METHODS: tuple[Method, ...] = ("llm-compressor", "autoawq")
PACKAGES: dict[Method, str] = {"llm-compressor": "llmcompressor", "autoawq": "awq"}
DEFAULT_SAMPLES = 256  # llm-compressor's AWQ examples start here
MAX_SEQUENCE_LENGTH = 2048  # the system prompt and a question fit
RECIPES: dict[Method, dict[str, Any]] = {
    # 4-bit weights in groups of 128 with zero points, 16-bit activations; the output head stays full
    "llm-compressor": {"modifier": "AWQModifier", "scheme": "W4A16_ASYM", "targets": ["Linear"], "ignore": ["lm_head"]},
    "autoawq": {"zero_point": True, "q_group_size": 128, "w_bit": 4, "version": "GEMM"},
}


class Calibration(BaseModel):
    source: str  # "testset v3: system prompt + question variants"
    samples: int
    sha256: str  # of calibration.jsonl, written beside the checkpoint
    max_sequence_length: int = MAX_SEQUENCE_LENGTH


class QuantizeManifest(BaseModel):
    format_version: int = QUANTIZE_FORMAT_VERSION
    source_model: str
    source_digest: str
    method: Method
    recipe: dict[str, Any]
    calibration: Calibration
    packages: dict[str, str] = {}
    output_digest: str = ""
    created_at: str = ""


def calibration_conversations(tasks_dir: Path, version: str | None, samples: int) -> tuple[str, list[Any]]:
    """`samples` conversations (system prompt, one question) spread evenly over the test set's tasks
    and variants, in a fixed order: the same release and count give the same set and hash."""
    from evalpkg.agent.loop import system_prompt
    from evalpkg.testset import release

    if samples < 1:
        raise ConfigError(f"--samples: {samples} is not a positive number")
    rel = release.load(tasks_dir, version)
    questions = [v.text for t in sorted(rel.tasks, key=lambda t: t.id) for v in t.variants]
    if samples > len(questions):
        raise ConfigError(f"--samples: {samples} is more than the {len(questions)} questions in test set {rel.version}")
    system = system_prompt()
    picked = [questions[i * len(questions) // samples] for i in range(samples)]
    conversations = [[{"role": "system", "content": system}, {"role": "user", "content": q}] for q in picked]
    return f"testset {rel.version}: system prompt + question variants", conversations


def calibration_jsonl(conversations: list[Any]) -> bytes:
    return "".join(json.dumps(c, ensure_ascii=False, sort_keys=True) + "\n" for c in conversations).encode()


def plan(
    model_dir: Path,
    output_dir: Path,
    method: Method,
    tasks_dir: Path,
    testset_version: str | None = None,
    samples: int = DEFAULT_SAMPLES,
) -> tuple[QuantizeManifest, list[Any]]:
    """Check the inputs and describe the checkpoint to be made; writes nothing."""
    if method not in METHODS:
        raise ConfigError(f"--method: {method!r} is not one of {', '.join(METHODS)}")
    if not (model_dir / "config.json").is_file():
        raise ConfigError(f"--model-path: {model_dir} is not a model directory (no config.json)")
    if output_dir.exists() and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise ConfigError(f"--output: {output_dir} exists and is not an empty directory")
    source, conversations = calibration_conversations(tasks_dir, testset_version, samples)
    manifest = QuantizeManifest(
        source_model=str(model_dir.resolve()),
        source_digest=checkpoint_digest(model_dir),
        method=method,
        recipe=RECIPES[method],
        calibration=Calibration(
            source=source,
            samples=len(conversations),
            sha256=hashlib.sha256(calibration_jsonl(conversations)).hexdigest(),
        ),
    )
    return manifest, conversations


def require_gpu(method: Method) -> dict[str, str]:
    """The versions of what the method needs, or a one-line error naming what is missing."""
    needed = [PACKAGES[method], "torch", "transformers"]
    if missing := [p for p in needed if importlib.util.find_spec(p) is None]:
        raise ConfigError(
            f"quantize --method {method} needs {', '.join(missing)} and a CUDA GPU: run it on a GPU worker "
            f"with `pip install '.[quantize]'` (the model_quantize DAG runs there)"
        )
    import torch

    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""
        raise ConfigError(f"quantize --method {method} needs a CUDA GPU; torch sees none{where}")
    return {p: _version(p) for p in needed}


def _version(module: str) -> str:
    dist = {"awq": "autoawq"}.get(module, module)
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def quantize(
    model_dir: Path,
    output_dir: Path,
    method: Method = "llm-compressor",
    *,
    tasks_dir: Path,
    testset_version: str | None = None,
    samples: int = DEFAULT_SAMPLES,
    progress: Progress = quiet,
) -> QuantizeManifest:
    manifest, conversations = plan(model_dir, output_dir, method, tasks_dir, testset_version, samples)
    packages = require_gpu(method)
    progress(
        f"quantizing {model_dir} with {method} on {samples} calibration conversations ({manifest.calibration.source})"
    )
    staging = output_dir.parent / f".{output_dir.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        (staging / CALIBRATION).write_bytes(calibration_jsonl(conversations))
        try:
            BACKENDS[method](model_dir, staging, conversations, manifest.recipe)
        except Exception as exc:  # the library's own error (out of GPU memory, unsupported architecture)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ServiceError(f"{method} failed on {model_dir}: {first}; nothing was written to {output_dir}") from exc
        done = manifest.model_copy(
            update={
                "packages": packages,
                "output_digest": checkpoint_digest(staging),
                "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            }
        )
        (staging / MANIFEST).write_text(done.model_dump_json(indent=2) + "\n")
        if output_dir.exists():
            output_dir.rmdir()  # empty, checked by plan()
        staging.rename(output_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return done


def _llm_compressor(model_dir: Path, out: Path, conversations: list[Any], recipe: dict[str, Any]) -> None:
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.awq import AWQModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype="auto")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    texts = [tokenizer.apply_chat_template(c, tokenize=False) for c in conversations]
    oneshot(
        model=model,
        processor=tokenizer,
        dataset=Dataset.from_dict({"text": texts}),
        recipe=[AWQModifier(**{k: v for k, v in recipe.items() if k != "modifier"})],
        max_seq_length=MAX_SEQUENCE_LENGTH,
        num_calibration_samples=len(texts),
    )
    model.save_pretrained(str(out), save_compressed=True)
    tokenizer.save_pretrained(str(out))


def _autoawq(model_dir: Path, out: Path, conversations: list[Any], recipe: dict[str, Any]) -> None:
    from awq import AutoAWQForCausalLM
    from transformers import AutoTokenizer

    model = AutoAWQForCausalLM.from_pretrained(str(model_dir))
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    texts = [tokenizer.apply_chat_template(c, tokenize=False) for c in conversations]
    model.quantize(tokenizer, quant_config=recipe, calib_data=texts, max_calib_seq_len=MAX_SEQUENCE_LENGTH)
    model.save_quantized(str(out))
    tokenizer.save_pretrained(str(out))


BACKENDS = {"llm-compressor": _llm_compressor, "autoawq": _autoawq}
