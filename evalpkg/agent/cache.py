"""Tool-result cache shared by a run's workers: schema, dictionary and examples always; SQL results
keyed by eval snapshot + normalized SQL. Bounded by the rows it holds, least recently
used first out, so a shard's memory does not grow with the number of instances."""

from __future__ import annotations

import json
import threading
from collections import Counter, OrderedDict
from typing import Any

MAX_CACHED_ROWS = 100_000  # across all entries, tens of MB at most
ENTRY_ROWS = 10  # an entry's own cost (key, columns), counted as rows


def _weight(value: Any) -> int:
    return len(getattr(value, "rows", ())) + ENTRY_ROWS


class ToolCache:
    def __init__(self, snapshot_version: str, max_rows: int = MAX_CACHED_ROWS) -> None:
        self.snapshot_version = snapshot_version
        self.max_rows = max_rows
        self._data: OrderedDict[tuple[str, str, str], Any] = OrderedDict()
        self._rows = 0
        self._lock = threading.Lock()
        self.hits: Counter[str] = Counter()
        self.misses: Counter[str] = Counter()

    def key(self, tool: str, args: Any) -> tuple[str, str, str]:
        return (self.snapshot_version, tool, json.dumps(args, sort_keys=True, ensure_ascii=False, default=str))

    def get(self, tool: str, args: Any) -> Any | None:
        key = self.key(tool, args)
        with self._lock:
            value = self._data.get(key)
            (self.hits if value is not None else self.misses)[tool] += 1
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, tool: str, args: Any, value: Any) -> None:
        key = self.key(tool, args)
        with self._lock:
            if key in self._data:
                self._rows -= _weight(self._data.pop(key))
            self._data[key] = value
            self._rows += _weight(value)
            while self._rows > self.max_rows and len(self._data) > 1:
                self._rows -= _weight(self._data.popitem(last=False)[1])

    def stats(self) -> dict[str, dict[str, int]]:
        return {"hits": dict(self.hits), "misses": dict(self.misses)}
