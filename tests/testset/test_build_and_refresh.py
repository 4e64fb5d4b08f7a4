"""Building v1 on a real eval DB, validating releases, and the monthly refresh -> review -> release cycle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from evalpkg.db import connect
from evalpkg.errors import ConfigError, DataError
from evalpkg.settings import EVAL_DB, Settings
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release
from evalpkg.testset.build import Template, build_release, instantiate
from evalpkg.testset.models import Difficulty, TaskType
from evalpkg.testset.params import Value
from evalpkg.testset.refresh import load_queue, refresh, release_approved, release_queue, review
from evalpkg.testset.validate import validate
from tests.testset.test_refresh_quality import make_ready


@pytest.fixture(scope="module")
def ts(synced: SyncReport, generated: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    settings = generated.model_copy(update={"tasks_dir": tmp_path_factory.mktemp("tasks")})
    build_release(settings)
    return settings


def busiest_ticket_month(settings: Settings) -> str:
    with connect(settings.db_url(EVAL_DB)) as conn:
        row = conn.execute(
            "select to_char(created_at, 'YYYY-MM') m from ops.query_ticket group by 1 order by count(*) desc, 1 limit 1"
        ).fetchone()
    assert row is not None
    return str(row[0])


def test_v1_fills_every_cell_and_validates(ts: Settings) -> None:
    rel = release.load(ts.tasks_dir, "v1")
    assert len(rel.tasks) >= 320
    cells = {(t.type, t.difficulty) for t in rel.tasks}
    assert cells == {(ty, d) for ty in TaskType for d in Difficulty}
    report = validate(ts, "v1")
    assert report.problems == []
    assert report.gold_queries >= sum(len(t.gold_sql) for t in rel.tasks) > 300
    assert report.tabular is not None and report.tabular.success


def test_committed_release_validates_on_this_snapshot(synced: SyncReport, generated: Settings) -> None:
    report = validate(generated)  # the latest release in tasks/, on a freshly synced DB with its own key
    assert report.problems == [], report.problems[:5]


def test_refresh_review_release_cycle(ts: Settings) -> None:
    month = busiest_ticket_month(ts)
    first = refresh(ts, month)
    assert first.tickets > 0 and first.added
    snapshot = {p: p.read_bytes() for p, _ in load_queue(ts)}
    again = refresh(ts, month)  # the same candidates, the same reasons, and it says so
    assert again.added == [] and sorted(again.queued) == sorted(first.added)
    assert again.dropped_tickets == first.dropped_tickets
    assert {p: p.read_bytes() for p, _ in load_queue(ts)} == snapshot  # re-running a month changes nothing

    approved, rejected = first.added[:-1] or first.added, first.added[-1:] if len(first.added) > 1 else []
    review(ts, approved, "approve", "dr_wang", "clinician")
    if rejected:
        review(ts, rejected, "reject", "dba_li", "dba", note="duplicates an existing task")
    held = release_queue(ts, reference=())  # approved, but no wording approved and no second annotation
    assert held.release is None and set(held.held) == set(approved)
    assert all("wordings no reviewer approved" in why for why in held.held.values())
    make_ready(ts, approved)  # the reference-world checks: test_refresh_quality
    v2 = release_approved(ts, reference=())
    assert v2 is not None and v2.version == "v2"
    assert set(release.changelog_entry(ts.tasks_dir, "v2").added) == set(approved)
    v1 = release.load(ts.tasks_dir, "v1")
    assert set(release.diff(v1, v2).added) == set(approved) and not release.diff(v1, v2).removed
    added = v2.by_id()[approved[0]]
    assert added.review.status == "approved" and added.review.annotators[-1].role == "clinician"
    assert validate(ts, "v2").problems == []

    assert release_approved(ts, reference=()) is None  # nothing new approved
    assert refresh(ts, month).added == []
    assert release.versions(ts.tasks_dir) == ["v1", "v2"]


def test_refresh_and_review_reject_bad_input(ts: Settings) -> None:
    with pytest.raises(ConfigError, match=r"--month: '2024-13' is not YYYY-MM"):
        refresh(ts, "2024-13")
    with pytest.raises(ConfigError, match="not in the review queue: st-nope-001"):
        review(ts, ["st-nope-001"], "approve", "x", "dba")


def test_build_refuses_to_overwrite_releases(ts: Settings) -> None:
    with pytest.raises(DataError, match="releases exist already"):
        build_release(ts)


def test_validate_names_a_corrupted_task_file(ts: Settings, tmp_path: Path) -> None:
    import shutil

    copy = ts.model_copy(update={"tasks_dir": tmp_path / "tasks"})
    shutil.copytree(ts.tasks_dir / "v1", copy.tasks_dir / "v1")
    victim = sorted((copy.tasks_dir / "v1" / "tasks").glob("*.json"))[5]
    victim.write_text(victim.read_text().replace('"difficulty": "', '"difficulty": "x', 1))
    with pytest.raises(
        DataError, match=rf"{victim.name} \(sha256 differs from MANIFEST.json\): field difficulty: Input"
    ):
        validate(copy, "v1")


def admitting_template(admits: dict[str, dict[str, list[int]]] | None) -> Template:
    """A template with two readings of "patients on a drug in {year}" (started in it, active during it) whose
    wordings admit as `admits` says (None: the key left out)."""
    text = {
        "colloquial": "{year} drug pts?",
        "plain": "Patients on a drug in {year}?",
        "technical": "Orders started (kssj) in {year}",
    }
    data: dict[str, Any] = {
        "id": "drug_year",
        "type": "single_table",
        "difficulty": "easy",
        "count": 1,
        "params": ["year"],
        "variants": {"zh": text, "en": text},
        "outputs": [{"name": "patients", "meaning": {"zh": "患者数", "en": "patients"}, "column": "patients"}],
        "asks": {lang: {level: ["patients"] for level in text} for lang in ("zh", "en")},
        "gold_sql": [
            "select count(distinct patient_id) as patients from emr.t_med_order where extract(year from kssj) = {year}",
            "select count(distinct patient_id) as patients from emr.t_med_order where extract(year from kssj) <= {year}",
        ],
        "tables": ["t_med_order"],
        "turns": [{"user": None, "expected_tool_calls": [{"name": "execute_sql"}]}],
    }
    return Template.model_validate(data if admits is None else data | {"admits": admits})


@pytest.mark.parametrize(
    ("admits", "expected", "version", "why"),
    [
        (
            {"zh": {"technical": [0]}, "en": {"technical": [0]}},
            {("zh", "technical"): [0], ("en", "technical"): [0]},
            4,
            "the technical wordings name the started-in reading: their variants admit gold #0, in format 4",
        ),
        ({"en": {"technical": [1]}}, {("en", "technical"): [1]}, 4, "a wording the template names alone"),
        (None, {}, 2, "no admits key: every wording admits every gold, and the task stays format 2"),
    ],
)
def test_a_templates_admits_render_into_its_variants(
    admits: dict[str, dict[str, list[int]]] | None, expected: dict[tuple[str, str], list[int]], version: int, why: str
) -> None:
    task = instantiate(admitting_template(admits), {"year": Value("2023", 2023)}, 1)
    assert {(v.language.value, v.complexity.value): v.admits for v in task.variants if v.admits} == expected, why
    assert task.format_version == version, why


def test_a_template_admitting_a_gold_it_lacks_is_refused() -> None:
    with pytest.raises(ValidationError, match="variant zh/plain admits gold 2, but its golds are numbered 0 to 1"):
        instantiate(admitting_template({"zh": {"plain": [2]}}), {"year": Value("2023", 2023)}, 1)
