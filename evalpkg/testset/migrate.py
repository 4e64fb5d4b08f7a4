"""`evalpkg testset migrate --from vN`: the next release is vN with every task re-rendered from its template:
outputs and its variants' asks (issue 9: a variant is graded on the outputs it asks for), and the variant
texts where the template was reworded; a task whose parameters the template now withdraws (clinical review)
is removed; where a template carries readings (several golds), the task's golds (and each turn's) are the
template's; where the template now writes another first gold (a decision on what the question means, the test
set's principles), the task's golds, turns, hidden slots and answer points are the template's; each variant
admits the golds its template wording admits (format_version 4 where one names them). Nothing else changes:
other golds (arbitrated alternatives included), tags and review records stay. Ticket tasks grade every gold
column, asked by every variant. Checked on the eval DB: each variant is answered by a gold it admits.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from evalpkg.errors import DataError
from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.sql.gold import GoldError, GoldRunner, agent_connection, gold_runner, snapshot_version
from evalpkg.testset import release
from evalpkg.testset.build import Template, instantiate, load_templates
from evalpkg.testset.gold_checks import output_problems
from evalpkg.testset.models import ADMITS_FORMAT, OUTPUTS_FORMAT, Complexity, Language, Output, QuestionVariant, Task
from evalpkg.testset.params import Value, chosen, domains
from evalpkg.testset.traps import DROPPED_TAGS, notes_with_dropped


@dataclass
class Migration:
    source: str
    reason: str = ""  # why the templates were reworded, for the CHANGELOG
    tasks: list[Task] = field(default_factory=list)
    changes: dict[str, str] = field(default_factory=dict)  # task id -> what changed
    removed: dict[str, str] = field(default_factory=dict)  # task id -> why (withdrawn parameters)
    with_outputs: int = 0  # tasks that declare their outputs for the first time
    variants: int = 0
    narrower: int = 0  # variants asking for fewer columns than their gold returns
    reworded: int = 0  # variants whose text was re-rendered from a reworded template
    wordings: set[tuple[str, str, str]] = field(default_factory=set)  # (template, language, complexity) reworded
    readings: int = 0  # tasks whose golds were re-rendered from a template that carries readings
    decided: int = 0  # tasks whose first gold the template now writes otherwise (a decision of principle)
    admitting: int = 0  # tasks whose wordings now admit other golds than before (a wording naming one reading)

    def summary(self) -> str:
        parts = []
        if self.with_outputs:
            parts.append(
                f"Per-variant grading (issue 9): every task of {self.source} now declares its outputs "
                f"(format_version {OUTPUTS_FORMAT}) and each question variant the outputs its wording asks "
                "for; an instance is graded on those only (execution match on their gold columns; number answer "
                "points in other columns are not graded), because variants often ask for less than the gold "
                "returns and an agent answering exactly what it was asked failed. Outputs and asks come from each "
                "task's template (ticket tasks: every gold column, asked by every variant). "
                f"{len(self.tasks)} tasks; {self.narrower} of {self.variants} variants ask for fewer outputs than "
                f"their gold returns; {self.reworded} variants were reworded so that they ask for an output the "
                f"gold returns ({len(self.wordings)} template wordings in {len({w[0] for w in self.wordings})} "
                "templates, re-rendered with each task's own params)."
            )
        elif self.wordings:
            templates = sorted({w[0] for w in self.wordings})
            parts.append(
                f"{self.reworded} question variants re-rendered from {len(self.wordings)} reworded template "
                f"wordings in {len(templates)} templates ({', '.join(templates)}), with each task's own "
                f"parameters{': ' + self.reason if self.reason else ''}."
            )
        if self.readings:
            parts.append(
                f"Golds as readings: {self.readings} tasks take their golds from templates that now carry each "
                "defensible reading of their question as a gold of its own, written and checked by the project "
                "(they replace arbitrated alternatives copied from an annotation)."
            )
        if self.decided:
            parts.append(
                f"Decided: {self.decided} tasks ask and are graded as their templates now render them, where a "
                "decision of principle changed what the question's first gold reads or what the clinician answers."
            )
        if self.admitting:
            parts.append(
                f"Admitted golds: in {self.admitting} tasks a wording now names the golds it admits as its template "
                "does (a technical wording that names one reading is graded against that reading's gold only)."
            )
        if self.removed:
            parts.append(
                f"Removed: {len(self.removed)} task(s) whose parameters the clinical review withdrew for their "
                "template (each reason in the release's changes.json)."
            )
        return " ".join([*parts, f"{len(self.tasks)} tasks. Nothing else changed."])


def migrate(
    settings: Settings, source: str, *, reason: str = "", progress: Progress = quiet
) -> tuple[release.Release, Migration]:
    tasks_dir = settings.tasks_dir
    src = release.load_source(tasks_dir, source, "migrate")
    templates = {t.id: t for t in load_templates().templates}
    plan = Migration(source, reason.strip().rstrip("."))
    with agent_connection(settings) as conn:
        with conn.transaction():
            domain = domains(conn)
        snap = snapshot_version(conn)
    with gold_runner(settings) as golds:
        for i, task in enumerate(src.tasks, 1):
            if why := _withdrawn(task, templates, domain):
                plan.removed[task.id] = why
            else:
                plan.tasks.append(_migrate_task(golds, task, templates, domain, plan))
            if i % 50 == 0:
                progress(f"migrated {i}/{len(src.tasks)} tasks")
    plan.wordings = _rewordings([t for t in src.tasks if t.id not in plan.removed], plan.tasks)
    if not plan.changes and not plan.removed:
        raise DataError(f"{source}: nothing to migrate, every task is as its template renders it")
    target = release.next_version(tasks_dir)
    changes = release.ChangeSet(changed=plan.changes, removed=plan.removed)
    rel = release.write(tasks_dir, target, plan.tasks, snap, changes)
    release.add_changelog_summary(tasks_dir, target, plan.summary())
    return rel, plan


def _migrate_task(
    golds: GoldRunner,
    task: Task,
    templates: dict[str, Template],
    domain: dict[str, list[Value]],
    plan: Migration,
) -> Task:
    columns = _columns(golds, task)
    if task.provenance.source == "ticket":
        if task.outputs:  # declared by an earlier migrate; a ticket has no template to re-render from
            return task
        outputs, variants, why = _ticket_outputs(task, columns)
        readings: dict[str, object] = {}
    else:
        fresh = _rendered(task, _template(task, templates), domain)
        outputs, variants, why = _template_outputs(task, fresh, plan)
        readings, said = _decided(task, fresh) or _readings(task, fresh)
        admitted = _admits_changed(task, fresh)
        plan.readings += said.startswith("golds from")
        plan.decided += said.startswith("decided")
        plan.admitting += bool(admitted)
        why = "; ".join(filter(None, [why, said, admitted]))
    admits = any(v.admits for v in variants)
    update: dict[str, object] = {
        "format_version": max(task.format_version, ADMITS_FORMAT if admits else OUTPUTS_FORMAT),
        "outputs": outputs,
        "variants": variants,
        **readings,
    }
    new = Task.model_validate(task.model_copy(update=update).model_dump())
    if new.gold_sql != task.gold_sql:  # the template's readings: what its variants ask and admit is read from them
        columns = _columns(golds, new)
    if problems := output_problems(new, columns):
        raise DataError(f"{problems[0]} (fix the template's outputs, asks or admits)")
    plan.variants += len(new.variants)
    plan.narrower += sum(
        len(new.graded_columns(v.language, v.complexity) or columns[0]) < len(columns[0])
        for v in new.variants
        if columns
    )
    if new != task:
        plan.changes[task.id] = why
        plan.with_outputs += not task.outputs and bool(new.outputs)
    return new


def _columns(golds: GoldRunner, task: Task) -> list[list[str]]:
    """Each gold's result columns on this snapshot."""
    try:
        return [golds.result(sql).columns for sql in task.gold_sql]
    except GoldError as exc:
        raise DataError(f"{task.id}: gold SQL fails on this snapshot: {exc}") from exc


def _withdrawn(task: Task, templates: dict[str, Template], domain: dict[str, list[Value]]) -> str:
    """Why the task's template no longer accepts its parameters ("" if it does)."""
    if task.provenance.source == "ticket":
        return ""
    return _template(task, templates).retired(chosen(domain, task.provenance.params, task.id))


def _template(task: Task, templates: dict[str, Template]) -> Template:
    t = templates.get(task.provenance.template_id or "")
    if t is None:
        raise DataError(f"{task.id}: template {task.provenance.template_id!r} is not in the templates")
    return t


def _template_outputs(task: Task, fresh: Task, plan: Migration) -> tuple[list[Output], list[QuestionVariant], str]:
    """Outputs and variants as the template renders them now (`fresh`), and why they changed."""
    template_id = fresh.provenance.template_id
    variants, reworded, narrower = [], [], []
    for v in task.variants:
        now = fresh.variant(v.language, v.complexity)
        variants.append(v.model_copy(update={"text": now.text, "asks": now.asks, "admits": now.admits}))
        label = f"{v.language.value}/{v.complexity.value}"
        if now.text != v.text:
            reworded.append(label)
        if now.asks and len(now.asks) < len(fresh.outputs):
            narrower.append(f"{label} ({len(now.asks)} of {len(fresh.outputs)})")
    plan.reworded += len(reworded)
    if task.outputs:  # declared by an earlier migrate: only the wording can have changed
        why = f"re-rendered from the reworded template {template_id}: {', '.join(reworded)}" if reworded else ""
        return list(fresh.outputs), variants, why
    if not fresh.outputs:
        return [], variants, f"format {OUTPUTS_FORMAT}; no outputs (unanswerable)"
    why = f"outputs {', '.join(o.name for o in fresh.outputs)} from template {template_id}"
    if narrower:
        why += f"; variants asking for fewer: {', '.join(narrower)}"
    if reworded:
        why += f"; reworded to ask for what the gold returns: {', '.join(reworded)}"
    return list(fresh.outputs), variants, why


def _admits_changed(task: Task, fresh: Task) -> str:
    """How the golds the task's wordings admit changed as the template renders them now ("" if they did not),
    e.g. "the technical wordings admit gold(s) [0] only"; a complexity both languages of which changed alike is
    named as one."""
    changed: dict[tuple[int, ...], list[QuestionVariant]] = {}
    for v in task.variants:
        now = fresh.variant(v.language, v.complexity).admits
        if now != v.admits:
            changed.setdefault(tuple(now), []).append(v)
    said = []
    for admits, variants in changed.items():
        both = [c for c in Complexity if sum(v.complexity is c for v in variants) == len(Language)]
        names = [f"the {c.value} wordings" for c in both]
        names += [f"{v.language.value}/{v.complexity.value}" for v in variants if v.complexity not in both]
        said.append(f"{' and '.join(names)} admit {f'gold(s) {list(admits)} only' if admits else 'every gold'}")
    return "; ".join(said)


def _rendered(task: Task, template: Template, domain: dict[str, list[Value]]) -> Task:
    fresh = instantiate(template, chosen(domain, task.provenance.params, task.id), int(task.id.rsplit("-", 1)[1]))
    if fresh.id != task.id or len(fresh.turns) != len(task.turns):
        raise DataError(f"{task.id}: template {template.id} no longer renders this task's dialogue; cannot migrate it")
    return fresh


def _firsts(t: Task) -> list[list[str]]:
    return [t.gold_sql[:1], *(turn.gold_sql[:1] for turn in t.turns)]


def _decided(task: Task, fresh: Task) -> tuple[dict[str, object], str] | None:
    """Where the template now writes another first gold or another clinician's answer (a decision on what the
    question means: the test set's principles), the task asks and is graded as the template renders it: its
    golds, turns, hidden slots and answer points; its own tags (those that bite in every reference world) and
    review record stay."""
    asked = [(t.user, t.gold_sql[:1]) for t in task.turns], task.hidden_slots, task.gold_sql[:1]
    if asked == ([(t.user, t.gold_sql[:1]) for t in fresh.turns], fresh.hidden_slots, fresh.gold_sql[:1]):
        return None
    update: dict[str, object] = {
        "gold_sql": list(fresh.gold_sql),
        "turns": list(fresh.turns),
        "hidden_slots": list(fresh.hidden_slots),
        "answer_points": list(fresh.answer_points),
        "maintenance_notes": notes_with_dropped(
            " ".join([fresh.maintenance_notes, *DROPPED_TAGS.findall(task.maintenance_notes)])
        ),
    }
    golds = [i for i, (a, b) in enumerate(zip(_firsts(task), _firsts(fresh), strict=True)) if a != b]
    said = [f"first golds of turns {golds}"] if golds else []
    said += ["the clinician's answers"] if fresh.hidden_slots != task.hidden_slots else []
    return update, f"decided: the template now writes otherwise {' and '.join(said) or 'a follow-up question'}"


def _readings(task: Task, fresh: Task) -> tuple[dict[str, object], str]:
    """The task's golds (and each turn's) as its template writes them where the template carries readings
    (several golds): those replace the task's alternatives, which an arbitration copied from an annotator with
    the annotator's slips. Where the template writes one gold, the task keeps its own alternatives."""
    update: dict[str, object] = {}
    if len(fresh.gold_sql) > 1 and fresh.gold_sql != task.gold_sql:
        update["gold_sql"] = list(fresh.gold_sql)
    turns = [
        turn.model_copy(update={"gold_sql": list(new.gold_sql)})
        if len(new.gold_sql) > 1 and new.gold_sql != turn.gold_sql
        else turn
        for turn, new in zip(task.turns, fresh.turns, strict=True)
    ]
    if turns != task.turns:
        update["turns"] = turns
    if not update:
        return update, ""
    counts = [len(fresh.gold_sql), *(len(t.gold_sql) for t in fresh.turns if t.gold_sql)]
    per_turn = ", ".join(f"turn {i}: {n}" for i, n in enumerate(counts))
    return update, f"golds from the template's readings ({per_turn if len(counts) > 1 else counts[0]})"


def _ticket_outputs(task: Task, columns: list[list[str]]) -> tuple[list[Output], list[QuestionVariant], str]:
    """Every gold column an output, asked by every variant (golds naming their columns differently: none,
    so every gold column stays graded as before)."""
    if not columns or any([c.lower() for c in cols] != [c.lower() for c in columns[0]] for cols in columns):
        return (
            [],
            list(task.variants),
            f"format {OUTPUTS_FORMAT}; golds name their columns differently: all graded",
        )
    names: list[str] = []
    for column in columns[0]:
        name = re.sub(r"[^a-z0-9_]+", "_", column.lower()).strip("_") or "column"
        name = name if name[0].isalpha() else f"c_{name}"
        names.append(name if name not in names else f"{name}_{len(names) + 1}")
    outputs = [
        Output(name=n, meaning={Language.zh: f"结果列 {c}", Language.en: f"result column {c}"}, column=c)
        for n, c in zip(names, columns[0], strict=True)
    ]
    variants = [v.model_copy(update={"asks": names}) for v in task.variants]
    return outputs, variants, "outputs: every gold column, asked by every variant (ticket task)"


def _rewordings(before: list[Task], after: list[Task]) -> set[tuple[str, str, str]]:
    """The (template, language, complexity) wordings that changed. A reworded template wording changes that
    variant in every task of the template; one that changed in only some of them means the parameters render
    differently on this DB, which is drift, not a rewording. A change of letter case alone is how a name is
    written mid-sentence (params.mid_sentence: "Creatinine" -> "creatinine", "COPD" stays): it changes only
    the tasks whose names have a capital to lower, so it counts as a rewording wherever it happens."""
    changed: dict[tuple[str, str, str], set[bool]] = {}
    any_change: set[tuple[str, str, str]] = set()
    for old, new in zip(before, after, strict=True):
        for v, w in zip(old.variants, new.variants, strict=True):
            key = (old.provenance.template_id or old.id, v.language.value, v.complexity.value)
            if v.text != w.text:
                any_change.add(key)
                if v.text.casefold() == w.text.casefold():
                    continue
            changed.setdefault(key, set()).add(v.text != w.text)
    mixed = sorted(k for k, seen in changed.items() if len(seen) > 1)
    if mixed:
        template, lang, level = mixed[0]
        raise DataError(
            f"template {template}: the {lang}/{level} text changed for some of its tasks only; the eval DB "
            "renders parameters differently from the release, so migrate cannot tell a rewording from drift"
        )
    return any_change
