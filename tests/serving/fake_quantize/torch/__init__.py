"""Stand-in torch: only what evalpkg.serving.quantize asks (is there a GPU?)."""

import os


class cuda:  # torch's name
    @staticmethod
    def is_available() -> bool:
        return os.environ.get("FAKE_CUDA") == "1"
