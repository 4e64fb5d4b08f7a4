"""Expressions of a plan (the forms are listed in `model.py`) compiled to SQL against a scope of named
tables; every form, function, operator, unit and column is checked, and a broken rule is named."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalpkg.errors import PlanError
from evalpkg.sql.vocabulary import DAY

if TYPE_CHECKING:
    from collections.abc import Callable

    from evalpkg.agent.plan.model import Plan

IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
RESERVED = {"all", "and", "as", "asc", "by", "case", "desc", "do", "else", "end", "from", "group", "having", "in"}
RESERVED |= {"is", "join", "limit", "not", "null", "on", "or", "order", "select", "table", "then", "to", "user"}
RESERVED |= {"when", "where", "with", "window", "union", "distinct", "offset", "fetch", "true", "false"}
FUNCTIONS: dict[str, tuple[int, int]] = {  # name -> (fewest, most) arguments
    "add": (2, 2), "sub": (2, 2), "mul": (2, 2), "div": (2, 2), "neg": (1, 1), "round": (1, 2), "abs": (1, 1),
    "nullif": (2, 2), "coalesce": (2, 4), "left": (2, 2), "greatest": (2, 4), "least": (2, 4),
    "lower": (1, 1), "upper": (1, 1), "concat": (2, 4),
}  # fmt: skip
INFIX = {"add": "+", "sub": "-", "mul": "*"}
AGGREGATES = {"count", "count_distinct", "sum", "avg", "min", "max", "median", "percentile"}
# Each comparison that has a negated form, and that form: the one list the compiler and the SQL translator use.
NEGATED = {"in": "not_in", "like": "not_like", "is_null": "not_null"}
COMPARISONS = {"=", "<>", "!=", "<", "<=", ">", ">=", "between", *NEGATED, *NEGATED.values()}
UNITS = {"day", "week", "month", "quarter", "year"}
PARTS = {"year", "quarter", "month", "day", "dow", "hour", "epoch"}
CASTS = {"int": "int", "integer": "int", "bigint": "bigint", "numeric": "numeric", "float": "float8"}
CASTS |= {"text": "text", "date": "date", "timestamp": "timestamp"}
INTERVAL = re.compile(r"^\d+ (year|month|week|day|hour|minute)s?$")
DATE = re.compile(DAY.pattern + r"( \d{2}:\d{2}(:\d{2})?)?")  # a day, or a time of one
DATE_FORMAT = re.compile(r"^[YMDQHI0-9 :/-]{1,20}$")
MAX_DEPTH = 24


@dataclass
class Source:
    sql_name: str  # how the compiled SQL refers to it
    columns: list[str]


@dataclass
class Scope:
    """The tables a step can see: its plan's, then (for a subplan) the enclosing plan's."""

    sources: dict[str, Source] = field(default_factory=dict)
    parent: Scope | None = None
    outputs: dict[str, str] = field(default_factory=dict)  # output name -> its SQL, for ORDER_BY and groups

    def column(self, ref: str, at: str) -> str:
        ref = ref.strip().lower()
        if "." in ref:
            table, name = ref.rsplit(".", 1)
            table = table.rsplit(".", 1)[-1]  # emr.t_zy_visit.ksdm
            scope: Scope | None = self
            while scope is not None:
                if table in scope.sources:
                    source = scope.sources[table]
                    if name not in source.columns:
                        raise PlanError(f"R3 {at}: {table} has no column {name}")
                    return f"{source.sql_name}.{name}"
                scope = scope.parent
            raise PlanError(f"R3 {at}: table {table} is not in the plan (SCAN or JOIN it first)")
        scope = self
        while scope is not None:
            holders = [s for s in scope.sources.values() if ref in s.columns]
            if len(holders) > 1:
                raise PlanError(f"R3 {at}: column {ref} is in several tables; write table.column")
            if holders:
                return f"{holders[0].sql_name}.{ref}"
            if scope is self and ref in self.outputs:
                return quoted(ref)
            scope = scope.parent
        raise PlanError(f"R3 {at}: no table in the plan has a column {ref}; columns are written table.column")


def quoted(name: str) -> str:
    return f'"{name}"' if name in RESERVED else name


def literal(value: Any, at: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PlanError(f"R6 {at}: values must be strings or numbers, got {value!r}")
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


@dataclass
class Compiled:
    sql: str
    aggregates: bool  # holds an aggregate: a group's value, not a row's


@dataclass
class Expressions:
    """Compiles the expression forms; `subplan` compiles an exists/scalar subplan in a scope."""

    subplan: Callable[[Plan, Scope, str, bool], str]

    def compile(self, e: Any, scope: Scope, at: str, depth: int = 0) -> Compiled:
        if depth > MAX_DEPTH:
            raise PlanError(f"R14 {at}: expressions nest at most {MAX_DEPTH} deep")
        if not isinstance(e, dict) or len(e) == 0:
            raise PlanError(f"R14 {at}: an expression is an object such as {{'col': 't.c'}}, got {e!r}")
        forms = [k for k in e if k in FORMS]
        if len(forms) != 1:
            raise PlanError(f"R14 {at}: unknown expression {e!r}; forms are {', '.join(sorted(FORMS))}")
        return FORMS[forms[0]](self, e, scope, at, depth + 1)

    def sql(self, e: Any, scope: Scope, at: str, depth: int = 0) -> str:
        return self.compile(e, scope, at, depth).sql

    def _all(self, items: Any, scope: Scope, at: str, depth: int) -> list[Compiled]:
        if not isinstance(items, list):
            raise PlanError(f"R14 {at}: expected a list of expressions, got {items!r}")
        return [self.compile(x, scope, at, depth) for x in items]

    def col(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        if not isinstance(e["col"], str):
            raise PlanError(f"R3 {at}: a column is written table.column, got {e['col']!r}")
        return Compiled(scope.column(e["col"], at), False)

    def value(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        if isinstance(e["value"], list):
            return Compiled("(" + ", ".join(literal(v, at) for v in e["value"]) + ")", False)
        return Compiled(literal(e["value"], at), False)

    def fn(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        name = str(e["fn"]).lower()
        if name not in FUNCTIONS:
            raise PlanError(f"R7 {at}: function {e['fn']!r} is not one of {sorted(FUNCTIONS)}")
        args = self._all(e.get("args", []), scope, at, depth)
        low, high = FUNCTIONS[name]
        if not low <= len(args) <= high:
            raise PlanError(f"R7 {at}: {name} takes {low}..{high} arguments, got {len(args)}")
        agg = any(a.aggregates for a in args)
        s = [a.sql for a in args]
        if name in INFIX:
            return Compiled(f"({s[0]} {INFIX[name]} {s[1]})", agg)
        if name == "div":  # a true quotient, also of two counts
            return Compiled(f"(({s[0]})::numeric / {s[1]})", agg)
        if name == "neg":
            return Compiled(f"(-{s[0]})", agg)
        if name == "round":
            return Compiled(f"round(({s[0]})::numeric{', ' + s[1] if len(s) > 1 else ''})", agg)
        return Compiled(f"{name}({', '.join(s)})", agg)

    def agg(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        name = str(e["agg"]).lower()
        if name not in AGGREGATES:
            raise PlanError(f"R7 {at}: aggregate {e['agg']!r} is not one of {sorted(AGGREGATES)}")
        distinct = bool(e.get("distinct")) or name == "count_distinct"
        name = "count" if name == "count_distinct" else name
        of = self.compile(e["of"], scope, at, depth) if e.get("of") is not None else None
        if of is None and not (name == "count" and not distinct):
            raise PlanError(f"R7 {at}: {name} needs 'of' (what it aggregates)")
        if of is not None and of.aggregates:
            raise PlanError(f"R13 {at}: an aggregate cannot aggregate another aggregate")
        if name in ("median", "percentile"):
            p = 0.5 if name == "median" else e.get("p")
            if not isinstance(p, int | float) or isinstance(p, bool) or not 0 <= p <= 1:
                raise PlanError(f"R7 {at}: percentile needs p between 0 and 1, got {p!r}")
            assert of is not None
            text = f"percentile_cont({p!r}) within group (order by {of.sql})"
        else:
            text = f"{name}({'distinct ' if distinct else ''}{of.sql if of else '*'})"
        if e.get("only") is not None:
            only = self.compile(e["only"], scope, at, depth)
            if only.aggregates:
                raise PlanError(f"R13 {at}: 'only' is a row condition; it cannot hold an aggregate")
            text += f" filter (where {only.sql})"
        return Compiled(text, True)

    def cmp(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        op = str(e["cmp"]).lower().replace(" ", "_")
        op = {"is_not_null": "not_null"}.get(op, op)
        if op not in COMPARISONS:
            raise PlanError(f"R5 {at}: operator {e['cmp']!r} is not one of {sorted(COMPARISONS)}")
        raw = e.get("args")
        if not isinstance(raw, list) or not raw:
            raise PlanError(f"R6 {at}: {op} needs args [left, right...]")
        left = self.compile(raw[0], scope, at, depth)
        rest = raw[1:]
        arity = {"is_null": 0, "not_null": 0, "between": 2, "in": 1, "not_in": 1}.get(op, 1)
        if len(rest) != arity:
            raise PlanError(f"R6 {at}: {op} needs {arity} value(s) after the left side, got {len(rest)}")
        if op in ("is_null", "not_null"):
            return Compiled(f"{left.sql} is {'not ' if op == 'not_null' else ''}null", left.aggregates)
        if op in ("in", "not_in"):
            items = rest[0].get("value") if isinstance(rest[0], dict) and "value" in rest[0] else rest[0]
            if not isinstance(items, list) or not items:
                raise PlanError(f"R6 {at}: {op} needs a non-empty list of values")
            values = [self.compile(x if isinstance(x, dict) else {"value": x}, scope, at, depth).sql for x in items]
            return Compiled(f"{left.sql} {op.replace('_', ' ')} ({', '.join(values)})", left.aggregates)
        others = [self.compile(x, scope, at, depth) for x in rest]
        agg = left.aggregates or any(o.aggregates for o in others)
        if op == "between":
            return Compiled(f"{left.sql} between {others[0].sql} and {others[1].sql}", agg)
        return Compiled(f"{left.sql} {op.replace('_', ' ')} {others[0].sql}", agg)

    def _logic(self, word: str, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        parts = self._all(e[word], scope, at, depth)
        if not parts:
            raise PlanError(f"R14 {at}: '{word}' needs at least one condition")
        joiner = " and " if word == "all" else " or "
        return Compiled("(" + joiner.join(p.sql for p in parts) + ")", any(p.aggregates for p in parts))

    def all(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        return self._logic("all", e, scope, at, depth)

    def any(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        return self._logic("any", e, scope, at, depth)

    def not_(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        inner = self.compile(e["not"], scope, at, depth)
        return Compiled(f"(not {inner.sql})", inner.aggregates)

    def exists(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        return Compiled(f"exists ({self._subplan(e['exists'], scope, at, False)})", False)

    def scalar(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        return Compiled(f"({self._subplan(e['scalar'], scope, at, True)})", False)

    def _subplan(self, raw: Any, scope: Scope, at: str, needs_output: bool) -> str:
        from evalpkg.agent.plan.model import Plan

        try:
            plan = raw if isinstance(raw, Plan) else Plan.model_validate(raw)
        except ValueError as exc:
            raise PlanError(f"R14 {at}: the subplan is not a plan: {str(exc).splitlines()[0]}") from exc
        return self.subplan(plan, scope, f"{at} (subplan)", needs_output)

    def when(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        cases = e["when"]
        if not isinstance(cases, list) or not cases or not all(isinstance(c, list) and len(c) == 2 for c in cases):
            raise PlanError(f"R14 {at}: 'when' is a list of [condition, value] pairs")
        parts = [(self.compile(c, scope, at, depth), self.compile(v, scope, at, depth)) for c, v in cases]
        text = "case" + "".join(f" when {c.sql} then {v.sql}" for c, v in parts)
        agg = any(c.aggregates or v.aggregates for c, v in parts)
        if e.get("else") is not None:
            other = self.compile(e["else"], scope, at, depth)
            text += f" else {other.sql}"
            agg = agg or other.aggregates
        return Compiled(text + " end", agg)

    def interval(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        if not isinstance(e["interval"], str) or not INTERVAL.match(e["interval"].strip().lower()):
            raise PlanError(f"R15 {at}: interval {e['interval']!r} is not like '3 months' or '30 days'")
        return Compiled(f"interval '{e['interval'].strip().lower()}'", False)

    def now(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        if e["now"] != "snapshot":
            raise PlanError(f"R15 {at}: 'now' is the snapshot's pinned time: {{'now': 'snapshot'}}")
        return Compiled("(select pinned_now from meta.snapshot)", False)

    def date(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        if not isinstance(e["date"], str) or not DATE.fullmatch(e["date"]):
            raise PlanError(f"R15 {at}: date {e['date']!r} is not YYYY-MM-DD")
        kind = "timestamp" if " " in e["date"] else "date"
        return Compiled(f"{kind} '{e['date']}'", False)

    def _of(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        if "of" not in e:
            raise PlanError(f"R14 {at}: {next(iter(e))!r} needs 'of'")
        return self.compile(e["of"], scope, at, depth)

    def bucket(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        if e["bucket"] not in UNITS:
            raise PlanError(f"R15 {at}: bucket {e['bucket']!r} is not one of {sorted(UNITS)}")
        of = self._of(e, scope, at, depth)
        return Compiled(f"date_trunc('{e['bucket']}', {of.sql})", of.aggregates)

    def format(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        if not isinstance(e["format"], str) or not DATE_FORMAT.match(e["format"]):
            raise PlanError(f"R15 {at}: date format {e['format']!r} is not like 'YYYY-MM'")
        of = self._of(e, scope, at, depth)
        return Compiled(f"to_char({of.sql}, '{e['format']}')", of.aggregates)

    def part(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        if e["part"] not in PARTS:
            raise PlanError(f"R15 {at}: part {e['part']!r} is not one of {sorted(PARTS)}")
        of = self._of(e, scope, at, depth)
        return Compiled(f"extract({e['part']} from {of.sql})", of.aggregates)

    def cast(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        if e["cast"] not in CASTS:
            raise PlanError(f"R15 {at}: cast {e['cast']!r} is not one of {sorted(CASTS)}")
        of = self._of(e, scope, at, depth)
        return Compiled(f"({of.sql})::{CASTS[e['cast']]}", of.aggregates)

    def is_total(self, e: dict[str, Any], scope: Scope, at: str, depth: int) -> Compiled:
        inner = self.compile(e["is_total"], scope, at, depth)
        return Compiled(f"grouping({inner.sql})", True)


FORMS: dict[str, Callable[[Expressions, dict[str, Any], Scope, str, int], Compiled]] = {
    "col": Expressions.col,
    "value": Expressions.value,
    "fn": Expressions.fn,
    "agg": Expressions.agg,
    "cmp": Expressions.cmp,
    "all": Expressions.all,
    "any": Expressions.any,
    "not": Expressions.not_,
    "exists": Expressions.exists,
    "scalar": Expressions.scalar,
    "when": Expressions.when,
    "interval": Expressions.interval,
    "now": Expressions.now,
    "date": Expressions.date,
    "bucket": Expressions.bucket,
    "format": Expressions.format,
    "part": Expressions.part,
    "cast": Expressions.cast,
    "is_total": Expressions.is_total,
}
