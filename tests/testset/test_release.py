"""Releases on disk: manifests catch tampering, errors name the file and field, changes.json, CHANGELOG and diff."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpkg.errors import DataError
from evalpkg.settings import PROJECT_ROOT
from evalpkg.testset import release
from evalpkg.testset.build import load_templates
from evalpkg.testset.models import Task
from evalpkg.testset.reselect import _admitting_kept_golds, joining_templates
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
    assert release.changelog_entry(tasks_dir, "v2") == changes
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


def test_a_release_writes_its_per_task_records_beside_its_manifest_and_the_changelog_links_them(
    tasks_dir: Path,
) -> None:
    v1 = release.load(tasks_dir, "v1")
    changes = release.ChangeSet(
        added={"st-sample-004": "from ticket #7"},
        changed={"st-sample-002": "reworded", "st-sample-001": "notes"},
        removed={"st-sample-003": "duplicate of st-sample-002"},
    )
    new = make_tasks(4)[3]
    rel = release.write(tasks_dir, "v2", [v1.tasks[0], v1.tasks[1], new], "snap-2", changes)
    record = release.Changes.model_validate_json((tasks_dir / "v2" / release.CHANGES).read_text(encoding="utf-8"))
    assert (record.format_version, record.version, record.released) == (1, "v2", rel.manifest.released)
    assert record.change_set() == changes and list(record.changed) == sorted(changes.changed)
    assert release.CHANGES not in rel.manifest.files and release.load(tasks_dir, "v2").tasks == rel.tasks
    text = (tasks_dir / release.CHANGELOG).read_text(encoding="utf-8")
    assert text.startswith("# Test set changelog\n\n## v2 (") and text.count("\n## ") == 2
    assert "Tasks added 1, changed 2, removed 1 ([per-task changes](v2/changes.json))." in text
    assert not [line for line in text.splitlines() if line.startswith("- `")]  # no per-task line: they are in JSON
    release.add_changelog_summary(tasks_dir, "v2", "Why v2.")
    section = (tasks_dir / release.CHANGELOG).read_text(encoding="utf-8").split("## v2 ", 1)[1].split("\n## ")[0]
    assert section.splitlines()[1:5] == ["", "Why v2.", "", release.counts_line("v2", changes)]


def test_the_changelog_keeps_its_introduction_above_the_newest_release(tasks_dir: Path) -> None:
    path = tasks_dir / release.CHANGELOG
    path.write_text(path.read_text(encoding="utf-8").replace("\n\n", "\n\nWhat this file holds.\n\n", 1))
    release.write(tasks_dir, "v2", make_tasks(3), "snap-2", release.ChangeSet())
    text = path.read_text(encoding="utf-8")
    assert text.index("What this file holds.") < text.index("## v2 (") < text.index("## v1 (")


def test_per_task_records_name_the_file_that_is_missing_or_wrong(tasks_dir: Path) -> None:
    path = tasks_dir / "v1" / release.CHANGES
    path.write_text(path.read_text(encoding="utf-8").replace('"version": "v1"', '"version": "v7"'))
    with pytest.raises(DataError, match=r"v1/changes.json: field version: 'v7', expected 'v1'"):
        release.changelog_entry(tasks_dir, "v1")
    path.write_text("{}")
    with pytest.raises(DataError, match=r"v1/changes.json: field version: Field required"):
        release.changelog_entry(tasks_dir, "v1")
    path.unlink()
    with pytest.raises(DataError, match=r"v1/changes.json: per-task changes not found"):
        release.changelog_entry(tasks_dir, "v1")
    with pytest.raises(DataError, match=r"v9/MANIFEST.json: release manifest not found"):
        release.changelog_entry(tasks_dir, "v9")


SCREEN = 5000  # characters of one release's section: about 40 lines of 120 columns


def test_the_committed_changelog_is_prose_and_each_release_has_its_per_task_records() -> None:
    """Every release's changes.json agrees with the manifests (added: new task files, removed: gone, changed:
    in both); the CHANGELOG has a section per release, at most a screen, with its counts and link, and no
    per-task line."""
    committed = PROJECT_ROOT / "tasks"
    text = (committed / release.CHANGELOG).read_text(encoding="utf-8")
    assert not [line for line in text.splitlines() if line.startswith("- `")]
    before: set[str] = set()
    for version in release.versions(committed):
        record = release.read_changes(committed, version)
        manifest = release.read_manifest(committed / version / release.MANIFEST)
        ids = {Path(rel).stem for rel in manifest.files}
        assert record.released == manifest.released, version
        assert (set(record.added), set(record.removed)) == (ids - before, before - ids), version
        assert set(record.changed) <= ids & before, version
        section = text.split(f"\n## {version} ({record.released})\n", 1)[1].split("\n## ", 1)[0]
        assert release.counts_line(version, record.change_set()) in section, version
        assert len(section) <= SCREEN, f"{version}: {len(section)} characters, more than a screen"
        before = ids


ADMITTING = "ja-drug_class_patients_year-004"  # v12: its technical wordings admit gold 0 (orders started in the year)


@pytest.mark.parametrize(
    ("kept", "admits"),
    [
        pytest.param([0, 1], [0], id="the-template's-golds-in-its-order-keep-the-index"),
        pytest.param([1, 0], [1], id="golds-kept-in-another-order-follow-the-admitted-text"),
        pytest.param([1, 0, "select 1"], [1], id="an-arbitrated-gold-kept-beside-them-changes-nothing"),
        pytest.param([1], None, id="a-kept-task-without-the-admitted-gold-is-refused"),
    ],
)
def test_a_kept_task_admits_the_gold_its_wording_names_by_its_text(
    kept: list[int | str], admits: list[int] | None
) -> None:
    """Reselection keeps a task's own golds but takes its template's wordings: an admitted gold is found by its
    text, so that a wording never admits another reading's gold."""
    rendered = release.load(PROJECT_ROOT / "tasks", "v12").by_id()[ADMITTING]
    golds = [rendered.gold_sql[k] if isinstance(k, int) else k for k in kept]
    if admits is None:
        with pytest.raises(DataError, match=rf"{ADMITTING}: zh/technical admits a gold the kept task lacks"):
            _admitting_kept_golds(rendered, golds)
        return
    variants = _admitting_kept_golds(rendered, golds)
    assert {(v.language.value, v.complexity.value): v.admits for v in variants if v.admits} == {
        ("zh", "technical"): admits,
        ("en", "technical"): admits,
    }
