"""Which gold rows may trade places, and which rows a LIMIT may keep: read from the gold itself.

A grader accepts tied rows in any order, whatever the ORDER BY sorts on: an expression (`abs(change)`),
a CASE, an alias or a position. So the gold is re-run once with its ORDER BY expressions as hidden key
columns, and rows with equal keys form one tie group. Where a LIMIT cuts through a tie, any of the tied
rows is as right as the ones the gold happened to keep: the gold re-run with FETCH FIRST n ROWS WITH TIES
gives them all, and each choice of the tied rows is an acceptable gold.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import sqlglot
from sqlglot import exp

from evalpkg.grading.comparator import tie_groups

HIDDEN = "evalpkg_order_key_"
MAX_TIE_CHOICES = 64  # beyond this many ways to fill a cut tie, only the gold's own choice is accepted
Rows = list[list[Any]]


@dataclass(frozen=True)
class Keyed:
    """The gold rewritten: hidden key columns appended (where the ORDER BY names no output column), the
    LIMIT as WITH TIES; `keys` are the result columns each ORDER BY item reads."""

    sql: str
    keys: list[int]
    limit: int | None
    hidden: int  # how many key columns were appended

    @property
    def changes_rows(self) -> bool:
        """Whether the rewrite returns other rows than the gold (else the gold's rows carry the keys)."""
        return bool(self.hidden) or self.limit is not None


@dataclass(frozen=True)
class Ordered:
    """One acceptable gold: its rows and, per row, its tie group (None: the order is not known)."""

    rows: Rows
    groups: list[int] | None


def keyed(sql: str, columns: list[str]) -> Keyed | None:
    """The rewrite, or None where there is no ORDER BY or it cannot be read (then the caller keeps the
    gold as it is)."""
    try:
        tree = sqlglot.parse_one(sql, dialect="postgres")
    except sqlglot.errors.SqlglotError:
        return None
    order = tree.args.get("order")
    if order is None or not isinstance(tree, exp.Select) or any(isinstance(e, exp.Star) for e in tree.expressions):
        return None
    names = [c.lower() for c in columns]
    keys: list[int] = []
    hidden: list[exp.Expr] = []
    for item in order.expressions:
        target = item.this
        if isinstance(target, exp.Literal) and target.is_int:
            keys.append(int(target.this) - 1)
        elif isinstance(target, exp.Column) and not target.table and target.name.lower() in names:
            keys.append(names.index(target.name.lower()))  # a bare output name means the output column
        else:
            keys.append(len(columns) + len(hidden))
            hidden.append(exp.alias_(target.copy(), f"{HIDDEN}{len(hidden)}"))
    if not all(0 <= k < len(columns) + len(hidden) for k in keys):
        return None
    rewritten = tree.copy()
    if hidden:
        rewritten.set("expressions", [*rewritten.expressions, *hidden])
    limit = _limit(tree)
    if limit is not None:
        rewritten.set("limit", None)
        fetch = exp.Fetch(
            direction="FIRST",
            count=exp.Literal.number(limit),
            limit_options=exp.LimitOptions(rows=True, with_ties=True),
        )
        rewritten.set("limit", fetch)
    return Keyed(rewritten.sql(dialect="postgres"), keys, limit, len(hidden))


def _limit(tree: exp.Select) -> int | None:
    limit = tree.args.get("limit")
    count = limit.expression if isinstance(limit, exp.Limit) else limit.args.get("count") if limit else None
    if (
        isinstance(limit, exp.Fetch)
        and limit.args.get("limit_options")
        and limit.args["limit_options"].args.get("with_ties")
    ):
        return None  # already WITH TIES: the gold keeps every tied row itself
    return int(count.this) if isinstance(count, exp.Literal) and count.is_int else None


def acceptable(gold_rows: Rows, width: int, rewrite: Keyed, run: Callable[[str], Rows]) -> list[Ordered] | None:
    """The golds a grader accepts in place of `gold_rows`: the same rows with their tie groups, and where
    the LIMIT cuts a tie, each choice of the tied rows. None where the rewritten gold does not return the
    gold's rows (then the caller keeps the gold as it is)."""
    full = run(rewrite.sql) if rewrite.changes_rows else gold_rows
    visible = [r[:width] for r in full]
    groups = tie_groups([tuple(r[k] for k in rewrite.keys) for r in full])
    n = len(gold_rows)
    if len(visible) < n or (rewrite.limit is None and len(visible) != n):
        return None
    if not _sub_bag(gold_rows, visible):
        return None
    if len(visible) == n:
        return [Ordered(visible, groups)]
    head = groups.index(groups[n - 1])  # the rows before the tie group the LIMIT cut
    if not _sub_bag(visible[:head], gold_rows):
        return None
    choices: dict[tuple[Any, ...], tuple[list[Any], ...]] = {}
    for pick in combinations(visible[head:], n - head):  # lazily: a long tie has very many choices
        choices.setdefault(tuple(map(_frozen, pick)), pick)
        if len(choices) > MAX_TIE_CHOICES:
            return [Ordered(gold_rows, groups[:n])]
    return [Ordered(visible[:head] + list(pick), groups[:n]) for pick in choices.values()]


def _frozen(row: list[Any]) -> tuple[Any, ...]:
    return tuple(repr(v) for v in row)


def _sub_bag(small: Rows, big: Rows) -> bool:
    left = Counter(map(_frozen, big))
    left.subtract(map(_frozen, small))
    return min(left.values(), default=0) >= 0
