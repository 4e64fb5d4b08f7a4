"""Holding Ctrl-C over a commit: a change that is all-or-nothing (a schema swap, a release rename)
either happens whole and then reports the interrupt, or does not happen at all."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from evalpkg.errors import EvalpkgError

INTERRUPTED_EXIT = 130  # 128 + SIGINT, what shells report for Ctrl-C


class Interrupted(EvalpkgError):
    """Ctrl-C, as the CLI reports it: one line saying what state was kept, exit 130."""

    exit_code = INTERRUPTED_EXIT

    def __init__(self, detail: str = "") -> None:
        super().__init__(f"interrupted; {detail}" if detail else "interrupted")


@contextmanager
def held_interrupts(hold: Callable[[], bool] = lambda: True, message: str = "") -> Iterator[None]:
    """SIGINT inside the block raises KeyboardInterrupt at once, unless ``hold()`` says the change is
    past its commit point: then it waits until the block is done and is raised as it exits, saying
    ``message`` (what did happen). Blocks nest: a held interrupt goes to the enclosing handler, which may hold it too.
    Outside the main thread (signals only reach that one), or where SIGINT is ignored, the block runs
    as it is."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        yield
        return
    pending: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if not hold():
            raise KeyboardInterrupt
        pending.append(signum)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if not pending:
        return
    if callable(previous) and previous is not signal.default_int_handler:
        previous(signal.SIGINT, None)  # an enclosing block raises it now or holds it too
        return
    raise KeyboardInterrupt(message) if message else KeyboardInterrupt
