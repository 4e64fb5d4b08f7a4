"""`testset audit-scorer` on the committed latest release: every layout a grader accepts is accepted and
every mutation a grader rejects is rejected, on every task it applies to; and the audit itself fails when
a rule is broken."""

from __future__ import annotations

import pytest

from evalpkg.grading import cross, execution
from evalpkg.settings import PROJECT_ROOT, Settings
from evalpkg.sql.gold import gold_runner
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import audit, release
from evalpkg.testset.models import Task
from tests.testset.test_models_and_fingerprints import task_dict

COMMITTED = PROJECT_ROOT / "tasks"
# Transforms that apply to many tasks of every release from v6 on (the rest apply where the task allows):
# at least an eighth of the answerable tasks. How many is "many" moves with the de-identification key
# (a rate of 0 or a value already at 2 decimals is not transformed): rates applied to 60-64 tasks under
# five keys tried, to under 60 in one CI run.
BROAD = {"extra_columns", "renamed_columns", "integers_as_floats", "rounded_to_2_decimals", "total_row"}
BROAD |= {"rate_as_percentage", "long_form_zh", "long_form_en", "row_dropped", "row_duplicated", "empty_result"}


def _shuffled(task_id: str, rows: list[list[object]]) -> list[list[object]] | None:
    task = Task.model_validate(task_dict(id=task_id, gold_sql=["select 1"]))
    layout = audit.shuffled_rows(audit.Gold(task, "select 1", ["a"], rows, None))
    return None if layout is None else layout[0]


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ([[1], [2]], "two rows: a task id whose shuffle keeps the order must still get them swapped"),
        ([[1], [1], [1], [2]], "mostly alike: most shuffles give the gold's order back"),
        ([[n] for n in range(30)], "many rows: a real shuffle"),
    ],
)
def test_shuffled_rows_always_differs_from_the_gold(rows: list[list[object]], reason: str) -> None:
    # Enough task ids that some seed shuffles two rows back into place (it looped forever on one).
    for i in range(40):
        shuffled = _shuffled(f"st-sample-{i:03d}", rows)
        assert shuffled is not None and shuffled != rows and sorted(shuffled) == sorted(rows), reason


def test_shuffled_rows_does_not_apply_to_alike_rows() -> None:
    assert _shuffled("st-sample-001", [[1], [1]]) is None


def _audit(settings: Settings) -> dict[str, audit.TransformResult]:
    """The latest release's tasks, and of each template that left since v9 its last release's (since v10: the
    quarter's length of stay, whose period rows alone exercise period_rows_by_role)."""
    *earlier, latest = release.versions(COMMITTED)
    tasks = release.load(COMMITTED, latest).tasks
    held = {t.provenance.template_id for t in tasks}
    for version in reversed(earlier[earlier.index("v9") :]):
        left = [t for t in release.load(COMMITTED, version).tasks if t.provenance.template_id not in held]
        tasks += left
        held |= {t.provenance.template_id for t in left}
    with gold_runner(settings) as golds:
        return {r.name: r for r in audit.audit(tasks, golds)}


def test_the_scorer_accepts_every_layout_and_rejects_every_mutation(synced: SyncReport, generated: Settings) -> None:
    results = _audit(generated)
    assert set(results) == {*audit.LAYOUTS, *audit.MUTATIONS, audit.PERIOD_MOVED}
    for r in results.values():
        assert r.applied > 0, f"{r.name} applied to no task"
        assert r.ok, (r.name, r.kind, r.failures[:5])
        assert r.accepted == (r.applied if r.kind == "layout" else 0), r.name
    answerable = sum(1 for t in release.load(COMMITTED).tasks if t.gold_sql)
    assert all(results[name].applied >= answerable // 8 for name in BROAD), {n: results[n].applied for n in BROAD}


def test_the_audit_fails_where_a_rule_is_broken(
    synced: SyncReport, generated: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no total rows, wherever the rule is read (a transposed layout reads it too)
    for module in (execution, cross):
        monkeypatch.setattr(module, "without_summary_rows", lambda rows, rel_tol=0.0, free=(): None)
    results = _audit(generated)
    totals = ("total_row", "described_total_row", "unchecked_total_row")
    assert all(results[n].failures and len(results[n].failures) == results[n].applied for n in totals)
    assert all(r.ok for name, r in results.items() if name not in totals)
