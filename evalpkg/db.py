"""Connections and small connection pools with one-line errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from evalpkg.dburl import redact
from evalpkg.errors import ServiceError


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@contextmanager
def connect(url: str, *, autocommit: bool = True, timeout_s: int = 5) -> Iterator[psycopg.Connection]:
    try:
        conn = psycopg.connect(url, autocommit=autocommit, connect_timeout=timeout_s)
    except psycopg.OperationalError as exc:
        raise ServiceError(f"cannot connect to {redact(url)}: {first_line(exc)}") from exc
    try:
        yield conn
    finally:
        conn.close()


def can_connect(url: str) -> bool:
    try:
        with connect(url, timeout_s=2):
            return True
    except ServiceError:
        return False


def pool(
    url: str,
    size: int,
    *,
    name: str,
    autocommit: bool = True,
    configure: Callable[[psycopg.Connection], None] | None = None,
    wait_s: float = 120.0,
    timeout_s: int = 5,
) -> ConnectionPool:
    """At most `size` sessions shared by any number of threads (a thread waits up to `wait_s` for
    one), named `evalpkg-<name>` in pg_stat_activity; the first connection is made now, so an
    unreachable server fails here, not mid-run."""
    p: ConnectionPool = ConnectionPool(
        url,
        min_size=1,
        max_size=size,
        name=name,
        kwargs={"autocommit": autocommit, "connect_timeout": timeout_s, "application_name": f"evalpkg-{name}"},
        configure=configure,
        timeout=wait_s,
        num_workers=1,  # a small pool needs one background worker
        open=False,
    )
    try:
        p.open(wait=True, timeout=timeout_s + 1)
    except PoolTimeout as exc:
        raise ServiceError(f"cannot connect to {redact(url)} within {timeout_s} s") from exc
    return p
