"""Mechanical nondeterminism checks on the real eval DB: ties on ORDER BY keys inside a result or at
its LIMIT cut, and number answer points that name a cell the data does not decide."""

from __future__ import annotations

from typing import Any

import pytest

from evalpkg.settings import Settings
from evalpkg.sql.gold import gold_runner
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import determinism
from evalpkg.testset.models import Task
from tests.testset.test_models_and_fingerprints import task_dict

V = "emr.t_zy_visit"
BY_DEPT = f"select ksdm, count(*) as n from {V} group by ksdm"
CASES = [
    pytest.param(f"{BY_DEPT} order by n desc, ksdm", [(0, 1)], None, id="tie-breaker-makes-order-unique"),
    pytest.param(f"select visit_type, count(*) from {V} group by 1 order by 1", [(1, 1)], None, id="positional-key"),
    pytest.param(
        f"select visit_type, ksdm from {V} group by 1, 2 order by visit_type",
        [],
        "inside the result",
        id="rows-differ-but-tie-on-the-key",
    ),
    pytest.param(
        f"select ksdm from {V} group by ksdm order by count(*) > 0 desc limit 2",
        [],
        "at the LIMIT cut",
        id="key-not-in-output-ties-across-limit",
    ),
    pytest.param(
        f"select visit_type from {V} order by visit_type limit 5", [(4, 0)], None, id="tied-rows-identical-is-fine"
    ),
    pytest.param(
        f"select visit_type, 1 as one from {V} group by 1 order by one",
        [(0, 1)],
        "inside the result",
        id="order-flagged-even-where-the-point-is-decided",
    ),
    pytest.param(f"select visit_type, count(*) from {V} group by 1", [(0, 1)], "rows that may stand", id="no-order-by"),
    pytest.param(f"select count(*) from {V}", [(5, 0)], "returns 1 row(s)", id="point-beyond-the-result"),
    pytest.param(f"select avg(zyts) from {V} where zyts < 0", [(0, 0)], "the cell is NULL", id="point-on-null"),
    pytest.param(f"select count(*) from {V}", [(0, 0)], None, id="single-row-needs-no-order"),
]


@pytest.mark.parametrize(("sql", "points", "problem"), CASES)
def test_determinism_check(
    synced: SyncReport, generated: Settings, sql: str, points: list[tuple[int, int]], problem: str | None
) -> None:
    answer_points: list[dict[str, Any]] = [{"kind": "number", "row": r, "col": c} for r, c in points]
    task = Task.model_validate(task_dict(gold_sql=[sql], answer_points=answer_points))
    with gold_runner(generated) as golds:
        rows = golds.result(sql).rows
        ordering, undetermined = determinism.check(task, sql, rows, lambda probe: golds.result(probe).rows)
    found = ordering + undetermined
    if problem is None:
        assert found == []
    else:
        assert any(problem in p for p in found), found


@pytest.mark.parametrize(
    ("notes", "problems"),
    [
        pytest.param("Fewer rows are expected when few departments qualify.", [], id="the-data-may-shorten-the-list"),
        pytest.param("", ["answer_points[0] (row 0, col 1): the gold returns 0 row(s)"], id="nothing-says-it-may"),
    ],
)
def test_a_point_past_the_end_of_a_list_the_data_may_shorten_is_absent_not_undetermined(
    synced: SyncReport, generated: Settings, notes: str, problems: list[str]
) -> None:
    # on another snapshot no department may qualify; the scorer leaves such a point out (answer_coverage)
    sql = f"{BY_DEPT} having count(*) > 1e9 order by n desc, ksdm limit 5"
    points: list[dict[str, Any]] = [{"kind": "number", "row": 0, "col": 1}]
    task = Task.model_validate(task_dict(gold_sql=[sql], answer_points=points, maintenance_notes=notes))
    with gold_runner(generated) as golds:
        rows = golds.result(sql).rows
        assert rows == []
        assert determinism.check(task, sql, rows, lambda probe: golds.result(probe).rows) == ([], problems)


def test_probe_keeps_outputs_first_and_drops_limit() -> None:
    probe = determinism.order_probe("select a, b as x from t order by x, c desc, 1 limit 3 offset 2")
    assert probe is not None
    assert (probe.width, probe.keys, probe.limit, probe.offset) == (2, (1, 2, 0), 3, 2)
    assert "LIMIT" not in probe.sql.upper() and "C AS __ORDER_KEY_0" in probe.sql.upper()
    assert determinism.order_probe("select a from t") is None
