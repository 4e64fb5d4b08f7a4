"""Releases on disk: manifests catch tampering, errors name the file and field, CHANGELOG and diff."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpkg.errors import DataError
from evalpkg.settings import PROJECT_ROOT
from evalpkg.testset import release
from evalpkg.testset.build import load_templates
from evalpkg.testset.models import Task
from evalpkg.testset.reselect import joining_templates
from tests.testset.test_models_and_fingerprints import task_dict


def make_tasks(n: int) -> list[Task]:
    return [Task.model_validate(task_dict(id=f"st-sample-{i:03d}", gold_sql=[f"select {i}"])) for i in range(1, n + 1)]


@pytest.fixture
def tasks_dir(tmp_path: Path) -> Path:
    release.write(tmp_path, "v1", make_tasks(3), "snap-1", release.ChangeSet(added={"st-sample-001": "x"}))
    return tmp_path


def test_round_trip(tasks_dir: Path) -> None:
    rel = release.load(tasks_dir, "v1")
    assert [t.id for t in rel.tasks] == ["st-sample-001", "st-sample-002", "st-sample-003"]
    assert rel.manifest.task_count == 3 and rel.manifest.snapshot_version == "snap-1"
    assert release.latest(tasks_dir) == "v1" and release.next_version(tasks_dir) == "v2"


def test_tampered_file_is_detected(tasks_dir: Path) -> None:
    path = tasks_dir / "v1" / "tasks" / "st-sample-002.json"
    path.write_text(path.read_text().replace("easy", "hard"))
    with pytest.raises(DataError, match=r"st-sample-002.json: sha256 differs from MANIFEST.json"):
        release.load(tasks_dir, "v1")


def test_unlisted_and_missing_files_are_detected(tasks_dir: Path) -> None:
    (tasks_dir / "v1" / "tasks" / "st-sample-009.json").write_text("{}")
    with pytest.raises(DataError, match=r"st-sample-009.json: file is not in MANIFEST.json"):
        release.load(tasks_dir, "v1")
    (tasks_dir / "v1" / "tasks" / "st-sample-009.json").unlink()
    (tasks_dir / "v1" / "tasks" / "st-sample-001.json").unlink()
    with pytest.raises(DataError, match=r"st-sample-001.json: listed in MANIFEST.json but missing"):
        release.load(tasks_dir, "v1")


def test_corrupted_task_names_file_and_field(tasks_dir: Path) -> None:
    path = tasks_dir / "v1" / "tasks" / "st-sample-003.json"
    data = json.loads(path.read_text())
    data["review"]["agreement"] = 1.7
    path.write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"st-sample-003.json: field review.agreement: Input should be less than"):
        release.load(tasks_dir, "v1", verify=False)


def test_releases_are_immutable(tasks_dir: Path) -> None:
    with pytest.raises(DataError, match="already exists"):
        release.write(tasks_dir, "v1", make_tasks(1), "s", release.ChangeSet())


def test_changelog_and_diff(tasks_dir: Path) -> None:
    v1 = release.load(tasks_dir, "v1")
    changed = v1.tasks[0].model_copy(update={"maintenance_notes": "clarified the time column"})
    new = make_tasks(4)[3]
    changes = release.ChangeSet(
        added={new.id: "from ticket #7"},
        changed={changed.id: "notes"},
        removed={"st-sample-003": "duplicate of st-sample-002"},
    )
    release.write(tasks_dir, "v2", [changed, v1.tasks[1], new], "snap-2", changes)
    assert release.changelog_entry(tasks_dir, "v2").added == {new.id: "from ticket #7"}
    assert release.changelog_entry(tasks_dir, "v1").added == {"st-sample-001": "x"}
    d = release.diff(v1, release.load(tasks_dir, "v2"))
    assert (list(d.added), list(d.changed), list(d.removed)) == ([new.id], [changed.id], ["st-sample-003"])
    assert d.changed[changed.id] == "fields: maintenance_notes"


def test_a_template_that_left_rejoins_the_next_reselection_with_its_count_unless_it_left_for_good(
    tmp_path: Path,
) -> None:
    """A template an earlier release held and the source does not is tried again (its premises may hold in the
    next worlds); one that left the test set for good (a month's fall, which the de-identification shift
    spreads over a year) is not; a template never released does not join early."""
    committed = release.load(PROJECT_ROOT / "tasks", "v8").tasks
    returning, for_good, stays = (
        "drug_patients_by_dept_year",
        "anomaly_outpatient_sharpest_drop_year",
        "lab_turnaround_year",
    )
    kept = [t for t in committed if t.provenance.template_id in (returning, for_good, stays)]
    release.write(tmp_path, "v1", kept, "snap", release.ChangeSet(added={t.id: "test" for t in kept}))
    without = [t for t in kept if t.provenance.template_id == stays]
    release.write(
        tmp_path, "v2", without, "snap", release.ChangeSet(removed={t.id: "test" for t in kept if t not in without})
    )
    templates = {t.id: t for t in load_templates().templates}
    assert templates[for_good].left and not templates[returning].left
    assert joining_templates(tmp_path, without, "v3") == {returning: templates[returning].count}
    assert joining_templates(tmp_path, kept, "v3") == {}  # held by the source: it keeps its tasks' number
