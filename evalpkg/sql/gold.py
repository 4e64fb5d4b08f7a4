"""Running gold SQL, one way for every caller (build, validate, reselection, the refresh, adjudication, the
grader's gold cache, trap mutations and premises): the agents' read-only path (`ReadOnlyExecutor`: the same
parse guard, role, read-only transaction, server-side cursor and byte caps), each statement run once. Only the
limits are the gold's own: its timeout, and no row cap unless the caller's (the grader's, whose agents stop
at a cap: a gold over it could never be matched). One row shape (`QueryResult`: JSON values, each numeric
column's stated decimals kept) and one error (`GoldError`) for refused, failed, timed out and over the cap."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Protocol

import psycopg

from evalpkg.db import connect
from evalpkg.errors import QueryError
from evalpkg.settings import Settings
from evalpkg.sql.executor import QueryResult, ReadOnlyExecutor
from evalpkg.sql.guard import SqlRefused

GOLD_TIMEOUT_MS = 10_000


class GoldError(QueryError):
    """A gold (or SQL run as one: a trap's mutation, a premise's probe) was refused, failed, timed out or
    returned more rows than its cap; one line."""


class GoldSource(Protocol):
    """What the gold checks need: a gold's result, or GoldError (a GoldRunner; a table in tests)."""

    def result(self, sql: str) -> QueryResult: ...


class GoldRunner:
    """Gold SQL through one executor, each statement run once: a gold is read again by the determinism
    probe, by every trap mutation and layout of the audit, by the follow-up that repeats it. A failure is
    remembered too, and raised again."""

    def __init__(self, executor: ReadOnlyExecutor) -> None:
        self.executor = executor
        self._memo: dict[str, QueryResult | GoldError] = {}

    def result(self, sql: str) -> QueryResult:
        if sql not in self._memo:
            try:
                self._memo[sql] = self._run(sql)
            except GoldError as exc:
                self._memo[sql] = exc
        got = self._memo[sql]
        if isinstance(got, GoldError):
            raise got
        return got

    def ran(self, sql: str) -> bool:
        """Whether `sql` ran here and returned a result (a prediction of the same text reads it)."""
        return isinstance(self._memo.get(sql), QueryResult)

    def _run(self, sql: str) -> QueryResult:
        try:
            got = self.executor.run(sql)
        except SqlRefused as exc:
            raise GoldError(f"not one read-only query: {exc}") from exc
        except QueryError as exc:
            raise GoldError(str(exc)) from exc
        if got.capped:
            raise GoldError(f"more than {self.executor.row_cap} rows, the agents' row cap: {sql[:80]}")
        return got

    def close(self) -> None:
        self.executor.close()

    def __enter__(self) -> GoldRunner:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()


def gold_runner(settings: Settings, *, timeout_ms: int = GOLD_TIMEOUT_MS) -> GoldRunner:
    """Golds as the test set's own checks run them: every row, the gold's timeout, as the agents' role."""
    return GoldRunner(ReadOnlyExecutor(settings.agent_url(), timeout_ms=timeout_ms, row_cap=None))


@contextmanager
def agent_connection(settings: Settings) -> Iterator[psycopg.Connection]:
    """One connection as the agents' role, for reads that are no gold (the dictionary, the snapshot's name)."""
    with connect(settings.agent_url(), autocommit=False) as conn:
        yield conn


def snapshot_version(conn: psycopg.Connection) -> str:
    with conn.transaction():
        row = conn.execute("select snapshot_version from meta.snapshot").fetchone()
    return str(row[0]) if row else ""
