"""How long-running work reports progress: a callable taking one line (the CLI prints it to stderr)."""

from __future__ import annotations

import sys
from collections.abc import Callable

Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """The default: say nothing."""


def to_stderr(message: str) -> None:
    """The CLI's: one line to stderr, at once (stdout stays the command's output)."""
    print(message, file=sys.stderr, flush=True)
