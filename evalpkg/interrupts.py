"""Holding Ctrl-C over a commit: a change that is all-or-nothing (a schema swap, a release rename)
either happens whole and then reports the interrupt, or does not happen at all."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from evalpkg.errors import EvalpkgError

INTERRUPTED_EXIT = 130  # 128 + SIGINT, what shells report for Ctrl-C


class Interrupted(EvalpkgError):
    """Ctrl-C, as the CLI reports it: one line saying what state was kept, exit 130."""

    exit_code = INTERRUPTED_EXIT

    def __init__(self, detail: str = "") -> None:
        super().__init__(f"interrupted; {detail}" if detail else "interrupted")


@contextmanager
def held_interrupts(hold: Callable[[], bool] = lambda: True, message: str = "") -> Iterator[Callable[[], None]]:
    """SIGINT inside the block raises KeyboardInterrupt at once, unless ``hold()`` says the change is
    past its commit point: then it waits until the block is done and is raised as it exits, saying
    ``message`` (what did happen). Blocks nest: a held interrupt goes to the enclosing handler, which may hold it too.

    Every SIGINT is also remembered, because Python drops an exception raised inside a finalizer or
    ``__del__`` (thread pools in GX run some): the yielded ``raise_if_interrupted()`` raises such a
    lost Ctrl-C before a commit point, and the block raises it as it exits at the latest.
    Outside the main thread (signals only reach that one), or where SIGINT is ignored, the block runs
    as it is."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        yield lambda: None
        return
    received: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        received.append(signum)
        if not hold():
            raise KeyboardInterrupt

    def raise_if_interrupted() -> None:
        if received:
            raise KeyboardInterrupt

    def unraisable(info: Any) -> None:  # the lost KeyboardInterrupt is remembered: no traceback for it
        if not isinstance(info.exc_value, KeyboardInterrupt):
            previous_hook(info)

    previous, previous_hook = signal.signal(signal.SIGINT, handler), sys.unraisablehook
    sys.unraisablehook = unraisable
    try:
        yield raise_if_interrupted
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook
    if not received:
        return
    if callable(previous) and previous is not signal.default_int_handler:
        previous(signal.SIGINT, None)  # an enclosing block raises it now or holds it too
        return
    raise KeyboardInterrupt(message) if message and hold() else KeyboardInterrupt
