"""Parsing SQL text with sqlglot as PostgreSQL: exactly one statement, or a one-line reason why not."""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from evalpkg.errors import SqlParseError

DIALECT = "postgres"


def parse_statement(sql: str) -> exp.Expr:
    """Exactly one PostgreSQL statement, or a one-line SqlParseError saying why not."""
    try:
        statements = [s for s in sqlglot.parse(sql, dialect=DIALECT) if s is not None]
    except sqlglot.errors.SqlglotError as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise SqlParseError(f"SQL does not parse: {first[:200]}") from exc
    if len(statements) != 1:
        raise SqlParseError(f"exactly one statement is allowed, found {len(statements)}")
    return statements[0]
