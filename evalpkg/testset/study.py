"""The blind-reader study of a release: a fresh random sample of its tasks (one per template, follow-up
turns with them, the seed recorded) handed to readers as questions only (the packet: no gold, no task id,
no template name), each reader's SQL measured against the gold with the same grading as a second
annotation, on the snapshot and in every reference world (agreement only where it holds in all of them),
and every disagreement judged (verdicts.json) into the per-reader FN and FP counts a release records."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ValidationError

from evalpkg.errors import ConfigError
from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.testset import release, worlds
from evalpkg.testset.annotate import Annotation, Written, measure_in_worlds
from evalpkg.testset.models import Annotator, Complexity, Task

STUDY_FORMAT_VERSION: Final = 1
READER_LEVELS = (Complexity.colloquial, Complexity.plain)  # what a clinician would say; technical names columns
Verdict = Literal["reader_wrong", "gold_wrong", "gold_narrower", "scorer_fn", "scorer_fp", "ambiguous"]


class PacketTask(BaseModel):
    ref: str  # R01..: what the reader answers under
    questions: dict[str, str]  # "zh/colloquial" -> the wording
    clinician: list[str] = []  # what the clinician answers when asked what they meant (clarification tasks)
    followups: list[dict[str, str]] = []  # each later question of the dialogue that has its own answer


class Packet(BaseModel):
    format_version: Literal[1] = STUDY_FORMAT_VERSION
    release: str
    seed: int
    drawn_at: str
    instructions: str
    tasks: list[PacketTask]


class Key(BaseModel):
    """Kept from readers: which task each reference is."""

    release: str
    seed: int
    tasks: dict[str, str]  # ref -> task id


class ReaderAnswer(BaseModel):
    sql: str | None  # None: the reader found it unanswerable from the database
    followups: list[str | None] = []
    reading: str = ""


class ReaderAnswers(BaseModel):
    reader: str
    answers: dict[str, ReaderAnswer]


class Judged(BaseModel):
    verdict: Verdict
    note: str


INSTRUCTIONS = (
    "Write one PostgreSQL query per task that answers the question as a careful analyst would, from the "
    "questions, the clinician's answers and the database only (meta.data_dictionary explains every column; "
    "meta.snapshot.pinned_now is 'now'). Each task's wordings ask the same thing. A follow-up is a new "
    "question on the previous answer: answer it with its own query. Save {reader, answers: {ref: {sql, "
    "followups: [sql, ...], reading}}} as JSON; sql null where the database cannot answer it."
)


def draw(tasks: list[Task], version: str, size: int, seed: int, studied: Collection[str] = ()) -> tuple[Packet, Key]:
    """`size` tasks of distinct templates in the seed's order (a dialogue brings its follow-ups); templates
    in `studied` (those of earlier samples, whose layouts the scorer may have been fixed for) left out."""
    by_template: dict[str, list[Task]] = {}
    for t in tasks:
        if t.answerable and _template(t) not in studied:
            by_template.setdefault(_template(t), []).append(t)
    rng = random.Random(seed)
    templates = sorted(by_template)
    rng.shuffle(templates)
    if len(templates) < size:
        left = f" not in an earlier sample ({len(set(studied))} are)" if studied else ""
        raise ConfigError(
            f"--size: {version} has {len(templates)} templates with an answerable task{left}, fewer than {size}"
        )
    chosen = [rng.choice(by_template[name]) for name in templates[:size]]
    refs = {f"R{i:02d}": t for i, t in enumerate(chosen, 1)}
    packet = Packet(
        release=version,
        seed=seed,
        drawn_at=datetime.now(UTC).isoformat(timespec="seconds"),
        instructions=INSTRUCTIONS,
        tasks=[_packet_task(ref, t) for ref, t in refs.items()],
    )
    return packet, Key(release=version, seed=seed, tasks={ref: t.id for ref, t in refs.items()})


def _template(task: Task) -> str:
    return task.provenance.template_id or task.id


def studied_templates(sample: Path, tasks: list[Task]) -> set[str]:
    """The templates of the release's samples other than `sample` (tasks/study/<version>-seed<N>)."""
    by_id = {t.id: _template(t) for t in tasks}
    version = sample.name.rpartition("-seed")[0]
    found: set[str] = set()
    for path in sorted(sample.parent.glob(f"{version}-seed*/key.json")):
        if path.parent == sample:
            continue
        key = release.read_model(Key, path, error=ConfigError)
        found |= {by_id.get(task_id, task_id) for task_id in key.tasks.values()}
    return found


def _packet_task(ref: str, task: Task) -> PacketTask:
    questions = {
        f"{v.language.value}/{v.complexity.value}": v.text for v in task.variants if v.complexity in READER_LEVELS
    }
    clinician = [" / ".join(s.answer.values()) for s in task.hidden_slots]
    followups = [
        {lang.value: text for lang, text in (task.turns[i].user or {}).items()} for i in task.graded_turns()[1:]
    ]
    return PacketTask(ref=ref, questions=questions, clinician=clinician, followups=followups)


def write_sample(folder: Path, packet: Packet, key: Key) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "packet.json").write_text(packet.model_dump_json(indent=1), encoding="utf-8")
    (folder / "key.json").write_text(key.model_dump_json(indent=1), encoding="utf-8")


def load_answers(path: Path) -> ReaderAnswers:
    return release.read_model(ReaderAnswers, path, error=ConfigError)


def annotation_of(answers: ReaderAnswers, key: Key, tasks: dict[str, Task]) -> tuple[Annotation, list[Task]]:
    """The reader's answers as a second annotation of the sampled tasks still in the release (follow-ups by
    template: a sample holds one task per template)."""
    unknown = sorted(set(answers.answers) - set(key.tasks))
    if unknown:
        raise ConfigError(f"answers of {answers.reader}: {unknown[0]} is not a task of the sample")
    sampled = [tasks[tid] for tid in key.tasks.values() if tid in tasks]
    kept = {ref: a for ref, a in answers.answers.items() if key.tasks[ref] in tasks}
    written = {key.tasks[ref]: Written(sql=a.sql, reading=a.reading) for ref, a in kept.items()}
    followups = {
        tasks[key.tasks[ref]].provenance.template_id or key.tasks[ref]: [Written(sql=s) for s in a.followups]
        for ref, a in kept.items()
        if a.followups
    }
    reader = Annotator(role="analyst", id=answers.reader)
    return Annotation(
        annotator=reader, written_from="the blind-reader packet", tasks=written, followups=followups
    ), sampled


class ReaderResult(BaseModel):
    reader: str
    worlds: list[str]  # "snapshot", then each reference world's label
    agreement: dict[str, list[float]]  # ref -> agreement in each of `worlds`
    details: dict[str, str]  # ref -> the comparator's detail (where it differs: in the first world it does)

    def disagreements(self) -> list[str]:
        """The references whose answer disagrees with the gold in at least one world."""
        return [ref for ref, a in self.agreement.items() if min(a) < 1.0]


def measure(
    settings: Settings,
    folder: Path,
    answer_files: list[Path],
    reference: tuple[worlds.World, ...] = worlds.WORLDS,
    *,
    progress: Progress = quiet,
) -> list[ReaderResult]:
    key = release.read_model(Key, folder / "key.json", error=ConfigError)
    rel = release.load(settings.tasks_dir, key.release)
    tasks = rel.by_id()
    if gone := sorted(ref for ref, tid in key.tasks.items() if tid not in tasks):
        # a release re-cut after the draw: the tasks still in it are the same questions with the same golds
        progress(f"not measured, no longer in {key.release}: {', '.join(gone)}")
    readers = [annotation_of(load_answers(p), key, tasks) for p in answer_files]
    refs = {tid: ref for ref, tid in key.tasks.items()}
    measured = measure_in_worlds(settings, readers, key.release, reference, progress=progress)
    return [
        ReaderResult(
            reader=m.annotator.id,
            worlds=m.worlds,
            agreement={refs[t.task_id]: t.per_world for t in m.tasks},
            details={refs[t.task_id]: t.detail for t in m.tasks},
        )
        for m in measured
    ]


def save_results(folder: Path, results: list[ReaderResult]) -> None:
    (folder / "measured.json").write_text(
        json.dumps([r.model_dump() for r in results], ensure_ascii=False, indent=1), encoding="utf-8"
    )


def verdict_counts(folder: Path, results: list[ReaderResult]) -> dict[str, Counter[str]]:
    """reader -> verdict -> how many answers were judged so: every disagreement ('unjudged' where
    verdicts.json has none), and every agreement a judge found wrong (scorer_fp)."""
    path = folder / "verdicts.json"
    judged: dict[str, dict[str, Judged]] = {}
    if path.exists():
        raw = json.loads(path.read_text(encoding="utf-8"))
        try:
            judged = {r: {ref: Judged.model_validate(v) for ref, v in per.items()} for r, per in raw.items()}
        except ValidationError as exc:
            raise ConfigError(f"{path}: {exc.errors()[0]['msg']}") from exc
    counts: dict[str, Counter[str]] = {}
    for r in results:
        mine = judged.get(r.reader, {})
        counts[r.reader] = Counter(mine[ref].verdict if ref in mine else "unjudged" for ref in r.disagreements())
        counts[r.reader]["scorer_fp"] += sum(
            j.verdict == "scorer_fp" for ref, j in mine.items() if ref not in r.disagreements()
        )
    return counts
