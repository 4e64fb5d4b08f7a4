"""`evalpkg testset try-templates FILE`: one template file checked end to end without cutting a release.

Each template is filled on the README world the way `build` fills it (build.fill: the seed's order of
parameter choices, check_gold, output_problems), and with reference worlds the made tasks are held to a release's
claims in each of them: the gold is usable there (check_gold), every tagged trap bites and every premise
holds (validate.discrimination), as `validate --reference-worlds` and `reselect` hold a release. (The
command also grades each made task's gold plans: the plan compiler lives in agent/, a layer below.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from evalpkg.errors import ConfigError
from evalpkg.progress import Progress, quiet
from evalpkg.sql.gold import agent_connection, gold_runner
from evalpkg.testset import build, worlds
from evalpkg.testset.build import Template, TemplateFile, check_gold, fill, read_template_file
from evalpkg.testset.params import domains
from evalpkg.testset.validate import discrimination

if TYPE_CHECKING:
    from evalpkg.settings import Settings
    from evalpkg.testset.models import Task

README_WORLD = "README world"


@dataclass
class Problem:
    task: str  # the task id, or the template id where no task is concerned
    world: str
    reason: str

    def line(self) -> str:
        return f"{self.task} [{self.world}] {self.reason}"


@dataclass
class Tried:
    """One template: what it was asked for, what it made, and every problem found."""

    template: Template
    tasks: list[Task] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # choices build would pass over (not problems)
    problems: list[Problem] = field(default_factory=list)

    def summary(self) -> str:
        state = "ok" if not self.problems else f"{len(self.problems)} problem(s)"
        return f"{self.template.id}: {len(self.tasks)}/{self.template.count} tasks made: {state}"


def load_file(path: Path) -> TemplateFile:
    """The file's templates (ConfigError naming the file, the template and the field), none of whose ids
    another template file defines already."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such template file")
    spec = _parse(path)
    others = _installed_ids(except_name=path.name)
    seen: set[str] = set()
    for t in spec.templates:
        if t.id in seen or t.id in others:
            where = "in this file" if t.id in seen else "in another template file"
            raise ConfigError(f"{path}: template {t.id} is defined {where} already")
        seen.add(t.id)
    return spec


def _parse(path: Path) -> TemplateFile:
    """The file, each template validated on its own, so that an error names the template's id."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable JSON file: {exc}") from exc
    templates = raw.get("templates") if isinstance(raw, dict) else None
    if not isinstance(templates, list):
        raise ConfigError(f"{path}: field templates: a list of templates is required")
    for i, t in enumerate(templates):
        try:
            Template.model_validate(t)
        except ValidationError as exc:
            err = exc.errors()[0]
            name = t.get("id", f"#{i + 1}") if isinstance(t, dict) else f"#{i + 1}"
            where = ".".join(map(str, err["loc"]))
            raise ConfigError(f"{path}: template {name}: field {where}: {err['msg']}") from exc
    return read_template_file(path, str(path))  # format_version and the rest of the file


def _installed_ids(except_name: str) -> set[str]:
    """The ids the installed template files define, but for the one of this name (the file tried, or the
    installed version of the draft tried)."""
    return {
        t.id
        for label, path in build.template_files()
        if path.name != except_name
        for t in read_template_file(path, label).templates
    }


def try_templates(
    settings: Settings,
    path: Path,
    *,
    reference: tuple[worlds.World, ...] = (),
    seed: int = 1,
    progress: Progress = quiet,
) -> list[Tried]:
    """Every template of the file tried on the README world; with `reference`, in each of those worlds."""
    tried = [Tried(t) for t in load_file(path).templates]
    seen: set[str] = set()
    with agent_connection(settings) as conn, conn.transaction():
        domain = domains(conn)
    with gold_runner(settings) as golds:
        for one in tried:
            t = one.template
            try:
                one.tasks, one.skipped = fill(golds, t, domain, seed=seed, seen=seen)
            except ConfigError as exc:
                one.problems.append(Problem(t.id, README_WORLD, str(exc)))
                continue
            if len(one.tasks) < t.count:
                why = f"; first choice passed over: {one.skipped[0]}" if one.skipped else ""
                reason = f"made {len(one.tasks)} of {t.count} tasks ({len(one.skipped)} choices passed over{why})"
                one.problems.append(Problem(t.id, README_WORLD, reason))
            progress(f"{t.id}: {len(one.tasks)}/{t.count} on the {README_WORLD}")
    for world, scratch in worlds.each(settings, reference, progress=progress):
        _check_world(scratch, world, tried)
        progress(f"checked {sum(len(o.tasks) for o in tried)} task(s) in {world.label()}")
    return tried


def _check_world(scratch: Settings, world: worlds.World, tried: list[Tried]) -> None:
    """The claims of a release, held in one reference world: a usable gold, every tagged trap bites, every
    premise holds (same_answer among a template's own tasks)."""
    label = world.label()
    tasks = [task for one in tried for task in one.tasks]
    owner = {task.id: one for one in tried for task in one.tasks}
    unusable = set()
    with gold_runner(scratch) as golds:
        for one in tried:
            for task in one.tasks:
                if reason := check_gold(golds, task, set(), one.template.min_counts):
                    one.problems.append(Problem(task.id, label, reason.removeprefix(f"{task.id}: ")))
                    unusable.add(task.id)
        outcomes, findings = discrimination(golds, tasks)
    for o in outcomes:
        if o.status != "bites":
            owner[o.task_id].problems.append(Problem(o.task_id, label, f"trap {o.tag} {o.status}: {o.detail}"))
    for f in findings:
        if f.check == "premise" and f.task_id in unusable:
            continue  # check_gold refused it for its stated premise already: one line, not two
        owner[f.task_id].problems.append(Problem(f.task_id, label, f"premise {f.check}: {f.detail}"))
