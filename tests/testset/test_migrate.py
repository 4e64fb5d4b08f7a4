"""`evalpkg testset migrate`: the committed v6 (v5 re-rendered from the reworded, clinically reviewed
templates) is reproducible from v5 and the templates on a freshly synced DB (its own de-identification
key), migrating again is refused, and a wording that changed for some tasks of a template only is drift."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from evalpkg.errors import DataError
from evalpkg.prod.catalog import reference
from evalpkg.settings import Settings
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import migrate as migrate_module
from evalpkg.testset import release
from evalpkg.testset.build import Template, TemplateFile, load_templates
from evalpkg.testset.migrate import _rewordings, migrate
from evalpkg.testset.models import Complexity, Language, Task
from evalpkg.testset.params import RETIRED_GLUCOSE_WHY, Value, mid_sentence
from tests.testset.test_models_and_fingerprints import task_dict

COMMITTED = Path(__file__).resolve().parents[2] / "tasks"
SOURCE, MIGRATED = "v5", "v6"  # the latest release `migrate` made, and the one it was cut from
READINGS_REASON = "golds as readings"  # v8's --reason
REASON = (  # as given with --reason
    "names are written as a clinician types them (lab tests, diagnoses and drugs in lower case mid-sentence, "
    "no possessive on a department name, no article before a test name)"
)


def tasks_before(folder: Path, source: str, migrated: str) -> Path:
    """tasks/ as it was before `migrated`: the releases up to `source` and the CHANGELOG from `source` on."""
    for version in release.versions(COMMITTED)[: int(source[1:])]:
        shutil.copytree(COMMITTED / version, folder / version)
    text = (COMMITTED / release.CHANGELOG).read_text(encoding="utf-8")
    head, rest = text.split(f"## {migrated} ", 1)
    (folder / release.CHANGELOG).write_text(head + f"## {source} " + rest.split(f"\n## {source} ", 1)[1], "utf-8")
    return folder


def redecided_since(tasks: list[Task]) -> set[str]:
    """Tasks of the templates v11 re-rendered (the test set's principles: golds decided otherwise, wordings that
    now say which reading they want) and v12 (wordings that name the golds they admit): migrating an older
    release now gives them today's golds and wordings."""
    changed = [tid for v in ("v11", "v12") for tid in release.read_changes(COMMITTED, v).change_set().changed]
    templates = {tid.split("-", 1)[1].rsplit("-", 1)[0] for tid in changed}
    return {t.id for t in tasks if t.provenance.template_id in templates}


def _files(rel: release.Release, left_out: set[str]) -> dict[str, str]:
    return {f: h for f, h in rel.manifest.files.items() if Path(f).stem not in left_out}


@pytest.fixture
def before_migrated(tmp_path: Path) -> Path:
    return tasks_before(tmp_path, SOURCE, MIGRATED)


def test_the_readings_release_is_reproducible_from_its_source(
    synced: SyncReport, generated: Settings, tmp_path: Path
) -> None:
    """v8 is v7 with the golds of the templates that carry readings: migrating v7 now writes it byte for byte
    (the arbitrated alternatives of those templates replaced, every other gold kept)."""
    settings = generated.model_copy(update={"tasks_dir": tasks_before(tmp_path, "v7", "v8")})
    rel, plan = migrate(settings, "v7", reason=READINGS_REASON)
    committed = release.load(COMMITTED, "v8")
    later = redecided_since(rel.tasks)
    assert rel.version == "v8" and _files(rel, later) == _files(committed, later)
    assert plan.readings + plan.decided >= len(release.changelog_entry(COMMITTED, "v8").changed) > 0
    # the arbitrated reading of unit-glu_patients_above_threshold_dept-013 counted any report but a voided one;
    # the template's counts final reports, as the task's own gold does
    task = "unit-glu_patients_above_threshold_dept-013"
    assert any("distinct from 'C'" in g for g in release.load(COMMITTED, "v7").by_id()[task].gold_sql)
    assert not any("distinct from 'C'" in g for g in rel.by_id()[task].gold_sql)


def test_the_migrated_release_is_reproducible_from_its_source(
    synced: SyncReport, generated: Settings, before_migrated: Path
) -> None:
    settings = generated.model_copy(update={"tasks_dir": before_migrated})
    rel, plan = migrate(settings, SOURCE, reason=REASON)
    assert rel.version == MIGRATED
    committed = release.load(COMMITTED, MIGRATED)
    # v7 worded some anomaly templates neutrally (premise kind none): their tasks re-render to the new
    # wording now; every other task comes out byte for byte, with the same CHANGELOG line
    templates = load_templates().templates
    later = {t.id for t in templates if t.premise is not None and t.premise.kind == "none"}
    reworded_later = {t.id for t in rel.tasks if t.provenance.template_id in later}
    assert reworded_later, "no task of a template reworded after v6: compare every task again"
    # v8's templates carry readings (several golds): migrating now gives those tasks the template's golds
    with_readings = {
        t.id for t in templates if len(t.gold_sql) > 1 or any(len(u.get("gold_sql") or ()) > 1 for u in t.turns)
    }
    readings_later = {
        t.id
        for t in rel.tasks
        if (t.gold_sql, t.turns) != (committed.by_id()[t.id].gold_sql, committed.by_id()[t.id].turns)
    }
    redecided = redecided_since(rel.tasks)
    assert readings_later and {rel.by_id()[t].provenance.template_id for t in readings_later - redecided} <= (
        with_readings
    )
    readings_later |= redecided

    def unchanged_since(files: dict[str, str]) -> dict[str, str]:
        return {f: h for f, h in files.items() if Path(f).stem not in reworded_later | readings_later}

    assert unchanged_since(rel.manifest.files) == unchanged_since(committed.manifest.files)
    ours, theirs = release.changelog_entry(before_migrated, MIGRATED), release.changelog_entry(COMMITTED, MIGRATED)
    assert unchanged_since(ours.changed) == unchanged_since(theirs.changed) and ours.removed == theirs.removed
    for tid in reworded_later:
        now, then = rel.by_id()[tid], committed.by_id()[tid]
        same = {"variants": then.variants, "premise": then.premise, "gold_sql": then.gold_sql, "turns": then.turns}
        assert now.model_copy(update=same) == then, tid

    # the clinical review withdrew HbA1c 6.5% as a line for "poor control": that task goes, with the reason
    assert list(plan.removed) == ["clar-clar_poor_glycemic_control-005"]
    assert "6.5% is the diagnostic cut-off for diabetes" in plan.removed["clar-clar_poor_glycemic_control-005"]
    # golds (the arbitration's alternative ones included) are untouched but where the template carries
    # readings; tags and review records are untouched
    source = release.load(before_migrated, SOURCE).by_id()
    assert any(len(t.gold_sql) > 1 for t in rel.tasks if t.id not in readings_later)
    for task in rel.tasks:
        before = source[task.id]
        assert (task.tags, task.review) == (before.tags, before.review), task.id
        if task.id not in readings_later:
            assert task.gold_sql == before.gold_sql, task.id
    assert plan.reworded > 0 and plan.wordings

    with pytest.raises(DataError, match="migrate the latest release"):
        migrate(settings, SOURCE)
    with pytest.raises(DataError, match="nothing to migrate"):
        migrate(settings, MIGRATED)


def test_no_title_case_dictionary_name_mid_sentence_in_the_latest_release() -> None:
    """The English questions name lab tests, diagnoses and drugs as a clinician types them, and no department
    takes a possessive ("Orthopedics's")."""
    ref = reference()
    names = [d["xmmc_en"] for d in ref["lab_items"]] + [c["name_en"] for c in ref["conditions"]]
    names += [d["ypmc_en"] for d in ref["drugs"]]
    title_case = [n for n in names if mid_sentence(n) != n]
    assert "Creatinine" in title_case and "HbA1c" not in title_case and "COPD" not in title_case
    mid = re.compile(r"\S.*\b(" + "|".join(map(re.escape, title_case)) + r")\b")
    english = [
        v.text
        for t in release.load(COMMITTED).tasks
        for v in t.variants
        if v.language is Language.en and v.complexity is not Complexity.technical
    ]
    assert [text for text in english if mid.match(text) or "s's " in text] == []


def _task(number: int, text: str) -> Task:
    variants = [
        {"language": lang, "complexity": level, "text": f"{lang} {level} {text}"}
        for lang in ("zh", "en")
        for level in ("colloquial", "plain", "technical")
    ]
    return Task.model_validate(task_dict(id=f"st-sample-{number:03d}", variants=variants))


@pytest.mark.parametrize(
    ("why", "before", "after", "reworded"),
    [
        ("a rewording changes every task of the template", ["a Creatinine", "a COPD"], ["b creatinine", "b COPD"], 6),
        (
            "a name written in lower case changes only the tasks whose names had a capital",
            ["Creatinine", "COPD"],
            ["creatinine", "COPD"],
            6,
        ),
        ("nothing changed", ["Creatinine", "COPD"], ["Creatinine", "COPD"], 0),
    ],
)
def test_rewordings(why: str, before: list[str], after: list[str], reworded: int) -> None:
    found = _rewordings([_task(i, t) for i, t in enumerate(before)], [_task(i, t) for i, t in enumerate(after)])
    assert len(found) == reworded, why


def test_a_wording_changed_for_some_tasks_only_is_drift() -> None:
    """Another name in the eval DB (a renamed department) is not a rewording of the template."""
    before = [_task(1, "Cardiology"), _task(2, "Neurology")]
    after = [_task(1, "Cardiology"), _task(2, "Neurology and Stroke")]
    with pytest.raises(DataError, match="changed for some of its tasks only"):
        _rewordings(before, after)


@pytest.mark.parametrize(
    ("template", "params", "why"),
    [
        ("clar_poor_glycemic_control", {"hba1c": "6.5"}, "6.5% is the diagnostic cut-off for diabetes"),
        ("clar_poor_glycemic_control", {"hba1c": "9.0"}, ""),  # poor control above 9%: sensible
        ("quarterly_hba1c_control_rate_e11", {"hba1c": "9.0", "year": "2024"}, "9.0% marks poor control"),
        ("quarterly_hba1c_control_rate_e11", {"hba1c": "6.5", "year": "2024"}, ""),  # a stringent target
        ("e11_hba1c_above_threshold_share", {"hba1c": "6.5"}, ""),  # "ever above the diagnostic cut-off"
        ("glu_results_above_threshold_year", {"glucose": "7.8", "year": "2024"}, "retired parameter glucose=7.8"),
    ],
)
def test_the_clinical_review_withdraws_values_per_template(template: str, params: dict[str, str], why: str) -> None:
    t = {t.id: t for t in load_templates().templates}[template]
    retired = {"7.8": RETIRED_GLUCOSE_WHY}
    combo = {name: Value(key, None, retired.get(key, "") if name == "glucose" else "") for name, key in params.items()}
    assert (why in t.retired(combo)) if why else t.retired(combo) == ""


ADMITTING = "drug_class_patients_year"  # two readings of "in {year}": orders started in it, orders active during it


def test_an_admits_change_is_carried_and_recorded(
    synced: SyncReport, generated: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The template's technical wordings now say "started (kssj)" and admit gold #0 only: migrating its v11
    tasks gives their technical variants that admits (format 4), records why per task and in the CHANGELOG,
    and grades those wordings against the started-in gold alone; migrating again finds nothing to do."""
    tasks = [t for t in release.load(COMMITTED, "v11").tasks if t.provenance.template_id == ADMITTING]
    release.write(tmp_path, "v1", tasks, "snap", release.ChangeSet(added={t.id: "test" for t in tasks}))
    template = {t.id: t for t in load_templates().templates}[ADMITTING]
    admits = {"zh": {"technical": [0]}, "en": {"technical": [0]}}
    changed = Template.model_validate(template.model_dump() | {"admits": admits})
    monkeypatch.setattr(migrate_module, "load_templates", lambda: TemplateFile(format_version=1, templates=[changed]))
    settings = generated.model_copy(update={"tasks_dir": tmp_path})
    rel, plan = migrate(settings, "v1")
    record = release.changelog_entry(tmp_path, rel.version).changed
    assert plan.admitting == len(tasks) == len(rel.tasks) > 0
    for task in rel.tasks:
        assert "the technical wordings admit gold(s) [0] only" in record[task.id]
        assert task.format_version == 4
        assert {(v.language.value, v.complexity.value): v.admits for v in task.variants if v.admits} == {
            ("zh", "technical"): [0],
            ("en", "technical"): [0],
        }
        assert task.graded_for("en", "technical").gold_sql == task.gold_sql[:1] != task.gold_sql
        assert task.graded_for("en", "plain") is task
    assert "Admitted golds: in 4 tasks" in (tmp_path / release.CHANGELOG).read_text(encoding="utf-8")
    with pytest.raises(DataError, match="nothing to migrate"):
        migrate(settings, rel.version)
