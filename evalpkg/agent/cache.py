"""Tool-result cache shared by a run's workers: schema, dictionary and examples always; SQL results
keyed by eval snapshot + normalized SQL (seed 000 §2.3)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import Any


class ToolCache:
    def __init__(self, snapshot_version: str) -> None:
        self.snapshot_version = snapshot_version
        self._data: dict[tuple[str, str, str], Any] = {}
        self._lock = threading.Lock()
        self.hits: Counter[str] = Counter()
        self.misses: Counter[str] = Counter()

    def key(self, tool: str, args: Any) -> tuple[str, str, str]:
        return (self.snapshot_version, tool, json.dumps(args, sort_keys=True, ensure_ascii=False, default=str))

    def get(self, tool: str, args: Any) -> Any | None:
        with self._lock:
            value = self._data.get(self.key(tool, args))
            (self.hits if value is not None else self.misses)[tool] += 1
            return value

    def put(self, tool: str, args: Any, value: Any) -> None:
        with self._lock:
            self._data[self.key(tool, args)] = value

    def stats(self) -> dict[str, dict[str, int]]:
        return {"hits": dict(self.hits), "misses": dict(self.misses)}
