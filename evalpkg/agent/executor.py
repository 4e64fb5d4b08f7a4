"""Database-level guard: the agents' read-only role, a read-only transaction, a per-statement timeout
and a row cap. The role's own defaults can be switched off by the role itself, so every statement
sets its limits again inside its transaction."""

from __future__ import annotations

import datetime as dt
import decimal
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from evalpkg.agent.sqlguard import check
from evalpkg.db import first_line

DEFAULT_TIMEOUT_MS = 5_000
DEFAULT_ROW_CAP = 10_000


class QueryFailed(Exception):
    """The database refused or cancelled the query; one line for the model."""


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[list[Any]]
    total_rows: int
    capped: bool  # more rows existed than the cap; total_rows came from a count
    elapsed_ms: float


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


class ReadOnlyExecutor:
    def __init__(self, url: str, *, timeout_ms: int = DEFAULT_TIMEOUT_MS, row_cap: int = DEFAULT_ROW_CAP) -> None:
        self.url = url
        self.timeout_ms = timeout_ms
        self.row_cap = row_cap
        self._conn: psycopg.Connection | None = None

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = psycopg.connect(self.url, autocommit=False, connect_timeout=5)
                self._conn.read_only = True
            except psycopg.OperationalError as exc:
                raise QueryFailed(f"eval DB unreachable: {first_line(exc)}") from exc
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def run(self, sql: str, *, checked: bool = False) -> QueryResult:
        if not checked:
            check(sql)  # raises SqlRefused
        conn = self._connection()
        t0 = time.perf_counter()
        try:
            with conn.transaction():  # BEGIN READ ONLY: the connection is read-only
                # one round trip for both limits; SET LOCAL ends with the transaction
                conn.execute(
                    "select set_config('statement_timeout', %s, true), "
                    "set_config('idle_in_transaction_session_timeout', '60000', true)",
                    (str(int(self.timeout_ms)),),
                )
                cur = conn.execute(sql)  # parse-checked above
                if cur.description is None:
                    raise QueryFailed("the statement returned no result set")
                columns = [d.name for d in cur.description]
                fetched = cur.fetchmany(self.row_cap + 1)
                capped = len(fetched) > self.row_cap
                total = len(fetched)
                if capped:
                    fetched = fetched[: self.row_cap]
                    row = conn.execute(f"select count(*) from ({sql}) as capped_query").fetchone()
                    total = int(row[0]) if row else total
        except psycopg.errors.QueryCanceled as exc:
            raise QueryFailed(f"query cancelled after the {self.timeout_ms} ms statement timeout") from exc
        except psycopg.Error as exc:
            if conn.closed:
                self._conn = None
            raise QueryFailed(first_line(exc)) from exc
        rows = [[jsonable(v) for v in r] for r in fetched]
        return QueryResult(columns, rows, total, capped, (time.perf_counter() - t0) * 1000)
