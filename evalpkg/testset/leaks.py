"""What the agents' role can read, searched for an answer key: any stored text that is the same query
(formatting and case aside) as a gold (of any release, follow-up turns too) or as a ticket's SQL (the ticket
log answers every task the monthly refresh mines from it). The role is asked, not assumed: a table counts
when the server grants it select, whatever schema it is in. A query of the same shape with other literals
(a few-shot example of how such questions are asked) is listed apart: it teaches a method, not an answer."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psycopg
from psycopg import sql

from evalpkg.db import connect
from evalpkg.errors import SqlParseError
from evalpkg.settings import Settings
from evalpkg.sql import fingerprint
from evalpkg.testset.models import Task

# A stored text that could hold a query: the rest cannot be one, and is not parsed.
LOOKS_LIKE_SQL = r"(?is)\mselect\M.*\mfrom\M"
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast")


@dataclass(frozen=True)
class Leak:
    table: str  # schema.table
    column: str
    holds: str  # what the text is: "gold of <task id>" or "SQL of ticket #<id>"
    exact: bool  # the same query; False: the same shape with other literals

    def __str__(self) -> str:
        how = "the same query" if self.exact else "a query of the same shape (other literals)"
        return f"{self.table}.{self.column} holds {how} as the {self.holds}"


@dataclass(frozen=True)
class LeakAudit:
    tables: list[str]  # every table the agents' role can read
    texts: int  # stored texts that looked like a query and were compared
    found: list[Leak]

    @property
    def leaks(self) -> list[Leak]:
        return [f for f in self.found if f.exact]

    @property
    def similar(self) -> list[Leak]:
        return [f for f in self.found if not f.exact]


def gold_queries(tasks: Iterable[Task]) -> dict[str, str]:
    """Each gold query (alternatives and follow-up turns too) -> the task it answers."""
    return {q: f"gold of {t.id}" for t in tasks for q in [*t.gold_sql, *(g for turn in t.turns for g in turn.gold_sql)]}


def ticket_queries(settings: Settings) -> dict[str, str]:
    with connect(settings.curator_url()) as conn:
        rows = conn.execute("select ticket_id, sql_text from ops.query_ticket where sql_text is not null").fetchall()
    return {str(q): f"SQL of ticket #{i}" for i, q in rows}


def _readable_text_columns(conn: psycopg.Connection) -> tuple[list[str], list[tuple[str, str, str]]]:
    rows = conn.execute(
        "select n.nspname, c.relname, a.attname, a.atttypid in ('text'::regtype, 'varchar'::regtype) "
        "from pg_class c join pg_namespace n on n.oid = c.relnamespace "
        "join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped "
        "where c.relkind in ('r', 'v', 'm', 'f', 'p') and n.nspname <> all(%s) "
        "and has_table_privilege(current_user, c.oid, 'select') order by 1, 2, a.attnum",
        (list(SYSTEM_SCHEMAS),),
    ).fetchall()
    tables = sorted({f"{s}.{t}" for s, t, _, _ in rows})
    return tables, [(s, t, col) for s, t, col, is_text in rows if is_text]


def _keyed(queries: dict[str, str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Each query's exact and literal-free fingerprints -> every owner that has it (several tickets may ask
    the same shape: each one is named, not the first)."""
    exact: dict[str, list[str]] = {}
    shape: dict[str, list[str]] = {}
    for query, owner in queries.items():
        try:
            same, similar = fingerprint.exact(query), fingerprint.pattern(query)
        except SqlParseError:
            continue  # not a query the agents could be matched on
        exact.setdefault(same, []).append(owner)
        shape.setdefault(similar, []).append(owner)
    return exact, shape


def audit_agent_readable(settings: Settings, answers: dict[str, str]) -> LeakAudit:
    """Every table the agents' role can read, its texts that parse as a query compared with `answers`
    (query -> what it answers)."""
    exact, shape = _keyed(answers)
    found: list[Leak] = []
    compared = 0
    with connect(settings.agent_url()) as conn:
        tables, columns = _readable_text_columns(conn)
        for schema, table, column in columns:
            query = sql.SQL("select distinct {col} from {tab} where {col} ~ %s").format(
                col=sql.Identifier(column), tab=sql.Identifier(schema, table)
            )
            for (text,) in conn.execute(query, (LOOKS_LIKE_SQL,)).fetchall():
                compared += 1
                try:
                    same, similar = fingerprint.exact(text), fingerprint.pattern(text)
                except SqlParseError:
                    continue
                where = f"{schema}.{table}"
                if same in exact:
                    found += [Leak(where, column, owner, exact=True) for owner in exact[same]]
                elif similar in shape:
                    found += [Leak(where, column, owner, exact=False) for owner in shape[similar]]
    return LeakAudit(tables, compared, found)
