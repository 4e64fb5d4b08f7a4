"""The blind-reader study: a sample hands readers questions only, and the committed study's saved answers
are measured and counted with their verdicts (on the session's snapshot: the reference worlds are the
command's default, too slow here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evalpkg.errors import ConfigError
from evalpkg.settings import PROJECT_ROOT, Settings
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release
from evalpkg.testset.study import draw, measure, studied_templates, verdict_counts

STUDY = PROJECT_ROOT / "tasks" / "study" / "v7-seed20261203"
ANSWERS = [STUDY / "reader-a.json", STUDY / "reader-b.json"]


def test_a_packet_holds_questions_only_and_the_draw_is_the_seeds() -> None:
    rel = release.load(PROJECT_ROOT / "tasks", "v7")
    packet, key = draw(rel.tasks, "v7", 40, seed=20261203)
    text = packet.model_dump_json()
    golds = [sql for t in rel.tasks for sql in t.gold_sql]
    assert not [t.id for t in rel.tasks if t.id in text]  # no task id
    assert not [g for g in golds if g in text] and "select " not in text.lower()  # no gold
    assert not [t.provenance.template_id for t in rel.tasks if f'"{t.provenance.template_id}"' in text]
    templates = {rel.by_id()[tid].provenance.template_id for tid in key.tasks.values()}
    assert len(templates) == 40  # one task per template
    assert {p.ref: p.questions for p in packet.tasks} == {
        p["ref"]: p["questions"] for p in json.loads((STUDY / "packet.json").read_text(encoding="utf-8"))["tasks"]
    }  # the committed sample is this draw
    with pytest.raises(ConfigError, match="--size"):
        draw(rel.tasks, "v7", 10_000, seed=1)


def test_a_fresh_sample_leaves_out_the_templates_of_earlier_samples(tmp_path: Path) -> None:
    """The scorer may have been fixed for the layouts of a studied template: a fresh sample draws from the
    others, and redrawing a sample does not exclude its own templates."""
    rel = release.load(PROJECT_ROOT / "tasks", "v7")
    shutil.copytree(STUDY, tmp_path / "v7-seed20261203")
    studied = studied_templates(tmp_path / "v7-seed1", rel.tasks)
    first = {rel.by_id()[tid].provenance.template_id for tid in draw(rel.tasks, "v7", 40, 20261203)[1].tasks.values()}
    assert studied == first
    assert studied_templates(tmp_path / "v7-seed20261203", rel.tasks) == set()
    _, key = draw(rel.tasks, "v7", 40, seed=1, studied=studied)
    assert not {rel.by_id()[tid].provenance.template_id for tid in key.tasks.values()} & studied
    with pytest.raises(ConfigError, match="not in an earlier sample"):
        draw(rel.tasks, "v7", len({t.provenance.template_id for t in rel.tasks}) - 39, seed=1, studied=studied)


def test_the_saved_answers_are_measured_and_judged(synced: SyncReport, generated: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "study"
    shutil.copytree(STUDY, folder)
    settings = generated.model_copy(update={"tasks_dir": PROJECT_ROOT / "tasks"})
    results = {r.reader: r for r in measure(settings, folder, ANSWERS, reference=())}
    a, b = results["reader-a"], results["reader-b"]
    assert a.worlds == b.worlds == ["snapshot"]
    # R09: 2022's top drugs; reader-a counted orders from 2022 on, with no end to the year
    assert "R09" in a.disagreements() and "R09" not in b.disagreements()
    # R04: quarters written '2020-Q1' by reader-b, numbers by the gold: the same periods
    assert "R04" not in b.disagreements()
    # R35: reader-b's long form with descriptive labels ('2 tested, no valid result')
    assert "R35" not in b.disagreements()
    counts = verdict_counts(folder, list(results.values()))
    assert counts["reader-a"]["reader_wrong"] == 1 and counts["reader-a"]["scorer_fp"] == 0
    # R25: rows by scope (Cardiology, Whole hospital), columns by month, for dept_/hospital_ prev/this
    assert "R25" not in a.disagreements() and "R25" not in b.disagreements()
    assert counts["reader-a"]["scorer_fn"] == counts["reader-b"]["scorer_fn"] == 0


def test_a_sample_outlived_by_its_release_is_measured_on_the_tasks_still_in_it(
    synced: SyncReport, generated: Settings, tmp_path: Path
) -> None:
    """A release re-cut after the draw: a task that left it is not measured (and says so); the rest are."""
    folder = tmp_path / "study"
    shutil.copytree(STUDY, folder)
    key = json.loads((folder / "key.json").read_text(encoding="utf-8"))
    key["tasks"]["R09"] = "st-no_such_task-001"
    (folder / "key.json").write_text(json.dumps(key), encoding="utf-8")
    said: list[str] = []
    settings = generated.model_copy(update={"tasks_dir": PROJECT_ROOT / "tasks"})
    (a,) = measure(settings, folder, ANSWERS[:1], reference=(), progress=said.append)
    assert "R09" not in a.agreement and len(a.agreement) == 39
    assert any("R09" in line and "no longer in v7" in line for line in said), said
