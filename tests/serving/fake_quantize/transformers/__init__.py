"""Stand-in transformers: a tokenizer with a chat template and a model that saves a checkpoint shaped
like llm-compressor's output (config.json with a compressed-tensors quantization_config, weights)."""

import json
from pathlib import Path
from typing import Any


class AutoTokenizer:
    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def from_pretrained(cls, path: str) -> "AutoTokenizer":
        return cls(path)

    def apply_chat_template(self, messages: list[dict[str, str]], tokenize: bool = True) -> str:
        assert tokenize is False
        return "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages)

    def save_pretrained(self, out: str) -> None:
        (Path(out) / "tokenizer_config.json").write_text('{"chat_template": "stand-in"}')


class AutoModelForCausalLM:
    def __init__(self, path: str) -> None:
        self.config = json.loads((Path(path) / "config.json").read_text())
        self.quantized: dict[str, Any] | None = None

    @classmethod
    def from_pretrained(cls, path: str, torch_dtype: str = "auto") -> "AutoModelForCausalLM":
        return cls(path)

    def save_pretrained(self, out: str, save_compressed: bool = False) -> None:
        assert save_compressed and self.quantized is not None, "saved before oneshot quantized it"
        config = {**self.config, "quantization_config": {"quant_method": "compressed-tensors", **self.quantized}}
        (Path(out) / "config.json").write_text(json.dumps(config))
        (Path(out) / "model.safetensors").write_bytes(b"stand-in 4-bit weights")
