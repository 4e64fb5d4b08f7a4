"""Write-risk check for the extension scenario where an agent may propose a write: it may propose
UPDATE/DELETE; it is never executed. The WHERE clause is checked for completeness and the rows it
would touch are estimated with EXPLAIN (no ANALYZE) of the equivalent SELECT, which the read-only
role may plan."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from sqlglot import exp

from evalpkg.errors import SqlParseError
from evalpkg.sql.parse import DIALECT, parse_statement

DEFAULT_MAX_ROWS = 100


def _tautology(where: exp.Expression) -> bool:
    cond = where.this
    if isinstance(cond, exp.Boolean):
        return bool(cond.this)
    if isinstance(cond, exp.EQ) and isinstance(cond.left, exp.Literal) and isinstance(cond.right, exp.Literal):
        return bool(cond.left.this == cond.right.this)
    return False


def assess(sql: str, conn: psycopg.Connection, max_rows: int = DEFAULT_MAX_ROWS) -> dict[str, Any]:
    """{"allowed": bool, "estimated_rows": int | None, "reasons": [...]}; never runs the write."""
    try:
        stmt = parse_statement(sql)
    except SqlParseError as exc:
        return {"allowed": False, "estimated_rows": None, "reasons": [str(exc)]}
    if not isinstance(stmt, exp.Update | exp.Delete):
        return {"allowed": False, "estimated_rows": None, "reasons": ["only one UPDATE or DELETE is assessed"]}
    reasons = []
    where = stmt.args.get("where")
    if where is None:
        reasons.append("no WHERE clause: every row would change")
    elif _tautology(where):
        reasons.append("the WHERE clause is always true")
    table = stmt.this
    probe = exp.select("1").from_(table.copy())
    if where is not None:
        probe = probe.where(where.this.copy())
    estimated = None
    try:
        with conn.transaction():
            conn.execute("set transaction read only")
            plan = conn.execute(f"explain (format json) {probe.sql(dialect=DIALECT)}").fetchone()
        if plan:
            doc = plan[0] if isinstance(plan[0], list) else json.loads(plan[0])
            estimated = int(doc[0]["Plan"]["Plan Rows"])
    except psycopg.Error as exc:
        reasons.append(f"cannot be planned: {str(exc).splitlines()[0][:150]}")
    if estimated is not None and estimated > max_rows:
        reasons.append(f"would touch about {estimated} rows (limit {max_rows})")
    return {"allowed": not reasons, "estimated_rows": estimated, "reasons": reasons}
