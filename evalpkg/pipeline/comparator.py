"""Execution match (SPEC §9): bag semantics, order only when the gold orders, column order and names
ignored, numeric tolerance, NULLs equal, success-empty distinct from failure, several golds."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import sqlglot
from sqlglot import exp

Row = Sequence[Any]
MAX_PERMUTED_COLUMNS = 7


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    return None


def _canon(v: Any) -> Any:
    n = _num(v)
    if n is not None:
        return ("n", float(f"{n:.9g}")) if math.isfinite(n) else ("n", str(n))
    if v is None:
        return ("null",)
    return ("s", str(v).strip())


def _close(a: Any, b: Any, rel_tol: float) -> bool:
    x, y = _num(a), _num(b)
    if x is not None and y is not None:
        return math.isclose(x, y, rel_tol=rel_tol, abs_tol=rel_tol * 1e-3 if rel_tol else 1e-12)
    return bool(_canon(a) == _canon(b))


def _rows_close(a: Row, b: Row, rel_tol: float) -> bool:
    return len(a) == len(b) and all(_close(x, y, rel_tol) for x, y in zip(a, b, strict=True))


def _bag_equal(pred: Sequence[Row], gold: Sequence[Row], rel_tol: float) -> bool:
    if len(pred) != len(gold):
        return False
    left = Counter(tuple(_canon(v) for v in r) for r in pred)
    right = Counter(tuple(_canon(v) for v in r) for r in gold)
    exact = left & right
    rest_p = [r for r in pred if not _take(exact, r)]
    exact = left & right
    rest_g = [r for r in gold if not _take(exact, r)]
    for g in rest_g:  # leftovers differ only by float noise, if at all: greedy tolerant match
        hit = next((i for i, p in enumerate(rest_p) if _rows_close(p, g, rel_tol)), None)
        if hit is None:
            return False
        rest_p.pop(hit)
    return not rest_p


def _take(counter: Counter[tuple[Any, ...]], row: Row) -> bool:
    key = tuple(_canon(v) for v in row)
    if counter[key] > 0:
        counter[key] -= 1
        return True
    return False


def _ordered_equal(pred: Sequence[Row], gold: Sequence[Row], rel_tol: float, key_cols: list[int] | None) -> bool:
    if len(pred) != len(gold):
        return False
    if not key_cols:
        return all(_rows_close(p, g, rel_tol) for p, g in zip(pred, gold, strict=True))
    start = 0  # rows that tie on the sort key may come in any order
    while start < len(gold):
        end = start + 1
        while end < len(gold) and all(_close(gold[end][c], gold[start][c], rel_tol) for c in key_cols):
            end += 1
        if not _bag_equal(pred[start:end], gold[start:end], rel_tol):
            return False
        start = end
    return True


def order_key_columns(gold_sql: str, columns: list[str]) -> list[int] | None:
    """Output positions the gold's final ORDER BY sorts on (None: cannot tell)."""
    try:
        tree = sqlglot.parse_one(gold_sql, dialect="postgres")
    except sqlglot.errors.SqlglotError:
        return None
    order = tree.args.get("order")
    if order is None:
        return None
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    names = [e.alias_or_name.lower() for e in select.expressions] if select else [c.lower() for c in columns]
    keys = []
    for o in order.expressions:
        target = o.this
        if isinstance(target, exp.Literal) and target.is_int:
            keys.append(int(target.this) - 1)
        elif target.alias_or_name.lower() in names:
            keys.append(names.index(target.alias_or_name.lower()))
        else:
            return None
    return keys


def match(
    pred: Sequence[Row] | None,
    gold: Sequence[Row],
    *,
    order_matters: bool = False,
    rel_tol: float = 1e-6,
    order_keys: list[int] | None = None,
) -> bool:
    """pred None means the agent has no successful result (failure): never a match."""
    if pred is None:
        return False
    if not gold or not pred:
        return not gold and not pred  # success-empty matches only an empty gold
    width = len(gold[0])
    if any(len(r) != width for r in pred):
        return False
    perms: list[tuple[int, ...]]
    if width <= MAX_PERMUTED_COLUMNS:
        perms = list(itertools.permutations(range(width)))
        perms.sort(key=lambda p: p != tuple(range(width)))  # identity first
    else:
        perms = [tuple(range(width))]
    for perm in perms:
        permuted = [[r[i] for i in perm] for r in pred]
        if order_matters:
            if _ordered_equal(permuted, gold, rel_tol, order_keys):
                return True
        elif _bag_equal(permuted, gold, rel_tol):
            return True
    return False
