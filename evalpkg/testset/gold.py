"""Running gold SQL the way an agent's query runs: the same parse guard, read-only role and transaction,
limits and server-side cursor (`executor.run_on`); only the timeout is the gold's own, and no row cap
truncates a gold, whose rows are compared whole. Two memoised forms, one per kind of caller: GoldRunner on
one connection (the gold checks: rows as the driver returns them, columns, GoldError) and MemoExecutor on
the pooled executor (trap mutations, premises, the scorer audit: rows as JSON values, QueryError)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

import psycopg

from evalpkg.db import connect
from evalpkg.errors import DataError, QueryError
from evalpkg.settings import Settings
from evalpkg.sql.executor import QueryFailed, QueryResult, ReadOnlyExecutor, run_on
from evalpkg.sql.guard import SqlRefused

GOLD_TIMEOUT_MS = 10_000
T = TypeVar("T")


class GoldError(DataError):
    """The gold SQL was refused, failed, timed out or returned more rows than its cap; one line."""


@dataclass(frozen=True)
class GoldResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]  # as the driver returns them


class GoldSource(Protocol):
    """What the gold checks need: a gold's result, or GoldError."""

    def result(self, sql: str) -> GoldResult: ...


class GoldRunner:
    """Gold SQL on one agent-role connection, each statement run once (a gold is read again by the
    determinism probe, by a template's later choice, by the follow-up that repeats it)."""

    def __init__(self, conn: psycopg.Connection, timeout_ms: int = GOLD_TIMEOUT_MS) -> None:
        self.conn = conn
        self.timeout_ms = timeout_ms
        self._memo: dict[str, GoldResult | GoldError] = {}

    def result(self, sql: str) -> GoldResult:
        return _once(self._memo, sql, lambda q: gold_result(self.conn, q, self.timeout_ms), GoldError)


@contextmanager
def agent_connection(settings: Settings) -> Iterator[psycopg.Connection]:
    with connect(settings.agent_url(), autocommit=False) as conn:
        yield conn


def gold_result(
    conn: psycopg.Connection, sql: str, timeout_ms: int = GOLD_TIMEOUT_MS, *, row_cap: int | None = None
) -> GoldResult:
    """Every row of the gold, as the driver returns them, and its column names; a gold over a given
    row_cap is an error, never a truncated result."""
    try:
        got = run_on(conn, sql, timeout_ms=timeout_ms, row_cap=row_cap)
    except SqlRefused as exc:
        raise GoldError(f"not one read-only query: {exc}") from exc
    except QueryFailed as exc:
        raise GoldError(str(exc)) from exc
    if got.capped:
        raise GoldError(f"more than {row_cap} rows")
    return GoldResult(got.columns, got.rows)


def run_gold(
    conn: psycopg.Connection, sql: str, timeout_ms: int = GOLD_TIMEOUT_MS, *, row_cap: int | None = None
) -> list[tuple[Any, ...]]:
    return gold_result(conn, sql, timeout_ms, row_cap=row_cap).rows


def snapshot_version(conn: psycopg.Connection) -> str:
    with conn.transaction():
        row = conn.execute("select snapshot_version from meta.snapshot").fetchone()
    return str(row[0]) if row else ""


def gold_executor(settings: Settings) -> MemoExecutor:
    return MemoExecutor(settings.agent_url(), GOLD_TIMEOUT_MS)


class MemoExecutor(ReadOnlyExecutor):
    """The agents' read-only path, every row, each statement run once (golds are re-read per mutation)."""

    def __init__(self, url: str, timeout_ms: int) -> None:
        super().__init__(url, timeout_ms=timeout_ms, row_cap=None)
        self._memo: dict[str, QueryResult | QueryError] = {}

    def run(self, sql: str, *, checked: bool = False) -> QueryResult:
        return _once(self._memo, sql, lambda q: super(MemoExecutor, self).run(q, checked=checked), QueryError)


def _once(memo: dict[str, Any], sql: str, run: Callable[[str], T], errors: type[Exception]) -> T:
    """run(sql) the first time; after that its result, or the error it raised, again."""
    if sql not in memo:
        try:
            memo[sql] = run(sql)
        except errors as exc:
            memo[sql] = exc
    got = memo[sql]
    if isinstance(got, Exception):
        raise got
    return cast(T, got)
