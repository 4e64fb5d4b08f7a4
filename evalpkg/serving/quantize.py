"""AWQ 4-bit quantization of a model directory: autoawq (the design's choice, deprecated upstream)
or llm-compressor's AWQ (its maintained successor). Both need a GPU and their own packages."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal

from evalpkg.errors import ConfigError

Method = Literal["autoawq", "llm-compressor"]
AWQ_CONFIG = {"zero_point": True, "q_group_size": 128, "w_bit": 4, "version": "GEMM"}


def quantize(model_dir: Path, output_dir: Path, method: Method = "autoawq") -> Path:
    if not (model_dir / "config.json").is_file():
        raise ConfigError(f"{model_dir}: not a model directory (no config.json)")
    if output_dir.exists() and any(output_dir.iterdir()):
        raise ConfigError(f"{output_dir}: output directory is not empty")
    package = {"autoawq": "awq", "llm-compressor": "llmcompressor"}[method]
    if importlib.util.find_spec(package) is None:
        raise ConfigError(f"method {method} needs the {method} package (and a GPU); it is not installed here")
    if method == "autoawq":
        from awq import AutoAWQForCausalLM
        from transformers import AutoTokenizer

        model = AutoAWQForCausalLM.from_pretrained(str(model_dir))
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        model.quantize(tokenizer, quant_config=AWQ_CONFIG)
        model.save_quantized(str(output_dir))
        tokenizer.save_pretrained(str(output_dir))
    else:
        from llmcompressor import oneshot
        from llmcompressor.modifiers.awq import AWQModifier

        oneshot(
            model=str(model_dir),
            recipe=[AWQModifier(scheme="W4A16", targets=["Linear"], ignore=["lm_head"])],
            output_dir=str(output_dir),
        )
    return output_dir
