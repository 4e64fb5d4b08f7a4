"""SQL -> plan (sqlglot): the gold plan of a task is derived from its gold SQL, so every template has
one without writing it twice. What the grammar cannot say raises Untranslatable with the reason."""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from evalpkg.agent.plan.expressions import NEGATED
from evalpkg.agent.plan.model import Plan, PlanStep
from evalpkg.errors import PlanError
from evalpkg.sql.parse import DIALECT, parse_statement

COMPARISONS: dict[type[exp.Expr], str] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
    exp.Like: "like",
}
ARITHMETIC: dict[type[exp.Expr], str] = {exp.Add: "add", exp.Sub: "sub", exp.Mul: "mul", exp.Div: "div"}
AGGREGATES: dict[type[exp.Expr], str] = {
    exp.Count: "count",
    exp.Sum: "sum",
    exp.Avg: "avg",
    exp.Min: "min",
    exp.Max: "max",
}
FUNCTIONS: dict[type[exp.Expr], str] = {exp.Abs: "abs", exp.Lower: "lower", exp.Upper: "upper"}
CASTS = {"INT": "int", "BIGINT": "bigint", "DECIMAL": "numeric", "DOUBLE": "float", "FLOAT": "float"}
CASTS |= {"TEXT": "text", "VARCHAR": "text", "DATE": "date", "TIMESTAMP": "timestamp"}
DATE_TOKENS = {"%Y": "YYYY", "%m": "MM", "%d": "DD", "%H": "HH24", "%M": "MI", "%S": "SS"}


class Untranslatable(PlanError):
    """The SQL uses something the plan grammar has no step or expression for."""


def plan_from_sql(sql: str) -> Plan:
    return _plan(parse_statement(sql))


def _arg(node: exp.Expr, *names: str) -> Any:
    for name in names:  # sqlglot renamed some keys (from -> from_); read either
        if node.args.get(name) is not None:
            return node.args[name]
    return None


def _plan(node: exp.Expr, *, exists: bool = False) -> Plan:
    if isinstance(node, exp.Subquery):
        node = node.this
    if not isinstance(node, exp.Select):
        raise Untranslatable(f"{type(node).__name__.lower()} statements")
    inputs: dict[str, Plan] = {}
    if (with_ := _arg(node, "with", "with_")) is not None:
        for cte in with_.expressions:
            inputs[cte.alias] = _plan(cte.this)
    steps: list[PlanStep] = []
    source = _arg(node, "from", "from_")
    if source is None:
        raise Untranslatable("a query without FROM")
    steps.append(_source("SCAN", source.this, inputs))
    for join in node.args.get("joins") or []:
        if join.side not in ("", "LEFT") or join.kind not in ("", "INNER") or join.args.get("on") is None:
            raise Untranslatable(f"{(join.side or join.kind or 'cross').lower()} joins")
        step = _source("JOIN", join.this, inputs)
        step.on, step.keep_unmatched = _expr(join.args["on"]), join.side == "LEFT"
        steps.append(step)
    if (where := node.args.get("where")) is not None:
        steps += [PlanStep(action="FILTER", condition=_expr(c)) for c in _conjuncts(where.this)]
    projections = [p for p in node.expressions if not (exists and isinstance(p, exp.Literal))]
    steps += _groups(node, projections)
    steps += [_projection(p) for p in projections]
    if (having := node.args.get("having")) is not None:
        steps += [PlanStep(action="FILTER", condition=_expr(c)) for c in _conjuncts(having.this)]
    if (distinct := node.args.get("distinct")) is not None:
        on = distinct.args.get("on")
        if on is None:
            steps.append(PlanStep(action="DISTINCT"))
        else:
            steps.append(PlanStep(action="FIRST_PER", columns=[_column_name(c) for c in on.expressions]))
    if (order := node.args.get("order")) is not None:
        steps += [_order(o, projections) for o in order.expressions]
    if (limit := node.args.get("limit")) is not None:
        steps.append(PlanStep(action="LIMIT", n=int(limit.expression.name)))
    if node.args.get("offset") is not None:
        raise Untranslatable("OFFSET")
    return Plan(steps=steps, inputs=inputs)


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """One FILTER step per condition of a top-level AND."""
    return list(node.flatten()) if isinstance(node, exp.And) else [node]


def _source(action: str, node: exp.Expr, inputs: dict[str, Plan]) -> PlanStep:
    alias = node.alias or None
    if isinstance(node, exp.Subquery):
        if not alias:
            raise Untranslatable("a subquery without a name")
        inputs[alias] = _plan(node.this)
        return PlanStep(action=action, table=alias, name=alias)
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
        table = f"{node.db}.{node.name}" if node.db else node.name
        return PlanStep(action=action, table=table, name=alias)
    if isinstance(node, exp.Table) and isinstance(node.this, exp.ExplodingGenerateSeries | exp.GenerateSeries):
        series, columns = node.this, node.args["alias"].columns
        step = series.args.get("step")
        if len(columns) != 1 or not isinstance(step, exp.Interval):
            raise Untranslatable("a series without one named column and an interval step")
        spec = {"from": _expr(series.args["start"]), "to": _expr(series.args["end"]), "column": columns[0].name}
        return PlanStep(action="SCAN", name=alias, series=spec | {"step": _expr(step)["interval"]})
    raise Untranslatable(f"reading from {type(node.this).__name__}")


def _groups(node: exp.Select, projections: list[exp.Expr]) -> list[PlanStep]:
    group = node.args.get("group")
    if group is None:
        return []
    keys = [k for k in group.expressions if not isinstance(k, exp.GroupingSets)]
    sets_of = [k for k in group.expressions if isinstance(k, exp.GroupingSets)] + (
        group.args.get("grouping_sets") or []
    )
    totals = False
    for sets in sets_of:
        *kept, last = sets.expressions
        if keys or len(kept) != 1 or not isinstance(last, exp.Tuple) or last.expressions:
            raise Untranslatable("grouping sets other than (keys), ()")
        keys, totals = list(kept[0].expressions if isinstance(kept[0], exp.Tuple) else [kept[0].unnest()]), True
    steps = [PlanStep(action="GROUP_BY", expr=_expr(_positional(k, projections)), hidden=True) for k in keys]
    return steps + ([PlanStep(action="TOTALS")] if totals else [])


def _positional(node: exp.Expr, projections: list[exp.Expr]) -> exp.Expr:
    """`group by 1` / `order by 2`: the projection it points at."""
    if isinstance(node, exp.Literal) and not node.is_string:
        return projections[int(node.name) - 1].unalias()
    return node


def _projection(node: exp.Expr) -> PlanStep:
    alias = node.alias if isinstance(node, exp.Alias) else None
    inner = node.unalias()
    if isinstance(inner, exp.Star):
        raise Untranslatable("select *")
    e = _expr(inner)
    if "agg" in e and e["agg"] != "percentile" and (e["agg"] == "count" or not e.get("distinct")):
        function = "count_distinct" if e.get("distinct") else e["agg"]
        return PlanStep(action="AGGREGATE", function=function, expr=e.get("of"), only=e.get("only"), alias=alias)
    if "col" in e and alias is None:
        return PlanStep(action="SELECT", column=e["col"])
    return PlanStep(action="SELECT", expr=e, alias=alias)


def _order(node: exp.Ordered, projections: list[exp.Expr]) -> PlanStep:
    desc = bool(node.args.get("desc"))
    if bool(node.args.get("nulls_first")) != desc:
        raise Untranslatable("an ORDER BY with NULLs placed against the default")
    key = node.this
    direction = "desc" if desc else "asc"
    if isinstance(key, exp.Literal) and not key.is_string:
        target = projections[int(key.name) - 1]
        if target.alias_or_name:
            return PlanStep(action="ORDER_BY", column=target.alias_or_name, direction=direction)
        key = target.unalias()
    names = {p.alias for p in projections if isinstance(p, exp.Alias)}
    if isinstance(key, exp.Column) and not key.table and key.name in names:
        return PlanStep(action="ORDER_BY", column=key.name, direction=direction)
    return PlanStep(action="ORDER_BY", expr=_expr(key), direction=direction)


def _column_name(node: exp.Expr) -> str:
    if not isinstance(node, exp.Column):
        raise Untranslatable(f"{type(node).__name__} where a column is needed")
    return f"{node.table}.{node.name}" if node.table else node.name


def _value(node: exp.Literal) -> str | int | float:
    if node.is_string:
        return node.name
    return float(node.name) if any(c in node.name for c in ".eE") else int(node.name)


def _expr(node: exp.Expr) -> dict[str, Any]:
    if isinstance(node, exp.Paren):
        return _expr(node.this)
    if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
        return {"col": _column_name(node)}
    if isinstance(node, exp.Literal):
        return {"value": _value(node)}
    if isinstance(node, exp.Neg):
        return {"fn": "neg", "args": [_expr(node.this)]}
    if type(node) in ARITHMETIC:
        return {"fn": ARITHMETIC[type(node)], "args": [_expr(node.this), _expr(node.expression)]}
    if type(node) in COMPARISONS:
        return _negated(node, {"cmp": COMPARISONS[type(node)], "args": [_expr(node.this), _expr(node.expression)]})
    if isinstance(node, exp.And | exp.Or):
        return {"all" if isinstance(node, exp.And) else "any": [_expr(c) for c in node.flatten()]}
    if isinstance(node, exp.Not):
        inner = node.this.unnest()
        if isinstance(inner, exp.In | exp.Like | exp.Is) and not inner.args.get("negate"):
            return _negated(inner, _expr(inner), flip=True)
        return {"not": _expr(inner)}
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return _negated(node, {"cmp": "is_null", "args": [_expr(node.this)]})
    if isinstance(node, exp.In):
        if node.args.get("query") is not None or node.args.get("unnest") is not None:
            raise Untranslatable("IN over a subquery")
        return _negated(node, {"cmp": "in", "args": [_expr(node.this), [_expr(v) for v in node.expressions]]})
    if isinstance(node, exp.Between):
        return {"cmp": "between", "args": [_expr(node.this), _expr(node.args["low"]), _expr(node.args["high"])]}
    return _function(node)


def _negated(node: exp.Expr, e: dict[str, Any], *, flip: bool = False) -> dict[str, Any]:
    """sqlglot writes `x is not null` and `x not like y` as a negate flag, `not x in (...)` as Not."""
    if (flip or node.args.get("negate")) and e["cmp"] in NEGATED:
        return e | {"cmp": NEGATED[e["cmp"]]}
    if flip or node.args.get("negate"):
        return {"not": e}
    return e


def _function(node: exp.Expr) -> dict[str, Any]:
    """A function or operator node as the plan grammar writes it, read by kind (in this order)."""
    for read in (_aggregate, _subquery, _conditional, _temporal, _scalar):
        if (found := read(node)) is not None:
            return found
    raise Untranslatable(f"{type(node).__name__} ({node.sql(dialect=DIALECT)[:60]})")


def _aggregate(node: exp.Expr) -> dict[str, Any] | None:
    if isinstance(node, exp.Filter):
        e = _expr(node.this)
        if "agg" not in e:
            raise Untranslatable("FILTER on something that is not an aggregate")
        return e | {"only": _expr(node.expression.this)}
    if type(node) in AGGREGATES:
        arg = node.this
        distinct = isinstance(arg, exp.Distinct)
        if distinct:
            if len(arg.expressions) != 1:
                raise Untranslatable("DISTINCT over several columns")
            arg = arg.expressions[0]
        agg: dict[str, Any] = {"agg": AGGREGATES[type(node)]}
        if not isinstance(arg, exp.Star):
            agg["of"] = _expr(arg)
        return agg | ({"distinct": True} if distinct else {})
    if isinstance(node, exp.WithinGroup) and isinstance(node.this, exp.PercentileCont):
        (ordered,) = node.expression.expressions
        if ordered.args.get("desc"):
            raise Untranslatable("a descending percentile")
        return {"agg": "percentile", "p": _value(node.this.this), "of": _expr(ordered.this)}
    return None


def _subquery(node: exp.Expr) -> dict[str, Any] | None:
    if isinstance(node, exp.Exists):
        return {"exists": _plan(node.this, exists=True).model_dump(exclude_defaults=True)}
    if isinstance(node, exp.Subquery):
        if node.sql(dialect=DIALECT).lower() == "(select pinned_now from meta.snapshot)":
            return {"now": "snapshot"}
        return {"scalar": _plan(node.this).model_dump(exclude_defaults=True)}
    return None


def _conditional(node: exp.Expr) -> dict[str, Any] | None:
    if isinstance(node, exp.Case):
        cases = [[_expr(i.this), _expr(i.args["true"])] for i in node.args["ifs"]]
        default = node.args.get("default")
        return {"when": cases} | ({"else": _expr(default)} if default is not None else {})
    if isinstance(node, exp.If):
        cases = [[_expr(node.this), _expr(node.args["true"])]]
        default = node.args.get("false")
        return {"when": cases} | ({"else": _expr(default)} if default is not None else {})
    return None


def _temporal(node: exp.Expr) -> dict[str, Any] | None:
    """Casts (a date literal among them), intervals, truncation, formatting and parts of a time."""
    if isinstance(node, exp.Cast):
        kind = node.to.this.name
        if kind in ("DATE", "TIMESTAMP") and isinstance(node.this, exp.Literal) and node.this.is_string:
            return {"date": node.this.name}
        if kind not in CASTS:
            raise Untranslatable(f"a cast to {kind.lower()}")
        return {"cast": CASTS[kind], "of": _expr(node.this)}
    if isinstance(node, exp.Interval):
        unit = node.args.get("unit")
        text = f"{node.this.name} {unit.name}" if unit is not None else node.this.name
        return {"interval": text.strip().lower()}
    if isinstance(node, exp.TimestampTrunc | exp.DateTrunc):
        return {"bucket": node.args["unit"].name.lower(), "of": _expr(node.this)}
    if isinstance(node, exp.TimeToStr):
        fmt = node.args["format"].name
        for token, pg in DATE_TOKENS.items():
            fmt = fmt.replace(token, pg)
        return {"format": fmt, "of": _expr(node.this)}
    if isinstance(node, exp.Extract):
        return {"part": node.this.name.lower(), "of": _expr(node.expression)}
    return None


def _scalar(node: exp.Expr) -> dict[str, Any] | None:
    if isinstance(node, exp.Grouping):
        (inner,) = node.expressions
        return {"is_total": _expr(inner)}
    if isinstance(node, exp.Round):
        args = [_expr(node.this)] + ([_expr(node.args["decimals"])] if node.args.get("decimals") else [])
        return {"fn": "round", "args": args}
    if isinstance(node, exp.Nullif | exp.Left):
        return {"fn": type(node).__name__.lower(), "args": [_expr(node.this), _expr(node.expression)]}
    if isinstance(node, exp.Coalesce | exp.Greatest | exp.Least):
        return {"fn": type(node).__name__.lower(), "args": [_expr(node.this), *map(_expr, node.expressions)]}
    if type(node) in FUNCTIONS:
        return {"fn": FUNCTIONS[type(node)], "args": [_expr(node.this)]}
    return None
