"""Connections with one-line errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

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
