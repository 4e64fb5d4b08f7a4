"""The one reading of a query's ORDER BY: which output column each item sorts on. The comparator (which
columns order an ordered gold), the tie rules and the determinism probe all ask it."""

from __future__ import annotations

from sqlglot import exp

from evalpkg.sql.parse import DIALECT


def order_targets(tree: exp.Expr, outputs: list[str]) -> list[int | None]:
    """For each ORDER BY item, the output column it sorts on (by position; a bare output name, which means
    the output column; the very expression an output computes; a qualified column an output selects),
    None where it sorts on something no output is. `outputs`: the output names, lower case."""
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    selected = [e.this if isinstance(e, exp.Alias) else e for e in (select.expressions if select else [])]
    bodies = [e.sql(dialect=DIALECT) for e in selected]
    targets: list[int | None] = []
    for item in tree.args["order"].expressions:
        target = item.this
        if isinstance(target, exp.Literal) and target.is_int:
            targets.append(int(target.this) - 1)
        elif isinstance(target, exp.Column) and not target.table and target.name.lower() in outputs:
            targets.append(outputs.index(target.name.lower()))
        elif (body := target.sql(dialect=DIALECT)) in bodies:
            targets.append(bodies.index(body))
        else:
            targets.append(_same_column(target, selected))
    return targets


def _same_column(target: exp.Expr, selected: list[exp.Expr]) -> int | None:
    """`order by v.ksdm` where an output selects `ksdm` (of the one table) or `v.ksdm` under an alias."""
    if not isinstance(target, exp.Column):
        return None
    same = [
        i
        for i, e in enumerate(selected)
        if isinstance(e, exp.Column) and e.name.lower() == target.name.lower() and e.table in ("", target.table)
    ]
    return same[0] if len(same) == 1 else None
