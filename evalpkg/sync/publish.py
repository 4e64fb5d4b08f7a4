"""Blue/green for the marts: dbt builds emr__build, meta__build and ops__build while agents keep
querying emr, meta and ops; once the build and its checks passed, one transaction renames the build
schemas into place. An interrupted or failed sync never publishes, and the next one starts clean."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql

from evalpkg.db import connect, first_line
from evalpkg.errors import SyncError
from evalpkg.interrupts import held_interrupts
from evalpkg.services.bootstrap import MART_SCHEMAS, grant_readers
from evalpkg.settings import EVAL_DB, SYNC_ROLE, Settings
from evalpkg.sync.dbt import BUILD_SUFFIX

OLD_SUFFIX = "__old"  # the snapshot just replaced, dropped right after (or by the next sync)
LOCK_KEY = 7_150_201  # pg advisory lock: one `evalpkg sync` at a time on a server
LOCK_WAIT = "60s"  # how long clean-up waits for a session still using a stale schema
PUBLISHED = "the new snapshot was published before the interrupt took effect"  # a Ctrl-C held over the swap


def build(schema: str) -> str:
    return schema + BUILD_SUFFIX


def _ident(name: str) -> sql.Identifier:
    return sql.Identifier(name)


def _exists(conn: psycopg.Connection, schema: str) -> bool:
    return conn.execute("select 1 from pg_namespace where nspname = %s", (schema,)).fetchone() is not None


@contextmanager
def sync_lock(settings: Settings) -> Iterator[None]:
    """Held for a whole `evalpkg sync`: a second one would rebuild the same build schemas."""
    with connect(settings.admin_url) as conn:
        row = conn.execute("select pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()
        if not (row and row[0]):
            raise SyncError(f"another `evalpkg sync` is running on this server; {EVAL_DB} was not changed")
        yield  # closing the session releases the lock


def _drop(conn: psycopg.Connection, schemas: Iterable[str]) -> None:
    for schema in schemas:
        try:
            conn.execute(sql.SQL("drop schema if exists {} cascade").format(_ident(schema)))
        except psycopg.errors.LockNotAvailable as exc:
            raise SyncError(
                f"{EVAL_DB}.{schema} is still in use by another session after {LOCK_WAIT} "
                f"(is another sync running?): {first_line(exc)}"
            ) from exc


def reset_build(settings: Settings, incremental: Iterable[tuple[str, str]], *, full_refresh: bool) -> None:
    """Drop what an earlier sync left (a build never published, a replaced snapshot not yet dropped),
    create empty build schemas only the sync role can read, and seed each incremental model's build
    table with the published rows so dbt applies only prod's changes since then."""
    with connect(settings.db_url(EVAL_DB)) as conn:
        conn.execute(f"set lock_timeout = '{LOCK_WAIT}'")
        _drop(conn, [s + suffix for s in MART_SCHEMAS for suffix in (BUILD_SUFFIX, OLD_SUFFIX)])
        conn.execute("update staging.sync_watermark set built = null where built is not null")
        for schema in MART_SCHEMAS:
            conn.execute(sql.SQL("create schema {} authorization {}").format(_ident(build(schema)), _ident(SYNC_ROLE)))
            # follows the schema through the rename; usage on the schema is granted when it is published
            grant_readers(conn, build(schema), schema, usage=False)
        if full_refresh:
            return
        conn.execute(sql.SQL("set role {}").format(_ident(SYNC_ROLE)))  # owner and grants as dbt's own tables
        for build_schema, table in incremental:
            live = build_schema.removesuffix(BUILD_SUFFIX)
            exists = conn.execute("select to_regclass(%s)", (f'"{live}"."{table}"',)).fetchone()
            if not (exists and exists[0]):
                continue  # never published: dbt builds it in full
            target, source = sql.Identifier(build_schema, table), sql.Identifier(live, table)
            conn.execute(sql.SQL("create table {} (like {} including all)").format(target, source))
            conn.execute(sql.SQL("insert into {} select * from {}").format(target, source))


def build_tables(conn: psycopg.Connection) -> list[tuple[str, str]]:
    return [
        (str(s), str(t))
        for s, t in conn.execute(
            "select table_schema, table_name from information_schema.tables "
            "where table_schema = any(%s) and table_type = 'BASE TABLE' order by 1, 2",
            ([build(s) for s in MART_SCHEMAS],),
        ).fetchall()
    ]


def publish(settings: Settings) -> None:
    """Swap the build in, in one transaction: agents see the previous snapshot or the new one, never
    a mix. Ctrl-C during the swap waits for it to commit."""
    with (
        held_interrupts(message=PUBLISHED),
        connect(settings.db_url(EVAL_DB), autocommit=False) as conn,
    ):
        missing = [build(s) for s in MART_SCHEMAS if not _exists(conn, build(s))]
        if missing:
            raise SyncError(f"nothing to publish: {EVAL_DB} has no {', '.join(missing)} (run the build first)")
        for schema in MART_SCHEMAS:
            if _exists(conn, schema):
                conn.execute(
                    sql.SQL("alter schema {} rename to {}").format(_ident(schema), _ident(schema + OLD_SUFFIX))
                )
            conn.execute(sql.SQL("alter schema {} rename to {}").format(_ident(build(schema)), _ident(schema)))
            grant_readers(conn, schema, schema)
        conn.execute("update staging.sync_watermark set high_water = built, built = null where built is not null")
        conn.commit()


def drop_replaced(settings: Settings) -> None:
    """Drop the snapshot `publish` replaced; one an agent query still reads is left to the next sync."""
    with connect(settings.db_url(EVAL_DB)) as conn:
        conn.execute("set lock_timeout = '5s'")
        for schema in MART_SCHEMAS:
            try:
                conn.execute(sql.SQL("drop schema if exists {} cascade").format(_ident(schema + OLD_SUFFIX)))
            except psycopg.errors.LockNotAvailable:
                continue
