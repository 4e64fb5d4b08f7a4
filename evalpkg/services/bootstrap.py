"""Databases, roles, grants, the foreign server and the de-identification key (idempotent)."""

from __future__ import annotations

import contextlib
import secrets

import psycopg
from psycopg import sql

from evalpkg.db import connect
from evalpkg.dburl import parts
from evalpkg.errors import ConfigError, DataError
from evalpkg.services import postgres
from evalpkg.settings import (
    AGENT_ROLE,
    CURATOR_ROLE,
    EVAL_DB,
    PROD_DB,
    PROD_READER_ROLE,
    RESULTS_DB,
    SYNC_ROLE,
    Settings,
)

FOREIGN_SERVER = "prod_his"
# Foreign (prod) schema -> local schema holding its foreign tables; only the sync role reads them.
FOREIGN_SCHEMAS = {"his": "src_his", "meta": "src_meta", "ops": "src_ops"}
MART_SCHEMAS = ("emr", "meta", "ops")
# Who may read each published schema. Agents read what a clinician's analyst would: the ticket log
# (ops) holds the exact SQL, and the request text, of every task the monthly refresh releases.
READ_ROLES = (AGENT_ROLE, CURATOR_ROLE)
SCHEMA_READERS: dict[str, tuple[str, ...]] = {"emr": READ_ROLES, "meta": READ_ROLES, "ops": (CURATOR_ROLE,)}
KEY_SCHEMA, KEY_TABLE = "deid_secret", "hmac_key"
MIN_KEY_BYTES = 32
# One agent query may sort or hash in this much memory per node and spill at most this much to disk:
# a cross join fails with a tool error instead of exhausting the server.
AGENT_WORK_MEM = "16MB"
AGENT_TEMP_FILE_LIMIT = "1GB"
# A sync killed outright (no chance to cancel its queries) leaves server sessions running; this is how
# soon such a session notices its client is gone and stops, releasing the build schemas.
SYNC_CLIENT_CHECK = "2s"


def _ident(name: str) -> sql.Identifier:
    return sql.Identifier(name)


def _ensure_role(conn: psycopg.Connection, role: str) -> None:
    if conn.execute("select 1 from pg_roles where rolname = %s", (role,)).fetchone() is None:
        conn.execute(sql.SQL("create role {} login nosuperuser nocreatedb nocreaterole").format(_ident(role)))


def bootstrap_server(settings: Settings) -> None:
    """Databases, roles, grants and the eval DB's schemas and extensions: idempotent, and the one way
    `evalpkg up`, the sync and the test fixtures prepare a server."""
    postgres.ensure_databases(settings)
    ensure_roles(settings)
    ensure_eval_db(settings)


def ensure_roles(settings: Settings) -> None:
    with connect(settings.admin_url) as conn:
        for role in (SYNC_ROLE, *READ_ROLES, PROD_READER_ROLE):
            _ensure_role(conn, role)
        # Settings are defaults only (a role can SET them off): privileges are the real guard.
        for role in READ_ROLES:
            conn.execute(sql.SQL("alter role {} set default_transaction_read_only = on").format(_ident(role)))
            conn.execute(
                sql.SQL("alter role {} set statement_timeout = {}").format(
                    _ident(role), sql.Literal(f"{settings.agent_statement_timeout_ms}ms")
                )
            )
        conn.execute(sql.SQL("alter role {} set work_mem = {}").format(_ident(AGENT_ROLE), sql.Literal(AGENT_WORK_MEM)))
        with contextlib.suppress(psycopg.errors.InvalidParameterValue):  # platforms without the check
            conn.execute(
                sql.SQL("alter role {} set client_connection_check_interval = {}").format(
                    _ident(SYNC_ROLE), sql.Literal(SYNC_CLIENT_CHECK)
                )
            )
        # superuser-only, so beyond the role's own reach; an external server's admin may lack the right
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                sql.SQL("alter role {} set temp_file_limit = {}").format(
                    _ident(AGENT_ROLE), sql.Literal(AGENT_TEMP_FILE_LIMIT)
                )
            )
        for db in (PROD_DB, EVAL_DB, RESULTS_DB):
            conn.execute(sql.SQL("revoke connect, temporary on database {} from public").format(_ident(db)))
        conn.execute(sql.SQL("grant connect on database {} to {}").format(_ident(PROD_DB), _ident(PROD_READER_ROLE)))
        conn.execute(
            sql.SQL("grant connect, temporary on database {} to {}").format(_ident(EVAL_DB), _ident(SYNC_ROLE))
        )
        for role in READ_ROLES:
            conn.execute(sql.SQL("grant connect on database {} to {}").format(_ident(EVAL_DB), _ident(role)))


def grant_prod_reader(settings: Settings) -> None:
    """Read-only access for the fdw login; fails clearly when prod was never generated."""
    with connect(settings.db_url(PROD_DB)) as conn:
        present = {
            r[0]
            for r in conn.execute(
                "select table_schema from information_schema.tables where table_schema = any(%s)",
                (list(FOREIGN_SCHEMAS),),
            ).fetchall()
        }
        missing = set(FOREIGN_SCHEMAS) - present
        if missing:
            raise DataError(
                f"production database {PROD_DB} has no tables in schema(s) {', '.join(sorted(missing))}; "
                "run `evalpkg prod generate` first"
            )
        for schema in FOREIGN_SCHEMAS:
            conn.execute(sql.SQL("grant usage on schema {} to {}").format(_ident(schema), _ident(PROD_READER_ROLE)))
            conn.execute(
                sql.SQL("grant select on all tables in schema {} to {}").format(
                    _ident(schema), _ident(PROD_READER_ROLE)
                )
            )


def ensure_eval_db(settings: Settings) -> None:
    """Extensions, schemas, the key table, and default grants for the agents' role."""
    with connect(settings.db_url(EVAL_DB)) as conn:
        conn.execute("create extension if not exists pgcrypto")
        conn.execute("create extension if not exists postgres_fdw")
        conn.execute(sql.SQL("create schema if not exists {}").format(_ident(KEY_SCHEMA)))
        conn.execute(
            sql.SQL(
                "create table if not exists {}.{} "
                "(hmac_key bytea not null, created_at timestamptz not null default now())"
            ).format(_ident(KEY_SCHEMA), _ident(KEY_TABLE))
        )
        conn.execute(sql.SQL("revoke all on schema {} from public").format(_ident(KEY_SCHEMA)))
        conn.execute(sql.SQL("grant usage on schema {} to {}").format(_ident(KEY_SCHEMA), _ident(SYNC_ROLE)))
        conn.execute(
            sql.SQL("grant select on {}.{} to {}").format(_ident(KEY_SCHEMA), _ident(KEY_TABLE), _ident(SYNC_ROLE))
        )
        for schema in ("staging", *FOREIGN_SCHEMAS.values(), *MART_SCHEMAS):
            conn.execute(
                sql.SQL("create schema if not exists {} authorization {}").format(_ident(schema), _ident(SYNC_ROLE))
            )
        # high_water: of the published snapshot; built: of the build waiting to be published
        conn.execute(
            sql.SQL(
                "create table if not exists staging.sync_watermark "
                "(model text primary key, high_water timestamp, pending timestamp, built timestamp)"
            )
        )
        conn.execute("alter table staging.sync_watermark add column if not exists built timestamp")
        conn.execute(sql.SQL("alter table staging.sync_watermark owner to {}").format(_ident(SYNC_ROLE)))
        conn.execute(sql.SQL("grant create on database {} to {}").format(_ident(EVAL_DB), _ident(SYNC_ROLE)))
        for schema in MART_SCHEMAS:
            grant_readers(conn, schema, schema)
        for role in READ_ROLES:
            conn.execute(
                sql.SQL("alter role {} in database {} set search_path = emr, meta").format(
                    _ident(role), _ident(EVAL_DB)
                )
            )


def grant_readers(conn: psycopg.Connection, schema: str, published_as: str, *, usage: bool = True) -> None:
    """Select on the sync role's tables in `schema` (and usage on it, unless a build not yet published)
    for the readers of `published_as` only; taken from every other read role, so a cluster set up
    before a schema's readers changed keeps no stale grant."""
    readers = SCHEMA_READERS[published_as]
    for role in READ_ROLES:
        verb, prep = ("grant", "to") if role in readers else ("revoke", "from")
        if usage or verb == "revoke":
            conn.execute(sql.SQL(f"{verb} usage on schema {{}} {prep} {{}}").format(_ident(schema), _ident(role)))
        conn.execute(
            sql.SQL(f"{verb} select on all tables in schema {{}} {prep} {{}}").format(_ident(schema), _ident(role))
        )
        conn.execute(
            sql.SQL(
                f"alter default privileges for role {{}} in schema {{}} {verb} select on tables {prep} {{}}"
            ).format(_ident(SYNC_ROLE), _ident(schema), _ident(role))
        )


def ensure_foreign_server(settings: Settings) -> None:
    """(Re)create the link to prod with a freshly rotated password for the fdw login."""
    password = secrets.token_urlsafe(24)
    target = parts(settings.db_url(PROD_DB))
    host = str(target["host"] or "127.0.0.1")
    with connect(settings.admin_url) as conn:
        conn.execute(sql.SQL("alter role {} password {}").format(_ident(PROD_READER_ROLE), sql.Literal(password)))
    with connect(settings.db_url(EVAL_DB)) as conn:
        conn.execute(sql.SQL("drop server if exists {} cascade").format(_ident(FOREIGN_SERVER)))
        # Never list pgcrypto in the server's `extensions`: hmac() would then be shipped to prod
        # with the key as a query parameter. Remote estimates give the planner real row counts.
        conn.execute(
            sql.SQL(
                "create server {} foreign data wrapper postgres_fdw options "
                "(host {}, port {}, dbname {}, fetch_size '50000', use_remote_estimate 'true')"
            ).format(
                _ident(FOREIGN_SERVER),
                sql.Literal(host),
                sql.Literal(str(target["port"])),
                sql.Literal(PROD_DB),
            )
        )
        conn.execute(
            sql.SQL("grant usage on foreign server {} to {}").format(_ident(FOREIGN_SERVER), _ident(SYNC_ROLE))
        )
        conn.execute(
            sql.SQL("create user mapping for {} server {} options (user {}, password {})").format(
                _ident(SYNC_ROLE),
                _ident(FOREIGN_SERVER),
                sql.Literal(PROD_READER_ROLE),
                sql.Literal(password),
            )
        )
    with connect(settings.db_url(EVAL_DB)) as conn:
        conn.execute(sql.SQL("set role {}").format(_ident(SYNC_ROLE)))
        for remote, local in FOREIGN_SCHEMAS.items():
            conn.execute(sql.SQL("drop schema if exists {} cascade").format(_ident(local)))
            conn.execute(sql.SQL("create schema {}").format(_ident(local)))
            conn.execute(
                sql.SQL("import foreign schema {} from server {} into {}").format(
                    _ident(remote), _ident(FOREIGN_SERVER), _ident(local)
                )
            )


def has_key(settings: Settings) -> bool:
    with connect(settings.db_url(EVAL_DB)) as conn:
        row = conn.execute(
            sql.SQL("select count(*) from {}.{}").format(_ident(KEY_SCHEMA), _ident(KEY_TABLE))
        ).fetchone()
    return bool(row and row[0])


def set_key(settings: Settings, key: bytes | None = None, *, replace: bool = False) -> bool:
    """Store the HMAC key in the eval DB only; returns False if one exists and ``replace`` is off."""
    if key is not None and len(key) < MIN_KEY_BYTES:
        raise ConfigError(f"de-identification key: {len(key)} bytes is too short (need >= {MIN_KEY_BYTES})")
    ensure_eval_db(settings)
    with connect(settings.db_url(EVAL_DB), autocommit=False) as conn:
        table = sql.SQL("{}.{}").format(_ident(KEY_SCHEMA), _ident(KEY_TABLE))
        exists = conn.execute(sql.SQL("select count(*) from {}").format(table)).fetchone()
        if exists and exists[0] and not replace:
            return False
        conn.execute(sql.SQL("delete from {}").format(table))
        conn.execute("delete from staging.sync_watermark")  # new key: reload incremental models
        conn.execute(
            sql.SQL("insert into {} (hmac_key) values (%s)").format(table),
            (key or secrets.token_bytes(MIN_KEY_BYTES),),
        )
        conn.commit()
    return True


def drop_key(settings: Settings) -> None:
    with connect(settings.db_url(EVAL_DB)) as conn:
        conn.execute(sql.SQL("delete from {}.{}").format(_ident(KEY_SCHEMA), _ident(KEY_TABLE)))
