"""Double annotation, measured: a second annotator's SQL for each task, written from the colloquial and
plain questions only (never the technical wording, never the gold). Agreement is computed, never typed
in: both SQL run on the snapshot and the scorer's comparator decides, per non-technical variant, on the
columns that variant is graded on. Disagreements go to arbitration, whose outcome is recorded with who
decided and why.

Files, beside the releases (tasks/annotations/):
- `<annotator>.json`: the annotation (SQL per template with the template's parameter placeholders, or
  per task), as the annotator handed it in;
- `<annotator>.agreement.json`: the measured agreement per task, with the snapshot it was measured on;
- `arbitration.json`: per disagreeing task, the outcome.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from pydantic import BaseModel

from evalpkg.errors import DataError, QueryError, UsageError
from evalpkg.grading.comparator import COMPARATOR_VERSION
from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.sql.gold import agent_connection, gold_runner, snapshot_version
from evalpkg.testset import release, worlds
from evalpkg.testset.build import render
from evalpkg.testset.models import Annotator, Complexity, Task
from evalpkg.testset.params import Value, chosen, domains

if TYPE_CHECKING:
    from evalpkg.grading.execution import GoldCache

ANNOTATIONS = "annotations"
ARBITRATION = "arbitration.json"
FORMAT_VERSION: Final = 1
READ_FROM = (Complexity.colloquial, Complexity.plain)  # what the annotator saw
NOT_ANNOTATED = "not annotated"  # the detail of a task the annotation has no SQL for
Outcome = Literal["gold_upheld", "gold_fixed", "alternative_added", "reworded", "dropped"]


class Written(BaseModel):
    sql: str | None  # None: the annotator found the question unanswerable from the database
    reading: str = ""  # how the annotator read the question


class Annotation(BaseModel):
    format_version: Literal[1] = FORMAT_VERSION
    annotator: Annotator
    written_from: str = "the colloquial and plain questions (zh, en) and the data dictionary"
    templates: dict[str, Written] = {}  # template id -> SQL with the template's {param.field} placeholders
    tasks: dict[str, Written] = {}  # task id -> SQL (ticket tasks, or where one task differs)
    # template id -> SQL per follow-up turn with its own gold, in order (placeholders as in `templates`)
    followups: dict[str, list[Written]] = {}


class TaskAgreement(BaseModel):
    task_id: str
    agreement: float  # share of the non-technical variants on which both results match (the least, in worlds)
    detail: str  # what differed (where first measured in several worlds: "<world>: ..."), or "match"
    per_world: list[float] = []  # in each of the file's `worlds`, where measured in several


class AgreementFile(BaseModel):
    format_version: Literal[1] = FORMAT_VERSION
    annotator: Annotator
    version: str
    snapshot_version: str
    measured_at: str
    tasks: list[TaskAgreement]
    comparator_version: int | None = None  # the rules it was measured by (None: before v4 recorded it)
    worlds: list[str] = []  # "snapshot", then each reference world, where measured in several

    def coincidences(self) -> list[TaskAgreement]:
        """Tasks that agree on the snapshot and not in some reference world: agreement by coincidence."""
        return [t for t in self.annotated() if t.per_world and t.per_world[0] == 1.0 and t.agreement < 1.0]

    def annotated(self) -> list[TaskAgreement]:
        """The tasks the annotator wrote for (an annotation may cover some templates only)."""
        return [t for t in self.tasks if t.detail != NOT_ANNOTATED]

    def overall(self) -> float:
        mine = self.annotated()
        return sum(t.agreement == 1.0 for t in mine) / len(mine) if mine else 0.0

    def disagreements(self) -> list[TaskAgreement]:
        return [t for t in self.annotated() if t.agreement < 1.0]


class Decision(BaseModel):
    outcome: Outcome
    by: str
    note: str
    at: str
    sql: str | None = None  # gold_fixed: the new gold; alternative_added: the added one


def load_annotation(path: Path) -> Annotation:
    return release.read_model(Annotation, path)


def measure(
    settings: Settings, annotation: Annotation, version: str | None = None, *, progress: Progress = quiet
) -> AgreementFile:
    """Run the annotator's SQL for every task of the release next to its gold and compare."""
    rel = release.load(settings.tasks_dir, version)
    return measure_tasks(settings, annotation, rel.tasks, rel.version, progress=progress)


def measure_tasks(
    settings: Settings, annotation: Annotation, tasks: list[Task], version: str, *, progress: Progress = quiet
) -> AgreementFile:
    """Run the annotator's SQL for each of these tasks next to its gold and compare (`version`: what the
    tasks are, a release or the review queue)."""
    from evalpkg.grading.execution import GoldCache

    with agent_connection(settings) as conn:
        snap = snapshot_version(conn)
        with conn.transaction():
            domain = domains(conn)
    results = []
    with gold_runner(settings) as golds:
        gold = GoldCache(golds)
        for i, task in enumerate(tasks, 1):
            sql = _sql_for(task, annotation, domain)
            turns = [_compare(task, sql, gold)]
            for k, turn in enumerate(task.graded_turns()[1:]):
                written = _followup_for(task, k, annotation, domain)
                turns.append(_compare(task.turn_task(turn), written, gold))
            results.append(_dialogue(task.graded_turns(), turns))
            if i % 50 == 0:
                progress(f"compared {i}/{len(tasks)} tasks")
    return AgreementFile(
        annotator=annotation.annotator,
        version=version,
        snapshot_version=snap,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        tasks=results,
        comparator_version=COMPARATOR_VERSION,
    )


def measure_in_worlds(
    settings: Settings,
    annotations: list[tuple[Annotation, list[Task]]],
    version: str,
    reference: tuple[worlds.World, ...] = worlds.WORLDS,
    *,
    progress: Progress = quiet,
) -> list[AgreementFile]:
    """Each annotation measured on the snapshot and in every reference world (each world opened once for
    all of them); a task agrees only where it agrees in every world."""
    measured = [[measure_tasks(settings, a, tasks, version, progress=progress)] for a, tasks in annotations]
    for _, scratch in worlds.each(settings, reference, progress=progress):
        for files, (a, tasks) in zip(measured, annotations, strict=True):
            files.append(measure_tasks(scratch, a, tasks, version, progress=progress))
    labels = ["snapshot", *(w.label() for w in reference)]
    return [_in_every_world(files, labels) for files in measured]


def _in_every_world(files: list[AgreementFile], labels: list[str]) -> AgreementFile:
    tasks = []
    for per_world in zip(*(f.tasks for f in files), strict=True):
        first = next((k for k, t in enumerate(per_world) if t.agreement < 1.0), 0)  # the first world it differs in
        detail = per_world[first].detail if first == 0 else f"{labels[first]}: {per_world[first].detail}"
        agreements = [t.agreement for t in per_world]
        tasks.append(
            TaskAgreement(task_id=per_world[0].task_id, agreement=min(agreements), detail=detail, per_world=agreements)
        )
    return files[0].model_copy(update={"tasks": tasks, "worlds": labels})


def remeasured(settings: Settings) -> list[AgreementFile]:
    """Every second annotation kept under tasks/annotations/, measured again now against the release it was
    first measured on, so before arbitration (the comparator's rules change; the agreement recorded in the
    release is what it was when it was cut)."""
    folder = settings.tasks_dir / ANNOTATIONS
    paths = sorted(p for p in folder.glob("*.json") if not p.name.endswith(".agreement.json") and p.name != ARBITRATION)
    out = []
    for path in paths:
        recorded = path.with_suffix(".agreement.json")
        first = AgreementFile.model_validate_json(recorded.read_text(encoding="utf-8")) if recorded.exists() else None
        out.append(measure(settings, load_annotation(path), first.version if first else None))
    return out


def _sql_for(task: Task, annotation: Annotation, domain: dict[str, list[Value]]) -> Written | None:
    """The annotator's SQL for this task (a template's, with the task's parameters filled in)."""
    written = annotation.tasks.get(task.id) or annotation.templates.get(task.provenance.template_id or "")
    if task.id in annotation.tasks:
        return written
    return _filled(task, written, domain)


def _followup_for(task: Task, k: int, annotation: Annotation, domain: dict[str, list[Value]]) -> Written | None:
    """The annotator's SQL for the task's k-th follow-up turn with its own gold (0 = the first)."""
    written = annotation.followups.get(task.provenance.template_id or "", [])
    return _filled(task, written[k], domain) if k < len(written) else None


def _filled(task: Task, written: Written | None, domain: dict[str, list[Value]]) -> Written | None:
    if written is None or written.sql is None:
        return written
    params = {name: v.obj for name, v in chosen(domain, task.provenance.params, task.id).items()}
    try:
        return Written(sql=render(written.sql, params), reading=written.reading)
    except (KeyError, AttributeError, IndexError, ValueError) as exc:
        template = task.provenance.template_id
        raise DataError(f"annotation of template {template}: placeholder {exc} is not a parameter field") from exc


def _dialogue(indices: list[int], turns: list[TaskAgreement]) -> TaskAgreement:
    """One task's agreement over its graded turns: the share of (turn, variant) comparisons that match,
    each differing turn named."""
    if len(turns) == 1 or all(t.detail == NOT_ANNOTATED for t in turns):
        return turns[0]  # an annotator who wrote nothing for the task did not annotate it
    share = sum(t.agreement for t in turns) / len(turns)
    differing = [f"turn {i}: {t.detail}" for i, t in zip(indices, turns, strict=True) if t.agreement < 1.0]
    return TaskAgreement(task_id=turns[0].task_id, agreement=share, detail="; ".join(differing) or "match")


def _compare(task: Task, written: Written | None, gold: GoldCache) -> TaskAgreement:
    from evalpkg.grading.execution import execution_match

    if written is None:
        return TaskAgreement(task_id=task.id, agreement=0.0, detail=NOT_ANNOTATED)
    if not task.gold_sql or written.sql is None:
        same = not task.gold_sql and written.sql is None
        detail = "match" if same else ("annotator: unanswerable" if task.gold_sql else "annotator wrote SQL")
        return TaskAgreement(task_id=task.id, agreement=float(same), detail=detail)
    variants = [v for v in task.variants if v.complexity in READ_FROM]
    differing = []
    for v in variants:
        try:
            asked = task.graded_columns(v.language, v.complexity)
            status, ok, _, _ = execution_match(task.graded_for(v.language, v.complexity), written.sql, gold, asked)
        except QueryError as exc:
            return TaskAgreement(task_id=task.id, agreement=0.0, detail=f"annotator SQL failed: {exc}")
        if not ok:
            differing.append(f"{v.language.value}/{v.complexity.value} ({status})")
    share = 1 - len(differing) / len(variants)
    detail = "differs for " + ", ".join(differing) if differing else "match"
    return TaskAgreement(task_id=task.id, agreement=share, detail=detail)


def save(tasks_dir: Path, annotation: Annotation, measured: AgreementFile) -> tuple[Path, Path]:
    folder = tasks_dir / ANNOTATIONS
    folder.mkdir(parents=True, exist_ok=True)
    who = annotation.annotator.id
    paths = folder / f"{who}.json", folder / f"{who}.agreement.json"
    for path, model in zip(paths, (annotation, measured), strict=True):
        tmp = path.with_suffix(".tmp")
        tmp.write_text(model.model_dump_json(indent=1) + "\n", encoding="utf-8")
        tmp.replace(path)
    return paths


def decisions(tasks_dir: Path) -> dict[str, Decision]:
    path = tasks_dir / ANNOTATIONS / ARBITRATION
    if not path.exists():
        return {}
    raw = json.loads(path.read_text(encoding="utf-8"))
    return {k: Decision.model_validate(v) for k, v in raw.items()}


def arbitrate(tasks_dir: Path, task_id: str, outcome: Outcome, by: str, note: str, sql: str | None = None) -> Decision:
    """Record the outcome for a task the annotators disagreed on (it must be one)."""
    disagreeing = {
        t.task_id
        for path in sorted((tasks_dir / ANNOTATIONS).glob("*.agreement.json"))
        for t in AgreementFile.model_validate_json(path.read_text(encoding="utf-8")).disagreements()
    }
    if task_id not in disagreeing:
        raise UsageError(f"--arbitrate: {task_id} is not a task the annotators disagreed on")
    if not note.strip():
        raise UsageError("--note: say why (arbitration is recorded with its reason)")
    if (outcome in ("gold_fixed", "alternative_added")) != bool(sql):
        raise UsageError(f"--sql: required with {outcome}, and only with gold_fixed or alternative_added")
    at = datetime.now(UTC).isoformat(timespec="seconds")
    decision = Decision(outcome=outcome, by=by, note=note, at=at, sql=sql)
    all_decisions = {**decisions(tasks_dir), task_id: decision}
    path = tasks_dir / ANNOTATIONS / ARBITRATION
    tmp = path.with_suffix(".tmp")
    body = json.dumps({k: v.model_dump() for k, v in sorted(all_decisions.items())}, indent=1, ensure_ascii=False)
    tmp.write_text(body + "\n", encoding="utf-8")
    tmp.replace(path)
    return decision
