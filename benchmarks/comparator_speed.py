"""Execution-match comparator speed, measured in one run (no database needed):

1. 100,000 rows x 8 columns (an id, two text columns, a month label, a count, three floats), the
   prediction's rows shuffled, its columns permuted and its floats perturbed by 1e-9 relative: the
   comparator's time vs the floor, a plain sort-and-compare of the same rows with the columns already
   aligned (`sorted(map(tuple, pred)) == sorted(map(tuple, gold))`), and their ratio (target: under 3);
   the same with eight float columns; and the prediction's floats rounded to 2 decimals where the gold's
   are not (version 3 reads the gold at the prediction's decimals);
2. 12 columns of which several are identical copies (1,000 and 100,000 rows): choosing among identical
   columns must not branch the assignment;
3. wrong 7-column, 1,000-row answers (the permutation search of version 1 took minutes on such).

Timings are the best of several interleaved runs with the garbage collector off, as timeit has them.

    .venv/bin/python benchmarks/comparator_speed.py
"""

from __future__ import annotations

import gc
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalpkg.grading.comparator import COMPARATOR_VERSION, match

Rows = list[list[Any]]


def best_of(runs: int, *fns: Callable[[], object]) -> list[tuple[float, object]]:
    """Each function's best time and result, with the garbage collector off as timeit has it; the runs
    interleave, so that load on a shared machine weighs on all of them alike."""
    best: list[tuple[float, object]] = [(float("inf"), None)] * len(fns)
    for _ in range(runs):
        for i, fn in enumerate(fns):
            gc.collect()
            gc.disable()
            t0 = time.perf_counter()
            result = fn()
            took = time.perf_counter() - t0
            gc.enable()
            best[i] = min(best[i], (took, result), key=lambda b: b[0])
    return best


def mixed_table(rng: random.Random, n: int) -> Rows:
    departments = [f"科室{i:02d}" for i in range(30)]
    return [
        [
            100_000 + i,
            f"V{rng.randrange(10**9):09d}",
            rng.choice(departments),
            f"2024-{rng.randint(1, 12):02d}",
            rng.randint(0, 500),
            rng.uniform(0, 1000),
            rng.gauss(50, 20),
            rng.random(),
        ]
        for i in range(n)
    ]


def float_table(rng: random.Random, n: int) -> Rows:
    return [[rng.uniform(-1000, 1000) for _ in range(8)] for _ in range(n)]


def disguise(rng: random.Random, gold: Rows) -> tuple[Rows, Rows]:
    """(aligned, disguised): rows shuffled and floats perturbed; the second also has its columns permuted."""
    aligned = [[v * (1 + rng.choice((-1e-9, 1e-9))) if isinstance(v, float) else v for v in r] for r in gold]
    rng.shuffle(aligned)
    return aligned, permute_columns(rng, aligned)


def permute_columns(rng: random.Random, rows: Rows) -> Rows:
    perm = list(range(len(rows[0])))
    rng.shuffle(perm)
    return [[r[i] for i in perm] for r in rows]


def twelve(rows: Rows) -> Rows:
    """Four columns and copies of them, as a SELECT naming the same expressions several times would."""
    return [[a, b, c, d, a, a, b, b, d, d, c, a] for a, b, c, d in rows]


def speed_vs_floor(label: str, gold: Rows, rng: random.Random) -> None:
    rng.shuffle(gold)  # a gold without ORDER BY arrives in no particular order either
    aligned, pred = disguise(rng, gold)
    (floor, _), (took, ok) = best_of(
        5, lambda: sorted(map(tuple, aligned)) == sorted(map(tuple, gold)), lambda: match(pred, gold)
    )
    print(
        f"{label}: comparator {took * 1000:.0f} ms (match={ok}), floor {floor * 1000:.0f} ms, ratio {took / floor:.2f}"
    )


def main() -> None:
    rng = random.Random(7)
    print(f"comparator version {COMPARATOR_VERSION}")
    speed_vs_floor("100k x 8 mixed", mixed_table(rng, 100_000), rng)
    speed_vs_floor("100k x 8 floats", float_table(rng, 100_000), rng)
    gold = [[i, *(rng.uniform(1, 1000) for _ in range(7))] for i in range(100_000)]  # no value rounds to 0
    rounded = [[round(v, 2) if isinstance(v, float) else v for v in r] for r in gold]
    rng.shuffle(rounded)
    (floor, _), (took, ok) = best_of(
        5, lambda: sorted(map(tuple, rounded)) == sorted(map(tuple, gold)), lambda: match(rounded, gold)
    )
    print(
        f"100k x 8 (an id, 7 floats), prediction rounded to 2 decimals: comparator {took * 1000:.0f} ms (match={ok}), "
        f"floor {floor * 1000:.0f} ms, ratio {took / floor:.2f}"
    )

    for n in (1000, 100_000):
        base = [[i, i % 7, f"p{i % 13}", rng.uniform(0, 100)] for i in range(n)]
        noisy, _ = disguise(rng, base)
        copies, pred = twelve(base), permute_columns(rng, twelve(noisy))
        [(took, ok)] = best_of(3, lambda: match(pred, copies))  # noqa: B023 (called at once)
        print(f"12 columns, 4 distinct and their copies, {n} rows: {took * 1000:.1f} ms (match={ok})")

    seven: Rows = [[i, i % 3, i % 5, f"x{i % 11}", i * 0.5, i % 2 == 0, f"2024-{i % 12 + 1:02d}"] for i in range(1000)]
    off_by_one = [[r[0] + 1, *r[1:]] for r in seven]
    column = [r[1] for r in seven]
    rng.shuffle(column)
    mixed_up = [[r[0], v, *r[2:]] for r, v in zip(seven, column, strict=True)]  # every column's values right
    for label, wrong in (("ids off by one", off_by_one), ("one column's rows mixed up", mixed_up)):
        rng.shuffle(wrong)
        [(took, ok)] = best_of(3, lambda: match(wrong, seven))  # noqa: B023 (called at once)
        print(f"wrong 7-column answer, 1000 rows, {label}: {took * 1000:.1f} ms (match={ok})")


if __name__ == "__main__":
    main()
