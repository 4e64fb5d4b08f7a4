"""llama-cpp-python's OpenAI-compatible server (`python -m llama_cpp.server`) with every generation
bounded: its chatml-function-calling handler, which the CPU worker uses for tool calls, generates with
max_tokens=None whatever the request asked, so a rambling model writes until its context is full
(minutes on a CPU, while the server answers nothing else). Here no completion may exceed the bound
given in $EVALPKG_LLAMACPP_MAX_TOKENS, nor the request's own max_tokens where the handler passes it."""

from __future__ import annotations

import functools
import os
from typing import Any

MAX_TOKENS_ENV = "EVALPKG_LLAMACPP_MAX_TOKENS"


def bound_generations(limit: int) -> None:
    import llama_cpp

    unbounded = llama_cpp.Llama.create_completion

    @functools.wraps(unbounded)
    def create_completion(self: Any, *args: Any, **kwargs: Any) -> Any:
        asked = kwargs.get("max_tokens", 16)  # create_completion's own default
        kwargs["max_tokens"] = limit if asked is None or asked <= 0 else min(asked, limit)
        return unbounded(self, *args, **kwargs)

    llama_cpp.Llama.create_completion = create_completion  # type: ignore[method-assign]


def main() -> None:
    from llama_cpp.server.__main__ import main as serve

    bound_generations(int(os.environ[MAX_TOKENS_ENV]))
    serve()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
