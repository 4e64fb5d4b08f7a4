"""Database-level guard: the agents' read-only role, a read-only transaction, a per-statement timeout,
and a row cap and byte caps enforced while fetching (the server refuses to send a row over the row-byte
cap; the harness fetches in batches that cannot overshoot the result-byte cap). The role's own
defaults can be switched off by the role itself, so every statement sets its limits again inside its
transaction. Statements borrow one of a few pooled sessions, so a shard's many dialogues need few
PostgreSQL connections."""

from __future__ import annotations

import datetime as dt
import decimal
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from evalpkg.db import first_line, pool
from evalpkg.errors import QueryError, ServiceError
from evalpkg.sql.guard import check

DEFAULT_TIMEOUT_MS = 5_000
DEFAULT_ROW_CAP = 10_000
DEFAULT_MAX_RESULT_BYTES = 8 * 2**20  # what one result may bring into the harness
DEFAULT_MAX_ROW_BYTES = 256 * 2**10  # one row, so one value, as the server measures it (pg_column_size)
MAX_FETCH_ROWS = 1_000  # rows per FETCH, at most
COUNT_BUDGET_MS = 1_000  # counting the rows past the cap is worth this much server time, no more
# The server raises this (as an invalid boolean) instead of sending a row over the row-byte cap.
OVERSIZED_ROW = "evalpkg: oversized row of "


class QueryFailed(QueryError):
    """The database refused or cancelled the query; one line for the model."""


class ResultTooLarge(QueryFailed):
    """The result (or one of its rows) was over its byte cap; the statement was ended on the server."""

    def __init__(self, max_bytes: int, what: str = "") -> None:
        super().__init__(f"the result was larger than {max_bytes} bytes{what}; select fewer or shorter values")


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[list[Any]]
    total_rows: int  # when not total_known: a lower bound, "more than len(rows)"
    capped: bool  # more rows existed than the cap; only the first cap rows were fetched
    elapsed_ms: float
    total_known: bool = True  # false when counting past the cap was not cheap
    decimals: list[int | None] = field(default_factory=list)  # per column, see stated_decimals


def stated_decimals(rows: list[Any]) -> list[int | None]:
    """Per column, the decimals its numeric values were written with (round(x, 1) gives 0.7 one, round(x, 2)
    gives 0.70 two), which a float loses; None for a column without numeric values."""
    if not rows:
        return []
    found: list[int | None] = [None] * len(rows[0])
    for row in rows:
        for k, v in enumerate(row):
            if isinstance(v, decimal.Decimal) and v.is_finite():
                places = max(0, -int(v.as_tuple().exponent))
                found[k] = places if found[k] is None else max(found[k] or 0, places)
    return found


def jsonable(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat(sep=" ") if isinstance(value, dt.datetime) else value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | memoryview):
        return "<binary>"
    return value


def _read_only(conn: psycopg.Connection) -> None:
    conn.read_only = True  # every transaction psycopg starts is BEGIN READ ONLY


@contextmanager
def read_only_transaction(conn: psycopg.Connection, timeout_ms: int) -> Iterator[psycopg.Connection]:
    """A read-only transaction with its limits set inside it, on any connection, whatever its defaults."""
    with conn.transaction():
        # one round trip for the limits; SET LOCAL ends with the transaction. A cursor plans as the
        # plain query would (cursor_tuple_fraction 1), so ties fall the same way.
        conn.execute(
            "select set_config('transaction_read_only', 'on', true), "
            "set_config('statement_timeout', %s, true), "
            "set_config('idle_in_transaction_session_timeout', '60000', true), "
            "set_config('cursor_tuple_fraction', '1', true)",
            (str(int(timeout_ms)),),
        )
        yield conn


@dataclass
class Fetched:
    columns: list[str]
    rows: list[tuple[Any, ...]]  # as the driver returns them
    total_rows: int
    capped: bool
    total_known: bool


def run_on(
    conn: psycopg.Connection,
    sql: str,
    *,
    timeout_ms: int,
    row_cap: int | None,
    checked: bool = False,
    max_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
) -> Fetched:
    """The one path a query takes, an agent's or a gold: the parse guard, then a read-only transaction
    with a statement timeout, and a server-side cursor that lets at most row_cap + 1 rows (all of them
    when row_cap is None) and at most `max_bytes` reach this process: the server measures each row and
    refuses to send one over `max_row_bytes`, so a batch of n rows brings at most n * max_row_bytes."""
    if not checked:
        check(sql)  # raises SqlRefused
    try:
        with read_only_transaction(conn, timeout_ms):
            measured = _measured(without_final_semicolon(sql), max_row_bytes)
            conn.execute(f"declare agent_query no scroll cursor for {measured}")
            columns: list[str] = []
            fetched: list[tuple[Any, ...]] = []
            used = 0
            want = None if row_cap is None else row_cap + 1
            while want is None or len(fetched) < want:
                batch = max(1, min(MAX_FETCH_ROWS, (max_bytes - used) // max_row_bytes))
                if want is not None:
                    batch = min(batch, want - len(fetched))
                cur = conn.execute(f"fetch forward {batch} from agent_query")
                columns = [d.name for d in cur.description or []][:-1]  # the last is the row's size
                rows = cur.fetchall()
                used += sum(row[-1] for row in rows)
                if used > max_bytes:
                    raise ResultTooLarge(max_bytes)  # the transaction ends: the server stops the statement
                fetched += [row[:-1] for row in rows]
                if len(rows) < batch:
                    break
            total, known = len(fetched), True
            capped = row_cap is not None and total > row_cap
            if capped:
                del fetched[row_cap:]
                total, known = _count_rest(conn, total, timeout_ms)
    except psycopg.errors.QueryCanceled as exc:
        raise QueryFailed(f"query cancelled after the {timeout_ms} ms statement timeout") from exc
    except psycopg.errors.InvalidTextRepresentation as exc:
        if OVERSIZED_ROW in str(exc):
            raise ResultTooLarge(max_row_bytes, " in one row") from exc
        raise QueryFailed(first_line(exc)) from exc
    except psycopg.Error as exc:
        raise QueryFailed(first_line(exc)) from exc
    return Fetched(columns, fetched, total, capped, known)


def without_final_semicolon(sql: str) -> str:
    """The statement without its final semicolon, so that it can be a subquery."""
    blanked = re.sub(r"--[^\n]*|/\*.*?\*/", lambda m: " " * len(m.group()), sql, flags=re.DOTALL)
    end = len(blanked.rstrip())
    return sql[: end - 1] + sql[end:] if end and blanked[end - 1] == ";" else sql


def _measured(sql: str, max_row_bytes: int) -> str:
    """The query's columns and, last, each row's size in bytes; the server raises instead of sending a
    row over the cap. OFFSET 0 keeps the query a subquery of its own, so that each value is computed
    once (not again for the size and the check); the query stands on lines of its own, so that a last
    line comment ends there."""
    return (
        f"select q.*, pg_column_size(q)::bigint from (select * from (\n{sql}\n) as fenced offset 0) as q "
        f"where case when pg_column_size(q) <= {int(max_row_bytes)} then true "
        f"else ('{OVERSIZED_ROW}' || pg_column_size(q) || ' bytes')::boolean end"
    )


def _count_rest(conn: psycopg.Connection, fetched: int, timeout_ms: int) -> tuple[int, bool]:
    """MOVE counts the rows past the cap on the server without sending them, within a small budget."""
    budget = str(min(int(timeout_ms), COUNT_BUDGET_MS))
    try:
        with conn.transaction():  # a savepoint: a cancelled count keeps the rows already fetched
            conn.execute("select set_config('statement_timeout', %s, true)", (budget,))
            return fetched + conn.execute("move forward all in agent_query").rowcount, True
    except (psycopg.errors.QueryCanceled, psycopg.errors.ConfigurationLimitExceeded):
        return fetched, False
    except psycopg.errors.InvalidTextRepresentation:  # an oversized row past the cap: never sent, not counted
        return fetched, False


class ReadOnlyExecutor:
    """Thread-safe: each statement borrows one of `pool_size` sessions for its transaction only."""

    def __init__(
        self,
        url: str,
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        row_cap: int | None = DEFAULT_ROW_CAP,
        max_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
        pool_size: int = 1,
    ) -> None:
        self.url = url
        self.timeout_ms = timeout_ms
        self.row_cap = row_cap  # None: every row (golds, which are compared whole)
        self.max_bytes = max_bytes
        self.max_row_bytes = max_row_bytes
        self.pool_size = pool_size
        self._pool: ConnectionPool | None = None
        self._lock = threading.Lock()

    def _sessions(self) -> ConnectionPool:
        with self._lock:
            if self._pool is None:
                try:
                    self._pool = pool(self.url, self.pool_size, name="eval-db", autocommit=False, configure=_read_only)
                except ServiceError as exc:
                    raise QueryFailed(f"eval DB unreachable: {exc}") from exc
            return self._pool

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    @contextmanager
    def _session(self) -> Iterator[psycopg.Connection]:
        try:
            with self._sessions().connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise QueryFailed(f"eval DB busy: no free session ({first_line(exc)})") from exc

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """A trusted, parametrized query (the plan toolset's catalog lookups), under the same limits."""
        with self._session() as conn, read_only_transaction(conn, self.timeout_ms):
            return list(conn.execute(sql, params).fetchall())

    def run(self, sql: str, *, checked: bool = False) -> QueryResult:
        if not checked:
            check(sql)  # raises SqlRefused
        t0 = time.perf_counter()
        try:
            with self._session() as conn:
                got = run_on(
                    conn,
                    sql,
                    timeout_ms=self.timeout_ms,
                    row_cap=self.row_cap,
                    checked=True,
                    max_bytes=self.max_bytes,
                    max_row_bytes=self.max_row_bytes,
                )
        except psycopg.Error as exc:  # handing the session back failed
            raise QueryFailed(first_line(exc)) from exc
        rows = [[jsonable(v) for v in r] for r in got.rows]
        elapsed_ms = (time.perf_counter() - t0) * 1000
        decimals = stated_decimals(got.rows)
        return QueryResult(got.columns, rows, got.total_rows, got.capped, elapsed_ms, got.total_known, decimals)
