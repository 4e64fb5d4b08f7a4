"""The plan object of the plan strategy: semantic steps, no SQL keywords. A model writes it,
`compile_plan` turns it into SQL deterministically, `plan_from_sql` derives the gold plans.

Expressions (in `expr`, `condition`, `only`, `on`) are small JSON objects, one form each:
  {"col": "v.ryrq"}                          a column (table or name.column; bare when unambiguous)
  {"value": 7.5}                             a string or number
  {"fn": "div", "args": [a, b]}              add sub mul div neg round abs nullif coalesce left
                                             greatest least lower upper concat
  {"agg": "count", "of": e, "distinct": true, "only": cond, "p": 0.5}
                                             count sum avg min max median percentile (p); "only" counts
                                             only the rows meeting cond
  {"cmp": ">=", "args": [a, b]}              = <> < <= > >= like in (b: a list) between (b, c) is_null
                                             not_null
  {"all": [c, ...]}  {"any": [c, ...]}  {"not": c}
  {"exists": plan}                           rows of a subplan (which may refer to this plan's tables)
  {"scalar": plan}                           the one value of a subplan
  {"when": [[cond, e], ...], "else": e}      the first matching case
  {"interval": "3 months"}  {"now": "snapshot"}  {"date": "2024-01-01"}
  {"bucket": "month", "of": e}               the period's start (day week month quarter year)
  {"format": "YYYY-MM", "of": e}             a date as text
  {"part": "quarter", "of": e}               year quarter month day dow hour epoch (a number)
  {"cast": "numeric", "of": e}               int numeric text date timestamp
  {"is_total": e}                            1 on the total row of a grouped column (TOTALS), else 0
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

PLAN_FORMAT_VERSION = 2

Action = Literal[
    "SCAN", "JOIN", "FILTER", "AGGREGATE", "GROUP_BY", "TOTALS", "SELECT", "DISTINCT", "FIRST_PER", "ORDER_BY", "LIMIT"
]


class PlanStep(BaseModel):
    action: Action
    table: str | None = None  # SCAN, JOIN: a catalog table or the name of one of the plan's inputs
    name: str | None = None  # SCAN, JOIN: what the other steps call it (default: the table's name)
    series: dict[str, Any] | None = None  # SCAN: a calendar {"from": e, "to": e, "step": "1 month", "column": c}
    on: list[str] | dict[str, Any] = []  # JOIN: [left table.column, right table.column] or a condition
    keep_unmatched: bool = False  # JOIN: keep the rows so far that have no match (their joined columns empty)
    column: str | None = None  # FILTER, SELECT, GROUP_BY, ORDER_BY, AGGREGATE: table.column
    expr: dict[str, Any] | None = None  # SELECT, GROUP_BY, ORDER_BY, AGGREGATE (its argument): an expression
    op: str | None = None  # FILTER on a column
    value: str | float | int | list[str | float | int] | None = None  # FILTER on a column
    condition: dict[str, Any] | None = None  # FILTER: an expression; one that aggregates filters the groups
    function: str | None = None  # AGGREGATE
    only: dict[str, Any] | None = None  # AGGREGATE: only the rows meeting this condition
    alias: str | None = None  # SELECT, AGGREGATE: the output column's name
    hidden: bool = False  # GROUP_BY: group by it without showing it
    columns: list[str] = []  # FIRST_PER: the first row (by ORDER_BY) of each combination of these
    direction: Literal["asc", "desc"] = "asc"
    n: int | None = None  # LIMIT


class Plan(BaseModel):
    steps: list[PlanStep] = Field(min_length=1)
    inputs: dict[str, Plan] = {}  # named subplans a SCAN or JOIN may read, in order (a later one may read earlier)
