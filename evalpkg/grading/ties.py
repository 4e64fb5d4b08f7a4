"""Which gold rows may trade places, and which rows a LIMIT may keep: read from the gold itself.

A grader accepts tied rows in any order, whatever the ORDER BY sorts on: an expression (`abs(change)`),
a CASE, an alias or a position. So the gold is re-run once with its ORDER BY expressions as hidden key
columns, and rows with equal keys form one tie group. Where a LIMIT cuts through a tie, any of the tied
rows is as right as the ones the gold happened to keep: the gold re-run with FETCH FIRST n ROWS WITH TIES
gives them all, and each choice of the tied rows is an acceptable gold, as is the list of them all.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from itertools import combinations
from typing import Any

from sqlglot import exp

from evalpkg.errors import SqlParseError
from evalpkg.grading.comparator import tie_groups
from evalpkg.sql.order import order_targets
from evalpkg.sql.parse import DIALECT, parse_statement
from evalpkg.sql.vocabulary import TIME_NAME, TIME_VALUE

HIDDEN = "evalpkg_order_key_"
_ID_NAME = re.compile(r"(^|[._])(id|\w*_id|\w*dm|\w*code|\w*mc|\w*mc_en|name|no)$", re.IGNORECASE)
MAX_TIE_CHOICES = 64  # beyond this many ways to fill a cut tie, only the gold's own choice is accepted
Rows = list[list[Any]]


@dataclass(frozen=True)
class Keyed:
    """The gold with its ORDER BY expressions appended as hidden columns (where they name no output
    column): `keys` are the result columns each ORDER BY item reads, `names` what each sorts on."""

    tree: exp.Select
    keys: list[int]
    names: list[str]
    limit: int | None
    hidden: int  # how many key columns were appended

    @property
    def sql(self) -> str:
        return self.tree.sql(dialect=DIALECT)

    def with_ties(self, significant: int) -> str:
        """The rewrite sorted on its first `significant` keys only, every row tied at the LIMIT kept."""
        tree = self.tree.copy()
        order = tree.args["order"]
        order.set("expressions", order.expressions[:significant])
        fetch = exp.Fetch(
            direction="FIRST",
            count=exp.Literal.number(self.limit),
            limit_options=exp.LimitOptions(rows=True, with_ties=True),
        )
        tree.set("limit", fetch)
        return tree.sql(dialect=DIALECT)


@dataclass(frozen=True)
class Ordered:
    """One acceptable gold: its rows and, per row, its tie group (None: the order is not known)."""

    rows: Rows
    groups: list[int] | None


def keyed(sql: str, columns: list[str]) -> Keyed | None:
    """The rewrite, or None where there is no ORDER BY or it cannot be read (then the caller keeps the
    gold as it is)."""
    try:
        tree = parse_statement(sql)
    except SqlParseError:
        return None
    order = tree.args.get("order")
    if order is None or not isinstance(tree, exp.Select) or any(isinstance(e, exp.Star) for e in tree.expressions):
        return None
    keys, hidden = order_keys(tree, [c.lower() for c in columns], HIDDEN)
    if not all(0 <= k < len(columns) + len(hidden) for k in keys):
        return None
    names = [columns[k] if k < len(columns) else hidden[k - len(columns)].this.sql(dialect=DIALECT) for k in keys]
    rewritten = tree.copy()
    rewritten.set("expressions", [*rewritten.expressions, *hidden])
    limit = _limit(tree)
    if limit is None:
        rewritten.set("limit", None)
    return Keyed(rewritten, keys, names, limit, len(hidden))


def order_keys(tree: exp.Select, outputs: list[str], alias: str) -> tuple[list[int], list[exp.Expr]]:
    """For each ORDER BY item, the result column it sorts on (order_targets), a hidden column appended
    after the outputs where no output is it; and those hidden columns, named `alias` + their number."""
    keys: list[int] = []
    hidden: list[exp.Expr] = []
    for item, target in zip(tree.args["order"].expressions, order_targets(tree, outputs), strict=True):
        if target is not None:
            keys.append(target)
        else:
            keys.append(len(outputs) + len(hidden))
            hidden.append(exp.alias_(item.this.copy(), f"{alias}{len(hidden)}"))
    return keys, hidden


def _limit(tree: exp.Select) -> int | None:
    """The LIMIT (or FETCH FIRST n ROWS ONLY) as a number; None where there is none, it is not a literal
    or the gold already keeps every tied row."""
    limit = tree.args.get("limit")
    if limit is None or tree.args.get("offset") is not None:
        return None
    options = limit.args.get("limit_options")
    if options is not None and options.args.get("with_ties"):
        return None
    count = limit.expression if isinstance(limit, exp.Limit) else limit.args.get("count")
    return int(count.this) if isinstance(count, exp.Literal) and count.is_int else None


@cache
def has_limit(sql: str) -> bool:
    """Whether the query keeps only its first rows (LIMIT / FETCH FIRST): a top N."""
    try:
        tree = parse_statement(sql)
    except SqlParseError:
        return True  # unknown: keep every row the prediction has
    return isinstance(tree, exp.Query) and tree.args.get("limit") is not None


def significant_keys(names: list[str], values: list[list[Any]]) -> int:
    """How many leading ORDER BY keys the question asks for: trailing keys that only break ties (an id, a
    code or a name: `order by n desc, ksdm`) are not, as long as one key is left. A period is never a
    tie-breaker (`order by year, month`)."""
    significant = len(names)
    while significant > 1 and _tie_breaker(names[significant - 1], [v[significant - 1] for v in values]):
        significant -= 1
    return significant


def _tie_breaker(name: str, values: list[Any]) -> bool:
    if TIME_NAME.search(name):
        return False
    if _ID_NAME.search(name):
        return True
    texts = [v for v in values if v is not None]
    return all(isinstance(v, str) for v in texts) and not any(TIME_VALUE.match(v) for v in texts)


def acceptable(gold_rows: Rows, width: int, rewrite: Keyed, run: Callable[[str], Rows]) -> list[Ordered] | None:
    """The golds a grader accepts in place of `gold_rows`: the same rows with their tie groups on the keys
    the question asks for, and where the LIMIT cuts through such a tie, each choice of the tied rows. None
    where the rewritten gold does not return the gold's rows (then the caller keeps the gold as it is)."""
    full = run(rewrite.sql) if rewrite.hidden else gold_rows
    if [r[:width] for r in full] != gold_rows:  # the rewrite must not change what the gold returns
        return None
    significant = significant_keys(rewrite.names, [[r[k] for k in rewrite.keys] for r in full])
    keys = rewrite.keys[:significant]
    if rewrite.limit is None or len(gold_rows) < rewrite.limit:
        return [Ordered(gold_rows, tie_groups([tuple(r[k] for k in keys) for r in full]))]
    tied = run(rewrite.with_ties(significant))
    visible, groups = [r[:width] for r in tied], tie_groups([tuple(r[k] for k in keys) for r in tied])
    n = len(gold_rows)
    if len(visible) < n or not _sub_bag(gold_rows, visible):
        return None
    head = groups.index(groups[n - 1])  # the rows before the tie group the LIMIT cut
    if len(visible) == n or not _sub_bag(visible[:head], gold_rows):
        return [Ordered(gold_rows, groups[:n])] if len(visible) == n else None
    # every row tied at the cut, as FETCH FIRST n ROWS WITH TIES keeps them, is as right as any choice
    every_tied = Ordered(visible, groups)
    choices: dict[tuple[Any, ...], tuple[list[Any], ...]] = {}
    for pick in combinations(visible[head:], n - head):  # lazily: a long tie has very many choices
        choices.setdefault(tuple(map(_frozen, pick)), pick)
        if len(choices) > MAX_TIE_CHOICES:
            return [Ordered(gold_rows, groups[:n]), every_tied]
    return [*(Ordered(visible[:head] + list(pick), groups[:n]) for pick in choices.values()), every_tied]


def _frozen(row: list[Any]) -> tuple[Any, ...]:
    return tuple(repr(v) for v in row)


def _sub_bag(small: Rows, big: Rows) -> bool:
    left = Counter(map(_frozen, big))
    left.subtract(map(_frozen, small))
    return min(left.values(), default=0) >= 0
