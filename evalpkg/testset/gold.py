"""Running gold SQL the way an agent's query runs: the same parse guard, read-only role and transaction,
limits and server-side cursor (`executor.run_on`); only the timeout is the gold's own, and no row cap
truncates a gold, whose rows are compared whole."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from evalpkg.db import connect
from evalpkg.settings import Settings
from evalpkg.sql.executor import QueryFailed, run_on
from evalpkg.sql.guard import SqlRefused

GOLD_TIMEOUT_MS = 10_000


class GoldError(Exception):
    """The gold SQL was refused or failed; message is one line."""


@contextmanager
def agent_connection(settings: Settings) -> Iterator[psycopg.Connection]:
    with connect(settings.agent_url(), autocommit=False) as conn:
        yield conn


def run_gold(
    conn: psycopg.Connection, sql: str, timeout_ms: int = GOLD_TIMEOUT_MS, *, row_cap: int | None = None
) -> list[tuple[Any, ...]]:
    """Every row of the gold, as the driver returns them; a gold over a given row_cap is an error, never
    a truncated result."""
    try:
        got = run_on(conn, sql, timeout_ms=timeout_ms, row_cap=row_cap)
    except SqlRefused as exc:
        raise GoldError(f"not one read-only query: {exc}") from exc
    except QueryFailed as exc:
        raise GoldError(str(exc)) from exc
    if got.capped:
        raise GoldError(f"more than {row_cap} rows")
    return got.rows


def snapshot_version(conn: psycopg.Connection) -> str:
    with conn.transaction():
        row = conn.execute("select snapshot_version from meta.snapshot").fetchone()
    return str(row[0]) if row else ""
