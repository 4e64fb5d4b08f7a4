"""How long-running work reports progress: a callable taking one line (the CLI prints it to stderr)."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """The default: say nothing."""
