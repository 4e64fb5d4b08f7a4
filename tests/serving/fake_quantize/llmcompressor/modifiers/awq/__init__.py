"""Stand-in AWQModifier: keeps its arguments for oneshot to record."""

from typing import Any


class AWQModifier:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
