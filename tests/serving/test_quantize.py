"""`evalpkg quantize` as a user runs it (a real process), up to the point that needs a GPU: with the
stand-in torch/transformers/datasets/llmcompressor in tests/serving/fake_quantize first on the path,
the checkpoint and its manifest appear whole; without a GPU, or when the library fails, nothing does.
Cases without a model or packages are in tests/test_bad_input.py."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalpkg.agent.loop import system_prompt
from evalpkg.serving.identity import checkpoint_digest
from evalpkg.serving.quantize import CALIBRATION, MANIFEST, QuantizeManifest
from evalpkg.serving.worker import vllm_spec
from evalpkg.settings import PROJECT_ROOT

STAND_INS = Path(__file__).parent / "fake_quantize"


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "Qwen2.5-7B-Instruct"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"], "torch_dtype": "bfloat16"}))
    (path / "model.safetensors").write_bytes(b"16-bit weights")
    return path


def quantize(tmp_path: Path, *args: str, **env: str) -> tuple[int, str, list[str]]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("EVALPKG_")}
    proc = subprocess.run(
        [sys.executable, "-m", "evalpkg", "quantize", *args],
        env={
            **base,
            "EVALPKG_STATE_DIR": str(tmp_path / "state"),
            "EVALPKG_TASKS_DIR": str(PROJECT_ROOT / "tasks"),
            "PYTHONPATH": os.pathsep.join([str(STAND_INS), str(PROJECT_ROOT)]),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc.returncode, proc.stdout, [line for line in proc.stderr.splitlines() if line.strip()]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in ("Qwen2.5-7B-Instruct", "state"))


def test_a_checkpoint_appears_whole_with_its_manifest_and_calibration_set(tmp_path: Path, model: Path) -> None:
    out, log = tmp_path / "awq", tmp_path / "oneshot.json"
    code, _, stderr = quantize(
        tmp_path, "--model-path", str(model), "--output", str(out), "--samples", "64", "--testset", "v3",
        FAKE_CUDA="1", FAKE_QUANTIZE_LOG=str(log),
    )  # fmt: skip
    assert code == 0, stderr
    manifest = QuantizeManifest.model_validate_json((out / MANIFEST).read_text())
    called: dict[str, Any] = json.loads(log.read_text())

    assert manifest.method == "llm-compressor" and manifest.source_model == str(model.resolve())
    assert manifest.source_digest == checkpoint_digest(model)
    assert manifest.output_digest == checkpoint_digest(out) != manifest.source_digest
    assert manifest.calibration.samples == 64 and manifest.calibration.source.startswith("testset v3")
    assert manifest.calibration.sha256 == hashlib.sha256((out / CALIBRATION).read_bytes()).hexdigest()
    assert manifest.packages.keys() == {"llmcompressor", "torch", "transformers"} and manifest.created_at
    # what llm-compressor was handed: the recorded recipe, and the calibration set that was hashed
    assert called["recipe"] == [{**manifest.recipe, "modifier": "AWQModifier"}]
    assert called["recipe"][0]["scheme"] == "W4A16_ASYM" and called["recipe"][0]["ignore"] == ["lm_head"]
    assert called["num_calibration_samples"] == 64 == len(called["texts"])
    conversations = [json.loads(line) for line in (out / CALIBRATION).read_text().splitlines()]
    assert len({c[1]["content"] for c in conversations}) == 64  # 64 different questions, spread over the tasks
    assert all(
        c[0]["content"] == system_prompt() and system_prompt() in t
        for c, t in zip(conversations, called["texts"], strict=True)
    )
    assert leftovers(tmp_path) == ["awq", "oneshot.json"]  # no staging folder left
    # and the workers serve it with its own quantization
    command = vllm_spec(str(out)).command
    assert command[command.index("--quantization") + 1] == "compressed-tensors"
    assert stderr[-1].startswith(f"wrote {out} (sha256:")


def test_the_same_inputs_give_the_same_calibration_hash_and_other_inputs_another(tmp_path: Path, model: Path) -> None:
    hashes = []
    for extra in ((), (), ("--samples", "128"), ("--testset", "v2")):
        code, stdout, stderr = quantize(
            tmp_path, "--model-path", str(model), "--output", str(tmp_path / "q"), "--dry-run", *extra
        )
        assert code == 0, stderr
        hashes.append(QuantizeManifest.model_validate_json(stdout).calibration.sha256)
    assert hashes[0] == hashes[1]  # reproducible
    assert len(set(hashes[1:])) == 3  # fewer samples, or another release: another calibration set
    assert not (tmp_path / "q").exists()  # a dry run writes nothing


@pytest.mark.parametrize(
    ("reason", "env", "says"),
    [
        ("no GPU: torch sees none", {}, "needs a CUDA GPU; torch sees none (CUDA_VISIBLE_DEVICES=)"),
        ("the library fails half-way (out of GPU memory)", {"FAKE_CUDA": "1", "FAKE_QUANTIZE_FAIL": "1"},
         "llm-compressor failed on $model: CUDA out of memory. Tried to allocate 2.00 GiB; nothing was written"),
    ],
)  # fmt: skip
def test_a_failed_quantization_leaves_no_output_and_says_why_in_one_line(
    tmp_path: Path, model: Path, reason: str, env: dict[str, str], says: str
) -> None:
    code, _, stderr = quantize(
        tmp_path, "--model-path", str(model), "--output", str(tmp_path / "awq"), "--samples", "8",
        CUDA_VISIBLE_DEVICES="", **env,
    )  # fmt: skip
    errors = [line for line in stderr if line.startswith("evalpkg: error: ")]
    assert code == 1 and len(errors) == 1 and errors == stderr[-1:], (reason, stderr)
    assert says.replace("$model", str(model)) in errors[0], reason
    assert leftovers(tmp_path) == [], reason  # neither the output nor its staging folder
