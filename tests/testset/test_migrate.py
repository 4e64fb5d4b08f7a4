"""`evalpkg testset migrate`: the committed v3 is reproducible from v2 and the templates on a freshly synced DB
(its own de-identification key), and migrating again is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evalpkg.errors import DataError
from evalpkg.settings import Settings
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release
from evalpkg.testset.migrate import migrate

COMMITTED = Path(__file__).resolve().parents[2] / "tasks"


@pytest.fixture
def before_v3(tmp_path: Path) -> Path:
    """tasks/ as it was before v3: the releases up to v2 and the CHANGELOG without the v3 entry."""
    for version in ("v1", "v2"):
        shutil.copytree(COMMITTED / version, tmp_path / version)
    text = (COMMITTED / release.CHANGELOG).read_text(encoding="utf-8")
    head, v3_and_older = text.split("## v3 ", 1)
    (tmp_path / release.CHANGELOG).write_text(head + "## v2 " + v3_and_older.split("\n## v2 ", 1)[1], "utf-8")
    return tmp_path


def test_v3_is_reproducible_from_v2(synced: SyncReport, generated: Settings, before_v3: Path) -> None:
    settings = generated.model_copy(update={"tasks_dir": before_v3})
    rel, plan = migrate(settings, "v2")
    assert rel.version == "v3"
    committed = release.load(COMMITTED, "v3")
    assert rel.manifest.files == committed.manifest.files  # byte for byte, task by task
    assert release.changelog_entry(before_v3, "v3") == release.changelog_entry(COMMITTED, "v3")
    assert plan.summary() in (COMMITTED / release.CHANGELOG).read_text(encoding="utf-8")
    assert len(plan.tasks) == len(committed.tasks) and 0 < plan.narrower < plan.variants and plan.reworded > 0
    with pytest.raises(DataError, match="migrate the latest release"):
        migrate(settings, "v2")
    with pytest.raises(DataError, match="nothing to migrate"):
        migrate(settings, "v3")
