"""The deterministic plan compiler: a plan's steps, checked rule by rule, become one
SQL statement. The first broken rule is reported with the step that breaks it:

R1 a plan starts with one SCAN          R2 tables and names exist, once each    R3 columns exist
R4 a JOIN's condition uses its table    R5 operators are known                   R6 values fit the operator
R7 functions, aggregates and aliases    R8 plain columns next to aggregates are grouped (automatic)
R9 an aggregated plan orders by what it shows, groups or aggregates               R10 LIMIT 1..10000
R11 nothing is grouped twice            R12 a plan shows something              R13 aggregates only where
groups are meant (not in a JOIN, a GROUP_BY, an 'only' or another aggregate)   R14 expressions are
well formed                              R15 units, dates, formats and casts are known
R16 TOTALS and FIRST_PER need what they refine (GROUP_BY, ORDER_BY)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalpkg.agent.plan.expressions import IDENT, INTERVAL, Expressions, Scope, Source, quoted
from evalpkg.agent.plan.model import Plan, PlanStep
from evalpkg.errors import PlanError

if TYPE_CHECKING:
    from evalpkg.agent.schema import Catalog

MAX_LIMIT = 10_000
OLD_OPS = {"is null": "is_null", "is not null": "not_null", "not in": "not_in", "not like": "not_like"}


def compile_plan(plan: Plan, catalog: Catalog) -> str:
    """The plan's SQL, or PlanError naming the first rule it breaks and where."""
    return _Compiler(catalog).select(plan, None, "", {}, needs_output=True)[0]


@dataclass
class _Output:
    sql: str
    name: str | None
    aggregates: bool
    plain_column: bool


@dataclass
class _Query:
    scope: Scope
    tables: list[str] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    having: list[str] = field(default_factory=list)
    group: list[str] = field(default_factory=list)
    shown_groups: list[_Output] = field(default_factory=list)
    outputs: list[_Output] = field(default_factory=list)
    order: list[tuple[str, bool, bool, str]] = field(default_factory=list)  # sql, is an output/group, aggregates, at
    first_per: list[str] = field(default_factory=list)
    totals: str = ""
    distinct: bool = False
    limit: int | None = None


class _Compiler:
    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.expressions = Expressions(self._subplan)
        self._inputs: dict[str, list[str]] = {}

    def _subplan(self, plan: Plan, scope: Scope, where: str, needs_output: bool) -> str:
        return self.select(plan, scope, where, dict(self._inputs), needs_output=needs_output)[0]

    def select(
        self, plan: Plan, parent: Scope | None, where: str, inputs: dict[str, list[str]], *, needs_output: bool
    ) -> tuple[str, list[str | None]]:
        ctes = []
        for name, sub in plan.inputs.items():
            key = name.lower()
            if not IDENT.match(key) or key in inputs:
                raise PlanError(f"R2 input {name!r}{where}: names are plain identifiers, each used once")
            sql, names = self.select(sub, parent, f" of input {key}{where}", dict(inputs), needs_output=True)
            if any(n is None for n in names):
                raise PlanError(f"R7 input {key}{where}: every output of an input needs an alias")
            inputs[key] = [n for n in names if n is not None]
            ctes.append(f"{quoted(key)} as ({sql})")
        saved, self._inputs = self._inputs, inputs
        try:
            q = _Query(Scope(parent=parent))
            for i, step in enumerate(plan.steps):
                self._step(q, step, i, f"step {i}{where}", inputs)
        finally:
            self._inputs = saved
        sql = self._assemble(q, where, needs_output)
        names = [o.name for o in self._shown(q)]
        return (f"with {', '.join(ctes)} {sql}" if ctes else sql), names

    def _source(self, q: _Query, step: PlanStep, at: str, inputs: dict[str, list[str]]) -> Source:
        if step.series is not None:
            return self._series(q, step, at)
        raw = (step.table or "").strip().lower()
        bare = raw.rsplit(".", 1)[-1]
        if bare in inputs:
            table, columns, text = bare, inputs[bare], quoted(bare)
        else:
            resolved = self.catalog.resolve(raw)
            if resolved is None:
                raise PlanError(f"R2 {at}: unknown table {step.table!r}")
            table, columns = resolved, [c.name for c in self.catalog.columns[resolved]]
            text = self.catalog.tables[resolved]
        name = (step.name or table).strip().lower()
        if not IDENT.match(name):
            raise PlanError(f"R2 {at}: name {step.name!r} is not a plain identifier")
        if name in q.scope.sources:
            raise PlanError(f"R2 {at}: table {name} is already in the plan")
        text = f"{text} {quoted(name)}"
        source = Source(quoted(name), columns)
        q.scope.sources[name] = source
        q.tables.append(text)
        return source

    def _series(self, q: _Query, step: PlanStep, at: str) -> Source:
        spec: dict[str, Any] = step.series or {}
        name, column, every = (step.name or "").lower(), str(spec.get("column", "")).lower(), spec.get("step")
        if step.action != "SCAN" or not IDENT.match(name) or not IDENT.match(column):
            raise PlanError(f"R2 {at}: a calendar is SCANned with a name and series.column")
        if not isinstance(every, str) or not INTERVAL.match(every.strip().lower()):
            raise PlanError(f"R15 {at}: series.step {every!r} is not like '1 month'")
        low = self.expressions.sql(spec.get("from"), q.scope, at)
        high = self.expressions.sql(spec.get("to"), q.scope, at)
        q.tables.append(f"generate_series({low}, {high}, interval '{every.strip().lower()}') as {name}({column})")
        source = Source(quoted(name), [column])
        q.scope.sources[name] = source
        return source

    def _step(self, q: _Query, step: PlanStep, i: int, at: str, inputs: dict[str, list[str]]) -> None:
        ex = self.expressions
        if i == 0 and step.action != "SCAN":
            raise PlanError(f"R1 {at}: the plan must start with SCAN of a base table")
        if step.action == "SCAN":
            if q.tables:
                raise PlanError(f"R1 {at}: only one SCAN; add further tables with JOIN")
            self._source(q, step, at, inputs)
        elif step.action == "JOIN":
            joined = self._source(q, step, at, inputs)
            if isinstance(step.on, list):
                if len(step.on) != 2:
                    raise PlanError(f"R4 {at}: JOIN needs on = [left table.column, right table.column]")
                condition: dict[str, Any] = {"cmp": "=", "args": [{"col": step.on[0]}, {"col": step.on[1]}]}
            else:
                condition = step.on
            on = ex.compile(condition, q.scope, at)
            if on.aggregates:
                raise PlanError(f"R13 {at}: a join condition cannot aggregate")
            if f"{joined.sql_name}." not in on.sql:
                raise PlanError(f"R4 {at}: the join condition must use a column of {joined.sql_name}")
            q.tables[-1] = f"{'left join' if step.keep_unmatched else 'join'} {q.tables[-1]} on {on.sql}"
        elif step.action == "FILTER":
            c = ex.compile(step.condition if step.condition is not None else _old_filter(step, at), q.scope, at)
            (q.having if c.aggregates else q.where).append(c.sql)
        elif step.action in ("SELECT", "AGGREGATE"):
            self._output(q, step, at)
        elif step.action == "GROUP_BY":
            c = ex.compile(step.expr if step.expr is not None else {"col": step.column}, q.scope, at)
            if c.aggregates:
                raise PlanError(f"R13 {at}: GROUP_BY cannot group by an aggregate")
            if c.sql in q.group:
                raise PlanError(f"R11 {at}: {step.column or step.expr} is grouped twice")
            q.group.append(c.sql)
            if not step.hidden:
                q.shown_groups.append(_Output(c.sql, _bare(step.column), False, True))
        elif step.action == "TOTALS":
            q.totals = at
        elif step.action == "DISTINCT":
            q.distinct = True
        elif step.action == "FIRST_PER":
            if not step.columns:
                raise PlanError(f"R16 {at}: FIRST_PER needs columns")
            q.first_per = [ex.sql({"col": c}, q.scope, at) for c in step.columns]
        elif step.action == "ORDER_BY":
            self._order(q, step, at)
        elif step.action == "LIMIT":
            if step.n is None or not 0 < step.n <= MAX_LIMIT:
                raise PlanError(f"R10 {at}: LIMIT must be 1..{MAX_LIMIT}")
            q.limit = step.n

    def _output(self, q: _Query, step: PlanStep, at: str) -> None:
        if step.action == "AGGREGATE":
            of = step.expr if step.expr is not None else ({"col": step.column} if step.column else None)
            fn = (step.function or "").lower()
            e: dict[str, Any] = {"agg": fn, "of": of, "only": step.only}
            name: str | None = (step.alias or fn).lower()
        else:
            e = step.expr if step.expr is not None else {"col": step.column}
            name = step.alias.lower() if step.alias else _bare(step.column)
        if step.alias is not None and not IDENT.match(step.alias.lower()):
            raise PlanError(f"R7 {at}: alias {step.alias!r} is not a plain identifier")
        c = self.expressions.compile(e, q.scope, at)
        q.outputs.append(_Output(c.sql, name, c.aggregates, "col" in e and step.action == "SELECT"))
        if name:
            q.scope.outputs[name] = c.sql

    def _order(self, q: _Query, step: PlanStep, at: str) -> None:
        target = (step.column or "").strip().lower()
        shown = {o.name for o in self._shown(q) if o.name}
        if step.expr is None and target in shown:
            q.order.append((f"{quoted(target)} {step.direction}", True, False, at))
            return
        c = self.expressions.compile(step.expr if step.expr is not None else {"col": step.column}, q.scope, at)
        known = c.sql in q.group or c.sql in {o.sql for o in self._shown(q)}
        q.order.append((f"{c.sql} {step.direction}", known, c.aggregates, at))

    @staticmethod
    def _shown(q: _Query) -> list[_Output]:
        selected = {o.sql for o in q.outputs}
        return [g for g in q.shown_groups if g.sql not in selected] + q.outputs

    def _assemble(self, q: _Query, where: str, needs_output: bool) -> str:
        shown = self._shown(q)
        if needs_output and not shown:
            raise PlanError(f"R12 the plan{where} selects nothing: add SELECT or AGGREGATE")
        aggregated = bool(q.group or q.having) or any(o.aggregates for o in shown)
        if aggregated:
            for o in shown:  # R8: plain columns next to aggregates are grouped automatically
                if o.plain_column and o.sql not in q.group:
                    q.group.append(o.sql)
            for key, known, aggregates, at in q.order:
                target = key.rsplit(" ", 1)[0]
                if not (known or aggregates or target in q.group):
                    raise PlanError(f"R9 {at}: ORDER_BY {target} must be selected, grouped or aggregated")
        if q.totals and not q.group:
            raise PlanError(f"R16 {q.totals}: TOTALS adds a total row to groups: GROUP_BY first")
        columns = ", ".join(o.sql + (f" as {quoted(o.name)}" if o.name and not o.sql.endswith(f".{o.name}") else "")
                            for o in shown) or "1"  # fmt: skip
        head = "select distinct " if q.distinct else "select "
        order = [k for k, *_ in q.order]
        if q.first_per:
            head = f"select distinct on ({', '.join(q.first_per)}) "
            leading = [k.rsplit(" ", 1)[0] for k in order[: len(q.first_per)]]
            if leading != q.first_per:  # FIRST_PER takes the first row by the order: its columns lead it
                order = [f"{c} asc" for c in q.first_per] + order
        sql = head + columns + " from " + " ".join(q.tables)
        if q.where:
            sql += " where " + " and ".join(q.where)
        if q.group:
            keys = ", ".join(q.group)
            sql += f" group by grouping sets (({keys}), ())" if q.totals else f" group by {keys}"
        if q.having:
            sql += " having " + " and ".join(q.having)
        if order:
            sql += " order by " + ", ".join(order)
        if q.limit:
            sql += f" limit {q.limit}"
        return sql


def _bare(column: str | None) -> str | None:
    return column.strip().lower().rsplit(".", 1)[-1] if column else None


def _old_filter(step: PlanStep, at: str) -> dict[str, Any]:
    """FILTER {column, op, value}, the seed's form, as a condition."""
    op = (step.op or "").strip().lower()
    op = OLD_OPS.get(op, op)
    left = {"col": step.column}
    if op in ("is_null", "not_null"):
        return {"cmp": op, "args": [left]}
    if op in ("in", "not_in"):
        return {"cmp": op, "args": [left, {"value": step.value}]}
    if op == "between":
        if not isinstance(step.value, list) or len(step.value) != 2:
            raise PlanError(f"R6 {at}: between needs [low, high]")
        return {"cmp": op, "args": [left, {"value": step.value[0]}, {"value": step.value[1]}]}
    if (step.value is None or isinstance(step.value, list)) and op in ("=", "<>", "!=", "<", "<=", ">", ">="):
        raise PlanError(f"R6 {at}: {op} needs one value")
    return {"cmp": op, "args": [left, {"value": step.value}]}
