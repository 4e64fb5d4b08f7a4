"""Stand-in llmcompressor.oneshot: checks its arguments, records them, marks the model quantized."""

import json
import os
from pathlib import Path
from typing import Any


def oneshot(*, model: Any, processor: Any, dataset: Any, recipe: list[Any], max_seq_length: int,
            num_calibration_samples: int) -> None:  # fmt: skip
    texts = dataset.columns["text"]
    assert len(texts) == num_calibration_samples and all(isinstance(t, str) and t for t in texts)
    if log := os.environ.get("FAKE_QUANTIZE_LOG"):
        Path(log).write_text(
            json.dumps(
                {
                    "recipe": [{"modifier": type(m).__name__, **m.kwargs} for m in recipe],
                    "max_seq_length": max_seq_length,
                    "num_calibration_samples": num_calibration_samples,
                    "texts": texts,
                }
            )
        )
    if os.environ.get("FAKE_QUANTIZE_FAIL") == "1":
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\n(stand-in)")
    model.quantized = {"scheme": recipe[0].kwargs["scheme"]}
