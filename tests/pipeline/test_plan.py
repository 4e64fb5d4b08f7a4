"""`--limit N`: a deterministic sample stratified over task type x difficulty, not the first N ids."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from evalpkg.pipeline.plan import cell, sampled_cells, stratified_sample
from evalpkg.testset import release
from evalpkg.testset.models import Task

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    return release.load(TASKS_DIR, None).tasks


def test_limit_21_covers_every_cell(tasks: list[Task]) -> None:
    cells = {cell(t) for t in tasks}
    assert len(cells) == 21
    picked = stratified_sample(tasks, 21)
    assert {cell(t) for t in picked} == cells
    assert "21 of 21 cells" in sampled_cells(tasks, picked)


def test_first_ids_would_not(tasks: list[Task]) -> None:
    first = sorted(tasks, key=lambda t: t.id)[:21]
    assert len({cell(t) for t in first}) < 21  # why the sample is stratified


@pytest.mark.parametrize("n", [1, 5, 20, 60, 100, 320])
def test_sample_size_determinism_and_proportions(tasks: list[Task], n: int) -> None:
    picked = stratified_sample(tasks, n)
    assert len(picked) == n == len({t.id for t in picked})
    assert [t.id for t in picked] == [t.id for t in stratified_sample(tasks, n)]  # the same every time
    assert [t.id for t in picked] != [t.id for t in stratified_sample(tasks, n, seed=1)] or n >= len(tasks)
    if n >= 21:
        sizes, got = Counter(cell(t) for t in tasks), Counter(cell(t) for t in picked)
        for key, size in sizes.items():  # at least one, and within one of a proportional share
            share = 1 + (n - 21) * (size - 1) / (len(tasks) - 21)
            assert got[key] >= 1 and abs(got[key] - share) < 1 + 1e-9, key


def test_too_small_a_sample_says_which_cells_it_lacks(tasks: list[Task]) -> None:
    picked = stratified_sample(tasks, 5)
    assert len({cell(t) for t in picked}) == 5
    assert f"5 of 21 cells (only {', '.join(sorted(cell(t) for t in picked))})" in sampled_cells(tasks, picked)
    most = stratified_sample(tasks, 15)
    assert len({cell(t) for t in most}) == 15 and "15 of 21 cells (not " in sampled_cells(tasks, most)
