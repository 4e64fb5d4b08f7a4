"""`evalpkg testset migrate --from vN`: the next release is vN with every task's outputs and its variants'
asks (issue 9: a variant is graded on the outputs it asks for) taken from the task's template, and the
variant texts re-rendered from it where the template was reworded; nothing else changes. Ticket tasks
grade every gold column, asked by every variant. Checked on the eval DB: each variant is answered by a gold."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import psycopg

from evalpkg.errors import DataError
from evalpkg.progress import Progress, quiet
from evalpkg.settings import Settings
from evalpkg.testset import release
from evalpkg.testset.build import Template, instantiate, load_templates
from evalpkg.testset.gold import GoldError, agent_connection, snapshot_version
from evalpkg.testset.models import TASK_FORMAT_VERSION, Language, Output, QuestionVariant, Task
from evalpkg.testset.params import Value, chosen, domains
from evalpkg.testset.validate import gold_columns, output_problems


@dataclass
class Migration:
    source: str
    tasks: list[Task] = field(default_factory=list)
    changes: dict[str, str] = field(default_factory=dict)  # task id -> what changed
    variants: int = 0
    narrower: int = 0  # variants asking for fewer columns than their gold returns
    reworded: int = 0  # variants whose text was re-rendered from a reworded template
    wordings: set[tuple[str, str, str]] = field(default_factory=set)  # (template, language, complexity) reworded

    def summary(self) -> str:
        return (
            f"Per-variant grading (issue 9): every task of {self.source} now declares its outputs "
            f"(format_version {TASK_FORMAT_VERSION}) and each question variant the outputs its wording asks for; "
            "an instance is graded on those only (execution match on their gold columns; number answer points "
            "in other columns are not graded), because variants often ask for less than the gold returns and an "
            "agent answering exactly what it was asked failed. Outputs and asks come from each task's template "
            "(ticket tasks: every gold column, asked by every variant). "
            f"{len(self.tasks)} tasks; {self.narrower} of {self.variants} variants ask for fewer outputs than "
            f"their gold returns; {self.reworded} variants were reworded so that they ask for an output the gold "
            f"returns ({len(self.wordings)} template wordings in {len({w[0] for w in self.wordings})} templates, "
            "re-rendered with each task's own params). Nothing else changed."
        )


def migrate(settings: Settings, source: str, *, progress: Progress = quiet) -> tuple[release.Release, Migration]:
    tasks_dir = settings.tasks_dir
    src = release.load_source(tasks_dir, source, "migrate")
    templates = {t.id: t for t in load_templates().templates}
    plan = Migration(source)
    with agent_connection(settings) as conn:
        with conn.transaction():
            domain = domains(conn)
        snap = snapshot_version(conn)
        for i, task in enumerate(src.tasks, 1):
            plan.tasks.append(_migrate_task(conn, task, templates, domain, plan))
            if i % 50 == 0:
                progress(f"migrated {i}/{len(src.tasks)} tasks")
    plan.wordings = _rewordings(src.tasks, plan.tasks)
    if not plan.changes:
        raise DataError(f"{source}: nothing to migrate, every task already carries its outputs")
    target = release.next_version(tasks_dir)
    rel = release.write(tasks_dir, target, plan.tasks, snap, release.ChangeSet(changed=plan.changes))
    release.add_changelog_summary(tasks_dir, target, plan.summary())
    return rel, plan


def _migrate_task(
    conn: psycopg.Connection,
    task: Task,
    templates: dict[str, Template],
    domain: dict[str, list[Value]],
    plan: Migration,
) -> Task:
    try:
        columns = [gold_columns(conn, sql) for sql in task.gold_sql]
    except GoldError as exc:
        raise DataError(f"{task.id}: gold SQL fails on this snapshot: {exc}") from exc
    if task.provenance.source == "ticket":
        outputs, variants, why = _ticket_outputs(task, columns)
    else:
        outputs, variants, why = _template_outputs(task, templates, domain, plan)
    update = {"format_version": TASK_FORMAT_VERSION, "outputs": outputs, "variants": variants}
    new = Task.model_validate(task.model_copy(update=update).model_dump())
    if problems := output_problems(new, columns):
        raise DataError(f"{problems[0]} (fix the template's outputs or asks)")
    plan.variants += len(new.variants)
    plan.narrower += sum(
        len(new.graded_columns(v.language, v.complexity) or columns[0]) < len(columns[0])
        for v in new.variants
        if columns
    )
    if new != task:
        plan.changes[task.id] = why
    return new


def _template_outputs(
    task: Task, templates: dict[str, Template], domain: dict[str, list[Value]], plan: Migration
) -> tuple[list[Output], list[QuestionVariant], str]:
    t = templates.get(task.provenance.template_id or "")
    if t is None:
        raise DataError(f"{task.id}: template {task.provenance.template_id!r} is not in the templates")
    try:
        combo = chosen(domain, task.provenance.params)
    except DataError as exc:
        raise DataError(f"{task.id}: {exc}") from None
    fresh = instantiate(t, combo, int(task.id.rsplit("-", 1)[1]))
    if fresh.id != task.id or fresh.gold_sql != task.gold_sql:
        raise DataError(f"{task.id}: template {t.id} no longer renders this task's gold SQL; cannot migrate it")
    variants, reworded, narrower = [], [], []
    for v in task.variants:
        now = fresh.variant(v.language, v.complexity)
        variants.append(v.model_copy(update={"text": now.text, "asks": now.asks}))
        label = f"{v.language.value}/{v.complexity.value}"
        if now.text != v.text:
            reworded.append(label)
        if now.asks and len(now.asks) < len(fresh.outputs):
            narrower.append(f"{label} ({len(now.asks)} of {len(fresh.outputs)})")
    plan.reworded += len(reworded)
    if not fresh.outputs:
        return [], variants, f"format {TASK_FORMAT_VERSION}; no outputs (unanswerable)"
    why = f"outputs {', '.join(o.name for o in fresh.outputs)} from template {t.id}"
    if narrower:
        why += f"; variants asking for fewer: {', '.join(narrower)}"
    if reworded:
        why += f"; reworded to ask for what the gold returns: {', '.join(reworded)}"
    return list(fresh.outputs), variants, why


def _ticket_outputs(task: Task, columns: list[list[str]]) -> tuple[list[Output], list[QuestionVariant], str]:
    """Every gold column an output, asked by every variant (golds naming their columns differently: none,
    so every gold column stays graded as before)."""
    if not columns or any([c.lower() for c in cols] != [c.lower() for c in columns[0]] for cols in columns):
        return (
            [],
            list(task.variants),
            f"format {TASK_FORMAT_VERSION}; golds name their columns differently: all graded",
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
    differently on this DB, which is drift, not a rewording."""
    changed: dict[tuple[str, str, str], set[bool]] = {}
    for old, new in zip(before, after, strict=True):
        for v, w in zip(old.variants, new.variants, strict=True):
            key = (old.provenance.template_id or old.id, v.language.value, v.complexity.value)
            changed.setdefault(key, set()).add(v.text != w.text)
    mixed = sorted(k for k, seen in changed.items() if len(seen) > 1)
    if mixed:
        template, lang, level = mixed[0]
        raise DataError(
            f"template {template}: the {lang}/{level} text changed for some of its tasks only; the eval DB "
            "renders parameters differently from the release, so migrate cannot tell a rewording from drift"
        )
    return {k for k, seen in changed.items() if seen == {True}}
