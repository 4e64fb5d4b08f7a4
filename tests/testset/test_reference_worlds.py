"""The reference worlds: the committed v4 holds its claims in every one of them (every tagged trap
bites, every premise holds), and `reselect` makes a release that does, replacing what does not with
its reasons. Each world is built in a scratch cluster, so these tests take minutes."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from evalpkg.errors import DataError
from evalpkg.settings import PROJECT_ROOT, Settings
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release, traps, worlds
from evalpkg.testset import reselect as reselect_module
from evalpkg.testset.build import load_templates
from evalpkg.testset.models import Task
from evalpkg.testset.reselect import reselect
from evalpkg.testset.validate import validate_reference

COMMITTED = PROJECT_ROOT / "tasks"


def test_the_latest_release_holds_its_claims_in_every_reference_world(settings: Settings) -> None:
    latest = release.latest(COMMITTED)
    assert release.VERSION_RE.match(latest) and int(latest[1:]) >= 4  # held from v4 on
    reports = validate_reference(settings.model_copy(update={"tasks_dir": COMMITTED}), latest)
    assert [w for w, _ in reports] == list(worlds.WORLDS)
    for world, report in reports:
        assert report.held and report.problems == [], (world.label(), report.problems[:3])
        rates = traps.rates(report.trap_outcomes)
        assert all(r.bites == r.applicable == r.tasks > 0 for r in rates.values()), (world.label(), rates)
        assert report.premise_findings == []
    entry = (
        (COMMITTED / release.CHANGELOG).read_text(encoding="utf-8").split(f"## {latest} ", 1)[1].split("\n## ", 1)[0]
    )
    assert all(w.label() in entry for w in worlds.WORLDS)  # its notes name the worlds its claims hold in


# Two templates of v3 with known defects, in a tasks tree of their own.
FLAWED = {
    "unit-glu_results_above_threshold_year": "its glucose cut-offs 7.8 and 11.1 are retired (not fasting ones)",
    "ts-monthly_admissions_dept_year": "thin departments: a 0 answer point, a time trap that rarely bites",
}
SMALL = (worlds.World(2000, 7, 0), worlds.World(2000, 7, 1))


@pytest.fixture
def flawed_tasks(tmp_path: Path) -> Path:
    source = release.load(COMMITTED, "v3")
    tasks = [t for t in source.tasks if t.id.rsplit("-", 1)[0] in FLAWED]
    release.write(tmp_path, "v1", tasks, "snap", release.ChangeSet(added={t.id: "test" for t in tasks}))
    return tmp_path


def test_reselect_keeps_what_holds_and_replaces_the_rest_with_reasons(
    synced: SyncReport, generated: Settings, flawed_tasks: Path
) -> None:
    local = generated.model_copy(update={"tasks_dir": flawed_tasks})
    before = release.load(flawed_tasks, "v1").by_id()
    rel, plan = reselect(local, "v1", reference=SMALL)

    # as many tasks as before per template where enough parameter choices hold; thin templates shrink
    assert rel.version == "v2" and 0 < len(rel.tasks) <= len(before)
    for world, report in validate_reference(local, "v2", reference=SMALL):
        # (a two-template release is too small for the coverage checks: its findings are what count here)
        assert report.premise_findings == [], (world.label(), report.premise_findings)
        assert report.trap_outcomes and all(o.status == "bites" for o in report.trap_outcomes), world.label()
    kept = [t for t in rel.tasks if t.id in before]
    assert all(t.gold_sql == before[t.id].gold_sql for t in kept)  # kept tasks are the same questions
    new = [t for t in rel.tasks if t.id not in before]
    assert new and all(_number(t) > max(_number(b) for b in before.values() if _family(b) == _family(t)) for t in new)
    retired = [t for t in before.values() if t.provenance.params.get("glucose") in ("7.8", "11.1")]
    assert retired and all(
        f"retired parameter glucose={t.provenance.params['glucose']}: a 2-hour or random-glucose cut-off, not a "
        "fasting one" in plan.changes.removed[t.id]
        for t in retired
    )
    assert set(plan.changes.removed) == set(before) - {t.id for t in kept}  # every dropped task has a reason
    # a kept task that lost a tag says which and why; one whose template's wordings changed since (v12: the
    # technical wordings admit the gold they name) asks as its template now does
    reworded = {t.id for t in kept if t.variants != before[t.id].variants}
    for task_id, why in plan.changes.changed.items():
        said = why.split("; ")
        assert ("reworded as its template now asks" in said) == (task_id in reworded), task_id
        assert all("did not bite" in s and "tag dropped" in s for s in said if not s.startswith("reworded")), task_id
    entry = release.changelog_entry(flawed_tasks, "v2")
    assert entry.removed == plan.changes.removed and entry.added == plan.changes.added


def _family(task: Task) -> str:
    return task.id.rsplit("-", 1)[0]


def _number(task: Task) -> int:
    return int(task.id.rsplit("-", 1)[1])


def test_reselect_starts_from_the_latest_release(settings: Settings, flawed_tasks: Path) -> None:
    shutil.copytree(flawed_tasks / "v1", flawed_tasks / "v2")
    with pytest.raises(DataError, match="reselect from the latest release"):
        reselect(settings.model_copy(update={"tasks_dir": flawed_tasks}), "v1", reference=SMALL)


def test_reselect_caps_tasks_per_template_and_adds_the_templates_new_in_its_release(
    synced: SyncReport, generated: Settings, flawed_tasks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    joining = "new_diagnosis_patients_by_year"  # a template with no task in the flawed tree, added "in v2"
    templates = load_templates()
    marked = [t.model_copy(update={"since": "v2"}) if t.id == joining else t for t in templates.templates]
    monkeypatch.setattr(reselect_module, "load_templates", lambda: templates.model_copy(update={"templates": marked}))
    local = generated.model_copy(update={"tasks_dir": flawed_tasks})
    rel, plan = reselect(local, "v1", reference=SMALL[:1], per_template=2)

    families = Counter(_family(t) for t in rel.tasks)
    assert families and max(families.values()) <= 2, families
    assert plan.joined == {joining: 2} and families[f"ts-{joining}"] == 2
    assert all(plan.changes.added[t.id].startswith(f"template {joining} with ") for t in rel.tasks if joining in t.id)
    capped = [why for why in plan.changes.removed.values() if why.startswith("at most 2 tasks per template")]
    assert capped  # the flawed templates had more usable tasks than two
    assert "2 tasks from 1 templates new in this release" in plan.summary()


def test_reselect_removes_the_tasks_of_a_template_that_left_with_its_reason(
    synced: SyncReport, generated: Settings, flawed_tasks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone, why = "ts-monthly_admissions_dept_year", "a month's count is spread over a year by the date shift"
    templates = load_templates()
    marked = [t.model_copy(update={"left": why}) if f"ts-{t.id}" == gone else t for t in templates.templates]
    monkeypatch.setattr(reselect_module, "load_templates", lambda: templates.model_copy(update={"templates": marked}))
    local = generated.model_copy(update={"tasks_dir": flawed_tasks})
    before = [t.id for t in release.load(flawed_tasks, "v1").tasks if _family(t) == gone]
    rel, plan = reselect(local, "v1", reference=SMALL[:1])

    assert before and not [t for t in rel.tasks if _family(t) == gone]
    assert all(plan.changes.removed[i] == f"template {gone[3:]} left the test set: {why}" for i in before), [
        plan.changes.removed.get(i) for i in before
    ]
