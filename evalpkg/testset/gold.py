"""Running gold SQL the way an agent's query runs: read-only role, read-only transaction, timeout."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from evalpkg.db import connect, first_line
from evalpkg.dburl import with_user
from evalpkg.settings import AGENT_ROLE, EVAL_DB, Settings

GOLD_TIMEOUT_MS = 10_000


class GoldError(Exception):
    """The gold SQL failed; message is one line."""


@contextmanager
def agent_connection(settings: Settings) -> Iterator[psycopg.Connection]:
    with connect(with_user(settings.db_url(EVAL_DB), AGENT_ROLE, settings.agent_password), autocommit=False) as conn:
        yield conn


def run_gold(conn: psycopg.Connection, sql: str, timeout_ms: int = GOLD_TIMEOUT_MS) -> list[tuple[Any, ...]]:
    try:
        with conn.transaction():
            conn.execute("set transaction read only")
            conn.execute(f"set local statement_timeout = {int(timeout_ms)}")
            cur = conn.execute(sql)  # task files hold SQL text by design
            return list(cur.fetchall()) if cur.description else []
    except psycopg.Error as exc:
        raise GoldError(first_line(exc)) from exc


def snapshot_version(conn: psycopg.Connection) -> str:
    with conn.transaction():
        row = conn.execute("select snapshot_version from meta.snapshot").fetchone()
    return str(row[0]) if row else ""
