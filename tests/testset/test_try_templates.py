"""`evalpkg testset try-templates`: a template file checked end to end, every problem named with its task,
world and reason, exit 1 on any. The synced test cluster stands in for a reference world (building one
takes minutes); the checks run there are the ones a real world gets."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalpkg.cli_testset import app
from evalpkg.errors import ConfigError
from evalpkg.settings import PROJECT_ROOT, Settings
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import worlds
from evalpkg.testset.try_templates import try_templates

STAND_IN = worlds.World(2000, 7, -1)  # the test cluster: seed 7, its own random key


BATCH = PROJECT_ROOT / "evalpkg/testset/templates/v7_negation_unit.json"


def batch_template(template_id: str, **changes: Any) -> dict[str, Any]:
    """A template of the v7 batch under a new id (ids are unique across files), count 2, with changes."""
    spec = json.loads(BATCH.read_text(encoding="utf-8"))
    t = copy.deepcopy(next(t for t in spec["templates"] if t["id"] == template_id))
    return t | {"id": f"tried_{template_id}", "count": 2} | changes


# No date in it (the stand-in's key shifts dates) and a mg/dL result in every department it picks: the
# unconverted maximum is a mg/dL number, so the unit trap bites.
GOOD = batch_template("glu_max_mmol_dept")


def swap_sql(t: dict[str, Any], old: str, new: str) -> list[str]:
    assert all(old in sql for sql in t["gold_sql"])
    return [sql.replace(old, new) for sql in t["gold_sql"]]


@pytest.fixture
def stand_in_world(synced: SyncReport, generated: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    def each(settings: Settings, reference: tuple[worlds.World, ...], **_: Any) -> Iterator[Any]:
        yield from ((w, generated) for w in reference)

    monkeypatch.setattr(worlds, "each", each)
    monkeypatch.setenv("EVALPKG_PG_URL", generated.admin_url)
    monkeypatch.setenv("EVALPKG_STATE_DIR", str(generated.state_dir))
    yield generated


def write(tmp_path: Path, *templates: dict[str, Any]) -> Path:
    path = tmp_path / "batch.json"
    path.write_text(json.dumps({"format_version": 1, "templates": list(templates)}, ensure_ascii=False))
    return path


def test_a_good_template_passes_in_every_world(stand_in_world: Settings, tmp_path: Path) -> None:
    [tried] = try_templates(stand_in_world, write(tmp_path, GOOD), reference=(STAND_IN,))
    assert len(tried.tasks) == tried.template.count == 2
    assert tried.problems == []
    result = CliRunner().invoke(app, ["try-templates", str(write(tmp_path, GOOD)), "--reference-worlds"])
    assert result.exit_code == 0, result.output
    assert f"{GOOD['id']}: 2/2 tasks made: ok" in result.output


BROKEN = [
    # (case, template, where the problem shows, what the reason says, why)
    (
        "trap_does_not_bite",
        GOOD
        | {
            "gold_sql": swap_sql(GOOD, "l.bgzt = 'F'", "coalesce(l.bgzt, '') <> 'X'"),
            "tags": [*GOOD["tags"], "soft_delete"],
        },
        STAND_IN.label(),
        "trap soft_delete does_not_bite",
        "its status condition keeps every report, so dropping it changes no answer",
    ),
    (
        "gold_sql_fails",
        GOOD | {"gold_sql": swap_sql(GOOD, "l.bgzt = 'F'", "l.bgzt_typo = 'F'")},
        "README world",
        "made 0 of 2 tasks",
        "every choice's gold fails (no such column), so no task is made",
    ),
]


@pytest.mark.parametrize(("case", "template", "world", "reason", "why"), BROKEN, ids=[b[0] for b in BROKEN])
def test_a_broken_template_is_reported_with_its_reason(
    stand_in_world: Settings, tmp_path: Path, case: str, template: dict[str, Any], world: str, reason: str, why: str
) -> None:
    path = write(tmp_path, template | {"id": f"{case}_t"})
    [tried] = try_templates(stand_in_world, path, reference=(STAND_IN,))
    lines = [p.line() for p in tried.problems]
    assert any(f"[{world}] {reason}" in line for line in lines), (why, lines)
    if case == "gold_sql_fails":
        assert "gold #1 fails" in lines[0] and "bgzt_typo" in lines[0], why
    result = CliRunner().invoke(app, ["try-templates", str(path), "--reference-worlds"])
    assert result.exit_code == 1, (why, result.output)
    assert reason in result.output, why


BAD_FILES = [
    # (case, templates, what the one-line error says)
    ("bad_field", [GOOD | {"difficulty": "extreme"}], rf"template {GOOD['id']}: field difficulty: "),
    ("installed_id", [GOOD | {"id": "glu_mean_mmol_year"}], "template glu_mean_mmol_year is defined in another"),
    ("twice", [GOOD, GOOD], rf"template {GOOD['id']} is defined in this file already"),
]


@pytest.mark.parametrize(("case", "templates", "error"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_bad_file_is_refused_naming_the_template(
    tmp_path: Path, case: str, templates: list[dict[str, Any]], error: str
) -> None:
    with pytest.raises(ConfigError, match=error):
        try_templates(Settings(), write(tmp_path, *templates))
