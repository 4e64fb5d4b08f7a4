"""Instantiate the parameterized templates into tasks, grounded in and checked against the eval DB."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from pydantic import BaseModel, ValidationError

from evalpkg.errors import ConfigError, DataError
from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.sql import fingerprint
from evalpkg.sql.gold import GoldError, GoldSource, agent_connection, gold_runner, snapshot_version
from evalpkg.testset import premises, release
from evalpkg.testset.gold_checks import check_golds
from evalpkg.testset.models import (
    ADMITS_FORMAT,
    OUTPUTS_FORMAT,
    TURN_GOLDS_FORMAT,
    Annotator,
    AnswerPoint,
    Complexity,
    Difficulty,
    HiddenSlot,
    Language,
    Output,
    Premise,
    Provenance,
    QuestionVariant,
    ResultSpec,
    Review,
    Task,
    TaskType,
    Turn,
)
from evalpkg.testset.params import Value, combinations, domains

GENERATOR_VERSION = "templates-v1"
MIN_GROUPED_ROWS = 3
TYPE_PREFIX = {
    TaskType.single_table: "st",
    TaskType.join_aggregate: "ja",
    TaskType.time_series: "ts",
    TaskType.negation: "neg",
    TaskType.unit_conversion: "unit",
    TaskType.clarification: "clar",
    TaskType.anomaly: "anom",
}


class Template(BaseModel):
    id: str
    type: TaskType
    difficulty: Difficulty
    count: int
    params: list[str] = []
    variants: dict[Language, dict[Complexity, str]]
    outputs: list[Output] = []
    asks: dict[Language, dict[Complexity, list[str]]] = {}  # per wording, the output names it asks for
    # per wording, the golds it admits (indices into gold_sql: a wording that names one reading); missing: every gold
    admits: dict[Language, dict[Complexity, list[int]]] = {}
    gold_sql: list[str]
    answerable: bool = True
    tables: list[str]
    tags: list[str] = []
    result: dict[str, Any] = {}
    turns: list[dict[str, Any]]
    answer_points: list[dict[str, Any]] = []
    hidden_slots: list[dict[str, Any]] = []
    maintenance_notes: str = ""
    premise: Premise | None = None  # what its question asserts about the data; choices failing it are not used
    # gold output column -> least value on the build snapshot: a margin so that another key's date
    # shifts cannot empty a count a task's rate divides by
    min_counts: dict[str, int] = {}
    # parameter -> value key -> why this template may no longer use it (clinical review); tasks already
    # released with it are removed by the next migrate, and no new task is made with it
    withdrawn: dict[str, dict[str, str]] = {}
    since: str = "v1"  # the release that first made tasks from it; `build` (v1) uses only the v1 ones
    # why no reselection may keep or make its tasks any more ("" while one may); it stays for the releases that
    # held it (a migrate reproduces them)
    left: str = ""

    def retired(self, combo: dict[str, Value]) -> str:
        """Why no new task may use these parameters ("" if it may): a value retired everywhere
        (params.Value.retired) or withdrawn for this template."""
        why = [f"retired parameter {name}={v.key}: {v.retired}" for name, v in combo.items() if v.retired]
        why += [
            f"parameter {name}={v.key} withdrawn for template {self.id}: {self.withdrawn[name][v.key]}"
            for name, v in combo.items()
            if v.key in self.withdrawn.get(name, {})
        ]
        return "; ".join(why)

    def choices(self, domain: dict[str, list[Value]]) -> list[dict[str, Value]]:
        """Every assignment of its parameters a new task may use."""
        return [c for c in combinations(domain, self.params) if not self.retired(c)]


class TemplateFile(BaseModel):
    format_version: int
    templates: list[Template]


@dataclass
class BuildReport:
    tasks: list[Task] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)  # template id -> reasons
    short: dict[str, int] = field(default_factory=dict)  # template id -> how many it could not fill


TEMPLATE_FILES = "templates"  # evalpkg/testset/templates/*.json: templates added after v1, one file per batch


def template_files() -> list[tuple[str, Any]]:
    """(label, path) of every installed template file: templates_v1.json, then templates/*.json by name."""
    package = resources.files("evalpkg.testset")
    later = package.joinpath(TEMPLATE_FILES)
    files = [("templates_v1.json", package.joinpath("templates_v1.json"))]
    if later.is_dir():
        files += [
            (f"{TEMPLATE_FILES}/{p.name}", p)
            for p in sorted(later.iterdir(), key=lambda p: p.name)
            if p.name.endswith(".json")
        ]
    return files


def load_templates(name: str | None = None) -> TemplateFile:
    """Every template: templates_v1.json and the files under templates/ (or one file, by name)."""
    if name is not None:
        return read_template_file(resources.files("evalpkg.testset").joinpath(name), name)
    templates: list[Template] = []
    seen: dict[str, str] = {}
    for label, path in template_files():
        for t in read_template_file(path, label).templates:
            if t.id in seen:
                raise ConfigError(f"{label}: template {t.id} is defined in {seen[t.id]} already")
            seen[t.id] = label
            templates.append(t)
    return TemplateFile(format_version=1, templates=templates)


def read_template_file(path: Any, label: str) -> TemplateFile:
    """One template file (a path or an installed resource); errors name ``label`` and the field."""
    try:
        return TemplateFile.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ConfigError(f"{label}: field {'.'.join(map(str, err['loc']))}: {err['msg']}") from exc


def render(value: Any, params: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return value.format_map(params)
    if isinstance(value, list):
        return [render(v, params) for v in value]
    if isinstance(value, dict):
        return {k: render(v, params) for k, v in value.items()}
    return value


def instantiate(t: Template, combo: dict[str, Value], number: int) -> Task:
    params = {name: v.obj for name, v in combo.items()}
    r = render(t.model_dump(mode="json"), params)
    return Task(
        # the oldest format that holds it: a task without admitted golds, follow-up golds or a premise stays
        # readable by format-2 code
        format_version=(
            ADMITS_FORMAT
            if any(admits for levels in t.admits.values() for admits in levels.values())
            else TURN_GOLDS_FORMAT
            if t.premise is not None or any(turn.get("gold_sql") for turn in r["turns"])
            else OUTPUTS_FORMAT
        ),
        id=f"{TYPE_PREFIX[t.type]}-{t.id}-{number:03d}",
        type=t.type,
        difficulty=t.difficulty,
        variants=[
            QuestionVariant(
                language=Language(lang),
                complexity=Complexity(level),
                text=text,
                asks=r["asks"].get(lang, {}).get(level, []),
                admits=r["admits"].get(lang, {}).get(level, []),
            )
            for lang, levels in r["variants"].items()
            for level, text in levels.items()
        ],
        turns=[Turn.model_validate(turn) for turn in r["turns"]],
        gold_sql=r["gold_sql"],
        outputs=t.outputs,
        answerable=t.answerable,
        result=ResultSpec.model_validate(r["result"]),
        answer_points=[AnswerPoint.model_validate(a) for a in r["answer_points"]],
        hidden_slots=[HiddenSlot.model_validate(h) for h in r["hidden_slots"]],
        tags=r["tags"],
        tables=r["tables"],
        provenance=Provenance(
            source="template",
            template_id=t.id,
            params={k: v.key for k, v in combo.items()},
            generator_version=GENERATOR_VERSION,
        ),
        # Generated, not yet reviewed by people: the record says so instead of inventing annotators.
        review=Review(annotators=[Annotator(role="generator", id=GENERATOR_VERSION)], agreement=1.0, status="pending"),
        maintenance_notes=r["maintenance_notes"],
        premise=t.premise,
    )


def build(settings: Settings, *, seed: int = 1, progress: Progress = quiet) -> BuildReport:
    spec = load_templates()
    report = BuildReport()
    seen: set[str] = set()
    with agent_connection(settings) as conn, conn.transaction():
        domain = domains(conn)
    with gold_runner(settings) as golds:
        for t in spec.templates:
            if t.since != "v1":
                continue  # added by a later release, from the release it extends
            tasks, skipped = fill(golds, t, domain, seed=seed, seen=seen)
            report.tasks += tasks
            if skipped:
                report.skipped[t.id] = skipped
            if len(tasks) < t.count:
                report.short[t.id] = t.count - len(tasks)
            progress(f"{t.id}: {len(tasks)}/{t.count}")
    return report


def fill(
    golds: GoldSource, t: Template, domain: dict[str, list[Value]], *, seed: int, seen: set[str]
) -> tuple[list[Task], list[str]]:
    """Up to t.count tasks from its parameter choices in the seed's order, each usable on this snapshot
    (check_gold; fingerprints not in `seen`, which grows), and why each skipped choice was; ConfigError
    where the template itself is wrong."""
    combos = t.choices(domain)
    random.Random(f"{seed}:{t.id}").shuffle(combos)
    tasks: list[Task] = []
    skipped: list[str] = []
    for combo in combos:
        if len(tasks) == t.count:
            break
        try:
            task = instantiate(t, combo, len(tasks) + 1)
        except (ValidationError, KeyError, AttributeError, IndexError) as exc:
            raise ConfigError(f"template {t.id}: {str(exc).splitlines()[0]}") from exc
        reason = check_gold(golds, task, seen, t.min_counts)
        if reason:
            skipped.append(reason)
            continue
        seen.update(fingerprint.exact(sql) for sql in task.gold_sql)
        tasks.append(task)
    return tasks, skipped


def check_gold(golds: GoldSource, task: Task, seen: set[str], min_counts: dict[str, int]) -> str | None:
    """Why a task made from a template cannot be used on this snapshot (None: it can): a template's own
    rules (a new query, a series thick enough to survive another key, its min_counts, its stated
    premise), then the gold checks every release is held to (check_golds). ConfigError where the template
    itself is wrong (a min_counts column or an output the gold does not return)."""
    for turn in task.graded_turns():
        part = task.turn_task(turn)
        for sql in part.gold_sql:
            if reason := _template_reason(golds, part, sql, seen, min_counts if turn == 0 else {}):
                return reason + (f" (follow-up turn {turn})" if turn else "")
    problems = check_golds(task, golds)
    if outputs := [p for p in problems if p.code == "outputs"]:
        raise ConfigError(f"template {task.provenance.template_id}: {outputs[0]}")
    return str(problems[0]) if problems else None


def _template_reason(golds: GoldSource, task: Task, sql: str, seen: set[str], min_counts: dict[str, int]) -> str | None:
    if not fingerprint.is_single_select(sql):
        return f"{task.id}: gold is not one read-only query"
    if fingerprint.exact(sql) in seen:
        return f"{task.id}: duplicate fingerprint"
    try:
        rows = golds.result(sql).rows
    except GoldError:
        return None  # check_golds names it, in the words every caller uses
    # Another key shifts dates differently; a series this thin may come back empty elsewhere. Only
    # where the result's rows are groups: a grouped CTE read down to one row (LIMIT 1) is not a series.
    tree = fingerprint.parse_statement(sql)
    if tree.args.get("group") is not None and len(rows) < MIN_GROUPED_ROWS:
        return f"{task.id}: only {len(rows)} group(s), too thin to be stable across snapshots"
    names = [e.alias_or_name for e in tree.expressions]
    for column, least in min_counts.items():
        if column not in names:
            template = task.provenance.template_id
            raise ConfigError(f"template {template}: min_counts names {column!r}, not a gold column")
        value = rows[0][names.index(column)] if rows else None
        if (value or 0) < least:
            return f"{task.id}: {column} is {value}, below {least}"
    if task.premise is not None and sql == task.gold_sql[0]:
        for finding in premises.stated(task, names, rows):
            return f"{task.id}: {finding.detail}"
    return None


def build_release(settings: Settings, *, seed: int = 1, progress: Progress = quiet) -> release.Release:
    """Freeze the templates into the first release (v1)."""
    tasks_dir = settings.tasks_dir
    if release.versions(tasks_dir):
        raise DataError(f"{tasks_dir}: releases exist already; later versions come from `evalpkg testset refresh`")
    report = build(settings, seed=seed, progress=progress)
    if report.short:
        worst = ", ".join(f"{k} (-{v})" for k, v in sorted(report.short.items()))
        progress(f"templates that could not be filled completely: {worst}")
    with agent_connection(settings) as conn:
        snap = snapshot_version(conn)
    changes = release.ChangeSet(
        added={t.id: f"generated from template {t.provenance.template_id}" for t in report.tasks}
    )
    return release.write(tasks_dir, "v1", report.tasks, snap, changes)


def export_schema(settings: Settings) -> None:
    path = settings.tasks_dir / "schema" / "task.schema.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(Task.model_json_schema(), ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
