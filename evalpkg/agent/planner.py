"""The plan strategy (seed 001): the model emits a structured plan of semantic actions; this
deterministic compiler validates it against the catalog and turns it into SQL."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from evalpkg.agent.schema import Catalog

OPS = {"=", "<>", "<", "<=", ">", ">=", "in", "not in", "like", "is null", "is not null", "between"}
AGGREGATES = {"count", "count_distinct", "avg", "sum", "min", "max"}
MAX_LIMIT = 10_000
IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")


class PlanError(Exception):
    """The plan breaks a compiler rule; the message names the rule and the step."""


class PlanStep(BaseModel):
    action: Literal["SCAN", "JOIN", "FILTER", "AGGREGATE", "GROUP_BY", "ORDER_BY", "LIMIT", "SELECT"]
    table: str | None = None  # SCAN, JOIN (the table joined in)
    on: list[str] = []  # JOIN: ["t_zy_visit.visit_id", "t_lab_result.visit_id"]
    column: str | None = None  # table.column for FILTER, SELECT, GROUP_BY, ORDER_BY, AGGREGATE
    op: str | None = None
    value: str | float | int | list[str | float | int] | None = None
    function: str | None = None  # AGGREGATE
    alias: str | None = None
    direction: Literal["asc", "desc"] = "asc"
    n: int | None = None  # LIMIT


class Plan(BaseModel):
    steps: list[PlanStep] = Field(min_length=1)


def _literal(v: str | float | int) -> str:
    if isinstance(v, bool) or not isinstance(v, str | int | float):
        raise PlanError(f"R6 values must be strings or numbers, got {v!r}")
    if isinstance(v, int | float):
        return repr(v)
    return "'" + v.replace("'", "''") + "'"


def compile_plan(plan: Plan, catalog: Catalog) -> str:
    """Twelve rules, checked in order; the first broken one is reported."""
    tables: list[str] = []
    joins: list[str] = []
    where: list[str] = []
    select: list[str] = []
    group: list[str] = []
    order: list[str] = []
    aggregates: list[str] = []
    limit: int | None = None
    aliases: dict[str, str] = {}

    def col(ref: str | None, i: int) -> str:
        if not ref or "." not in ref:
            raise PlanError(f"R3 step {i}: columns are written table.column, got {ref!r}")
        t, c = ref.lower().split(".", 1)
        t = catalog.resolve(t) or t
        if t not in tables:
            raise PlanError(f"R3 step {i}: table {t} is not in the plan (SCAN or JOIN it first)")
        if c not in {x.name for x in catalog.columns.get(t, [])}:
            raise PlanError(f"R3 step {i}: {t} has no column {c}")
        return f"{aliases[t]}.{c}"

    for i, step in enumerate(plan.steps):
        if i == 0 and step.action != "SCAN":
            raise PlanError("R1 the plan must start with SCAN of a base table")
        if step.action in ("SCAN", "JOIN"):
            t = catalog.resolve(step.table or "")
            if t is None:
                raise PlanError(f"R2 step {i}: unknown table {step.table!r}")
            if t in tables:
                raise PlanError(f"R2 step {i}: table {t} is already in the plan")
            if step.action == "SCAN" and tables:
                raise PlanError(f"R1 step {i}: only one SCAN; add further tables with JOIN")
            tables.append(t)
            aliases[t] = f"t{len(tables)}"
            if step.action == "JOIN":
                if len(step.on) != 2:
                    raise PlanError(f"R4 step {i}: JOIN needs on = [left table.column, right table.column]")
                left, right = col(step.on[0], i), col(step.on[1], i)
                if not any(x.startswith(aliases[t] + ".") for x in (left, right)):
                    raise PlanError(f"R4 step {i}: the join condition must use a column of {t}")
                joins.append(f"join {catalog.tables[t]} {aliases[t]} on {left} = {right}")
        elif step.action == "FILTER":
            op = (step.op or "").lower()
            if op not in OPS:
                raise PlanError(f"R5 step {i}: operator {step.op!r} is not one of {sorted(OPS)}")
            c = col(step.column, i)
            if op in ("is null", "is not null"):
                where.append(f"{c} {op}")
            elif op in ("in", "not in"):
                if not isinstance(step.value, list) or not step.value:
                    raise PlanError(f"R6 step {i}: {op} needs a non-empty list value")
                where.append(f"{c} {op} ({', '.join(_literal(v) for v in step.value)})")
            elif op == "between":
                if not isinstance(step.value, list) or len(step.value) != 2:
                    raise PlanError(f"R6 step {i}: between needs [low, high]")
                where.append(f"{c} between {_literal(step.value[0])} and {_literal(step.value[1])}")
            else:
                if step.value is None or isinstance(step.value, list):
                    raise PlanError(f"R6 step {i}: {op} needs one value")
                where.append(f"{c} {op} {_literal(step.value)}")
        elif step.action == "AGGREGATE":
            fn = (step.function or "").lower()
            if fn not in AGGREGATES:
                raise PlanError(f"R7 step {i}: aggregate {step.function!r} is not one of {sorted(AGGREGATES)}")
            alias = (step.alias or fn).lower()
            if not IDENT.match(alias):
                raise PlanError(f"R7 step {i}: alias {step.alias!r} is not a plain identifier")
            target = "*" if fn == "count" and not step.column else col(step.column, i)
            expr = f"count(distinct {target})" if fn == "count_distinct" else f"{fn}({target})"
            aggregates.append(f"{expr} as {alias}")
        elif step.action == "GROUP_BY":
            if group and step.column and col(step.column, i) in group:
                raise PlanError(f"R11 step {i}: {step.column} is grouped twice")
            group.append(col(step.column, i))
        elif step.action == "SELECT":
            select.append(col(step.column, i))
        elif step.action == "ORDER_BY":
            target = (step.column or "").lower()
            agg_aliases = {a.rsplit(" as ", 1)[1] for a in aggregates}
            key = target if target in agg_aliases else col(step.column, i)
            if key not in agg_aliases and key not in select + group:
                raise PlanError(f"R9 step {i}: ORDER_BY {step.column} must be selected, grouped or aggregated")
            order.append(f"{key} {step.direction}")
        elif step.action == "LIMIT":
            if step.n is None or not 0 < step.n <= MAX_LIMIT:
                raise PlanError(f"R10 step {i}: LIMIT must be 1..{MAX_LIMIT}")
            limit = step.n
    if not select and not aggregates and not group:
        raise PlanError("R12 the plan selects nothing: add SELECT or AGGREGATE")
    if aggregates:
        for c in select:  # R8: plain columns next to aggregates are grouped automatically
            if c not in group:
                group.append(c)
    columns = list(dict.fromkeys(group + select)) + aggregates
    first = tables[0]
    sql = f"select {', '.join(columns)} from {catalog.tables[first]} {aliases[first]}"
    sql += "".join(f" {j}" for j in joins)
    if where:
        sql += " where " + " and ".join(where)
    if group and aggregates:
        sql += " group by " + ", ".join(group)
    if order:
        sql += " order by " + ", ".join(order)
    if limit:
        sql += f" limit {limit}"
    return sql
