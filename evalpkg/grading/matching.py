"""Rows matched within tolerance (a proper matching where sorted pairing fails) and the search for a column
assignment: which prediction column stands for each gold column."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from itertools import count, starmap
from typing import Any, cast

import numpy as np

from evalpkg.grading.columns import Column, abs_tol, close, tolerant, view
from evalpkg.grading.values import Floats, Ints

MAX_ASSIGNMENT_CHECKS = 1000  # only columns with equal values in different rows make the search branch


def rows_equal(pairs: list[tuple[Column, Column]], segments: list[int] | None, rel_tol: float) -> bool:
    """Bag equality of the rows on these column pairs; segments pin rows to the gold's ordered positions."""
    n = len(pairs[0][0].tokens)
    g_exact: list[list[Any]] = [segments] if segments else []
    p_exact: list[list[Any]] = [segments] if segments else []
    g_num: list[Floats] = []
    p_num: list[Floats] = []
    for g, p in starmap(view, pairs):
        numbers = tolerant(g, p)
        if numbers is None:
            g_exact.append(g.tokens)
            p_exact.append(p.tokens)
            continue
        if g.shape or p.shape:  # where the markers are must agree exactly
            g_exact.append(g.shape or [None] * n)
            p_exact.append(p.shape or [None] * n)
        g_num.append(numbers[0])
        p_num.append(numbers[1])
    for j, anchor in enumerate(g_exact):  # the common case: a gold column of distinct values pairs the rows
        row_of = dict(zip(anchor, count()))
        if len(row_of) == n:
            where = list(map(row_of.get, p_exact.pop(j)))
            del g_exact[j]
            return None not in where and paired_rows_equal(
                cast(list[int], where), g_exact, p_exact, g_num, p_num, rel_tol
            )
    if not g_num:
        return dict(Counter(zip(*g_exact, strict=True))) == dict(Counter(zip(*p_exact, strict=True)))
    codes = exact_codes(g_exact, p_exact, n)
    return codes is not None and sorted_rows_equal(*codes, np.column_stack(g_num), np.column_stack(p_num), rel_tol)


def exact_codes(g_exact: list[list[Any]], p_exact: list[list[Any]], n: int) -> tuple[Ints, Ints] | None:
    """The rows' exact parts as integers, for numpy (None: a prediction row's exact part is not the gold's)."""
    if not g_exact:
        return np.zeros(n, np.intp), np.zeros(n, np.intp)
    g_keys, p_keys = list(zip(*g_exact, strict=True)), list(zip(*p_exact, strict=True))
    codes = dict(zip(g_keys, count()))
    p_codes = list(map(codes.get, p_keys))
    if None in p_codes:
        return None
    return np.array(list(map(codes.__getitem__, g_keys)), dtype=np.intp), np.array(p_codes, dtype=np.intp)


def paired_rows_equal(
    where: list[int],
    g_exact: list[list[Any]],
    p_exact: list[list[Any]],
    g_num: list[Floats],
    p_num: list[Floats],
    rel_tol: float,
) -> bool:
    """Pred row i stands against gold row where[i]."""
    index = np.array(where, dtype=np.intp)
    if np.bincount(index, minlength=len(where)).max() != 1:
        return False
    if any(list(map(g.__getitem__, where)) != p for g, p in zip(g_exact, p_exact, strict=True)):
        return False
    return all(close(g[index], p, rel_tol).all() for g, p in zip(g_num, p_num, strict=True))


def sorted_rows_equal(g_code: Ints, p_code: Ints, gold: Floats, pred: Floats, rel_tol: float) -> bool:
    """Rows with equal exact parts (codes) paired by sorting on the tolerant columns; where that pairing
    fails, a proper matching decides."""
    g_order = np.lexsort([*gold.T[1::-1], g_code])  # by exact part, then the first two tolerant columns
    p_order = np.lexsort([*pred.T[1::-1], p_code])
    g_code, gold, p_code, pred = g_code[g_order], gold[g_order], p_code[p_order], pred[p_order]
    if not np.array_equal(g_code, p_code):
        return False
    near = close(gold, pred, rel_tol).all(axis=1)
    if near.all():
        return True
    # Cut the sorted rows where no tolerant pair can straddle the cut (another exact part, or a gap wider than
    # the tolerance on the sorted column) and match properly only the blocks where sorted pairing failed.
    top, bottom = np.maximum(gold[:, 0], pred[:, 0]), np.minimum(gold[:, 0], pred[:, 0])
    gap = (bottom[1:] > top[:-1]) & ~close(top[:-1], bottom[1:], rel_tol)
    starts = np.concatenate([[0], np.flatnonzero((g_code[1:] != g_code[:-1]) | gap) + 1, [len(gold)]])
    for block in np.unique(np.searchsorted(starts, np.flatnonzero(~near), "right") - 1):
        lo, hi = starts[block], starts[block + 1]
        if hi - lo == 1 or not matching_within_tolerance(gold[lo:hi], pred[lo:hi], rel_tol):
            return False
    return True


def matching_within_tolerance(gold: Floats, pred: Floats, rel_tol: float) -> bool:
    """A perfect matching of gold to pred rows within tolerance, as a max flow from distinct gold rows to
    distinct pred rows; only pairs within a window on the most varied column are tried."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    g_rows, g_count = np.unique(gold, axis=0, return_counts=True)
    p_rows, p_count = np.unique(pred, axis=0, return_counts=True)
    col = max(range(gold.shape[1]), key=lambda c: len(np.unique(g_rows[:, c])))
    order = np.argsort(p_rows[:, col], kind="stable")
    keys, x = p_rows[order, col], g_rows[:, col]
    reach = 1.000001 * np.maximum(np.abs(x) * rel_tol / (1 - rel_tol), abs_tol(rel_tol)) if rel_tol < 1 else np.inf
    lo, hi = np.searchsorted(keys, x - reach, "left"), np.searchsorted(keys, x + reach, "right")
    counts = hi - lo
    g_of = np.repeat(np.arange(len(g_rows)), counts)
    p_of = order[np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())]
    near = close(g_rows[g_of], p_rows[p_of], rel_tol).all(axis=1)
    a, b = len(g_rows), len(p_rows)  # nodes: source 0, gold 1..a, pred a+1..a+b, sink a+b+1
    tails = np.concatenate([np.zeros(a, np.intp), 1 + g_of[near], 1 + a + np.arange(b)])
    heads = np.concatenate([1 + np.arange(a), 1 + a + p_of[near], np.full(b, a + b + 1)])
    caps = np.concatenate([g_count, np.full(near.sum(), len(gold)), p_count]).astype(np.int32)
    graph = csr_matrix((caps, (tails, heads)), shape=(a + b + 2, a + b + 2))
    return int(maximum_flow(graph, 0, a + b + 1).flow_value) == len(gold)


def find_assignment(candidates: list[list[int]], pred: list[Column], rows_ok: Callable[[dict[int, int]], bool]) -> str:
    """Depth-first over gold -> pred column choices, most constrained gold column first, checking the rows of
    the columns chosen so far at every real choice and at the end. Identical pred columns form one class, so
    choosing among them never branches. Returns "" when an assignment matches, else why none does."""
    classes: dict[Any, list[int]] = {}
    ambiguous = any(len(c) > 1 for c in candidates)
    for p in sorted({p for c in candidates for p in c}):
        classes.setdefault(tuple(pred[p].tokens) if ambiguous else p, []).append(p)
    members = {m[0]: m for m in classes.values()}
    rep = {p: m[0] for m in classes.values() for p in m}
    order = sorted(range(len(candidates)), key=lambda j: len({rep[p] for p in candidates[j]}))
    chosen: dict[int, int] = {}
    used: Counter[int] = Counter()
    checks = leaves = 0

    def walk(depth: int) -> bool:
        nonlocal checks, leaves
        if depth == len(order):
            return True
        j, last = order[depth], depth == len(order) - 1
        options = sorted(r for r in {rep[p] for p in candidates[j]} if used[r] < len(members[r]))
        for r in options:
            chosen[j] = members[r][used[r]]
            used[r] += 1
            leaves += last
            needs_check = len(options) > 1 or last
            checks += needs_check
            if (not needs_check or (checks <= MAX_ASSIGNMENT_CHECKS and rows_ok(chosen))) and walk(depth + 1):
                return True
            used[r] -= 1
            del chosen[j]
        return False

    if walk(0):
        return ""
    if not leaves:
        return "gold columns cannot each get a distinct prediction column"
    if checks > MAX_ASSIGNMENT_CHECKS:
        return f"column assignment still ambiguous after {MAX_ASSIGNMENT_CHECKS} row checks"
    return "rows differ on the matched columns"
