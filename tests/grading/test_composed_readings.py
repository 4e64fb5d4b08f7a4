"""Readings composed on a real gold (the test world's): rows labelled otherwise than the gold labels them
(department names in English), with a summary row the gold does not have. Each case names its reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalpkg.grading.execution import GoldCache, execution_match
from evalpkg.settings import Settings
from evalpkg.sql.gold import gold_runner
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release

TASK = "anom-anomaly_dept_split_outpatients-001"  # departments (ksmc) with their visits in two years
Rows = list[list[Any]]


def _values(rows: Rows) -> str:
    def literal(v: Any) -> str:
        return "'" + str(v).replace("'", "''") + "'" if isinstance(v, str) else str(v)

    body = ", ".join("(" + ", ".join(literal(v) for v in r) + ")" for r in rows)
    return f"select * from (values {body}) as t(department, prev_visits, this_visits)"


def _total(rows: Rows, label: str = "TOTAL", plus: int = 0) -> Rows:
    return [*rows, [label, sum(r[1] for r in rows) + plus, sum(r[2] for r in rows)]]


CASES: list[tuple[Callable[[Rows], Rows], bool, str]] = [
    (lambda en: en, True, "English names alone"),
    (lambda en: _total(en), True, "English names and a TOTAL row that adds up"),
    (lambda en: _total(en, "Total"), True, "the total in another case"),
    (lambda en: _total(en, plus=9), False, "a total the gold can check, wrong"),
    (lambda en: _total([[en[0][0], en[1][1], en[0][2]], [en[1][0], en[0][1], en[1][2]]]), False, "counts swapped"),
]


@pytest.mark.parametrize(("layout", "accepted", "why"), CASES, ids=[c[2] for c in CASES])
def test_relabelled_rows_with_a_summary_row(
    synced: SyncReport, generated: Settings, layout: Callable[[Rows], Rows], accepted: bool, why: str
) -> None:
    task = release.load(Path(__file__).resolve().parents[2] / "tasks").by_id()[TASK]
    with gold_runner(generated) as golds:
        gold = GoldCache(golds)
        _, rows = gold.get(task.gold_sql[0])
        english = dict(golds.executor.run("select ksmc, ksmc_en from dict_dept").rows)
        assert len(rows) >= 2 and all(r[0] in english for r in rows)
        en = [[english[r[0]], r[1], r[2]] for r in rows]
        _, matched, _, _ = execution_match(task, _values(layout(en)), gold)
    assert matched is accepted, why
