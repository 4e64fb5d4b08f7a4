"""Releases on disk: tasks/<version>/tasks/*.json + MANIFEST.json (sha256 per file) + CHANGELOG.md."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from pydantic import BaseModel, ValidationError

from evalpkg.errors import DataError
from evalpkg.testset.models import Task

MANIFEST = "MANIFEST.json"
CHANGELOG = "CHANGELOG.md"
MANIFEST_FORMAT_VERSION = 1
VERSION_RE = re.compile(r"^v(\d+)$")


class Manifest(BaseModel):
    format_version: int = MANIFEST_FORMAT_VERSION
    version: str
    released: str
    snapshot_version: str  # the eval snapshot the gold SQL was checked on at release time
    task_count: int
    files: dict[str, str]  # relative path -> sha256


@dataclass
class Release:
    version: str
    root: Path
    manifest: Manifest
    tasks: list[Task]

    def by_id(self) -> dict[str, Task]:
        return {t.id: t for t in self.tasks}


@dataclass
class ChangeSet:
    added: dict[str, str] = field(default_factory=dict)  # id -> reason
    changed: dict[str, str] = field(default_factory=dict)
    removed: dict[str, str] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def versions(tasks_dir: Path) -> list[str]:
    found = (
        [p.name for p in tasks_dir.iterdir() if p.is_dir() and VERSION_RE.match(p.name)] if tasks_dir.is_dir() else []
    )
    return sorted(found, key=lambda v: int(v[1:]))


def latest(tasks_dir: Path) -> str:
    found = versions(tasks_dir)
    if not found:
        raise DataError(f"{tasks_dir}: no release (v1, v2, ...) found")
    return found[-1]


def next_version(tasks_dir: Path) -> str:
    found = versions(tasks_dir)
    return f"v{int(found[-1][1:]) + 1}" if found else "v1"


def task_json(task: Task) -> str:
    return json.dumps(task.model_dump(mode="json", exclude_defaults=False), ensure_ascii=False, indent=2) + "\n"


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start})") from exc


def parse_task_file(path: Path, label: str) -> Task:
    try:
        return Task.model_validate_json(read_text(path))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(file)"
        raise DataError(f"{label}: field {loc}: {err['msg']}") from exc


def load(tasks_dir: Path, version: str | None = None, *, verify: bool = True) -> Release:
    version = version or latest(tasks_dir)
    root = tasks_dir / version
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        raise DataError(f"{manifest_path}: release manifest not found")
    try:
        manifest = Manifest.model_validate_json(read_text(manifest_path))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(map(str, err["loc"])) or "(file)"
        raise DataError(f"{manifest_path}: field {loc}: {err['msg']}") from exc
    on_disk = {str(p.relative_to(root)) for p in (root / "tasks").glob("*.json")}
    if verify:
        if extra := sorted(on_disk - set(manifest.files)):
            raise DataError(f"{root / extra[0]}: file is not in {MANIFEST}")
        for rel, digest in sorted(manifest.files.items()):
            path = root / rel
            if not path.is_file():
                raise DataError(f"{path}: listed in {MANIFEST} but missing")
            if sha256(path) != digest:
                parse_task_file(path, f"{path} (sha256 differs from {MANIFEST})")  # name the broken field first
                raise DataError(f"{path}: sha256 differs from {MANIFEST} (file was modified after release)")
    tasks = [parse_task_file(root / rel, str(root / rel)) for rel in sorted(on_disk)]
    return Release(version, root, manifest, tasks)


def write(tasks_dir: Path, version: str, tasks: list[Task], snapshot_version: str, changes: ChangeSet) -> Release:
    """Write a complete release atomically enough: into a temp dir, renamed into place at the end."""
    root = tasks_dir / version
    if root.exists():
        raise DataError(f"{root}: release already exists; releases are immutable")
    staging = tasks_dir / f".{version}.tmp"
    if staging.exists():
        for p in sorted(staging.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        staging.rmdir()
    (staging / "tasks").mkdir(parents=True)
    files = {}
    for task in sorted(tasks, key=lambda t: t.id):
        rel = f"tasks/{task.id}.json"
        (staging / rel).write_text(task_json(task), encoding="utf-8")
        files[rel] = sha256(staging / rel)
    manifest = Manifest(
        version=version,
        released=date.today().isoformat(),
        snapshot_version=snapshot_version,
        task_count=len(tasks),
        files=files,
    )
    (staging / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    staging.rename(root)
    _append_changelog(tasks_dir, version, manifest.released, changes)
    return Release(version, root, manifest, sorted(tasks, key=lambda t: t.id))


def _append_changelog(tasks_dir: Path, version: str, released: str, changes: ChangeSet) -> None:
    path = tasks_dir / CHANGELOG
    lines = [f"## {version} ({released})", ""]
    for title, items in (("Added", changes.added), ("Changed", changes.changed), ("Removed", changes.removed)):
        if items:
            lines += [f"### {title}", *[f"- `{tid}`: {reason}" for tid, reason in sorted(items.items())], ""]
    old = path.read_text(encoding="utf-8") if path.exists() else "# Test set changelog\n\n"
    head, _, rest = old.partition("\n\n")
    path.write_text(f"{head}\n\n" + "\n".join(lines) + "\n" + rest, encoding="utf-8")


def changelog_entry(tasks_dir: Path, version: str) -> ChangeSet:
    """Parse one version's section back (used by tests and `testset diff`)."""
    text = (tasks_dir / CHANGELOG).read_text(encoding="utf-8")
    section = text.split(f"## {version} ", 1)[1].split("\n## ", 1)[0]
    out = ChangeSet()
    current: dict[str, str] | None = None
    for line in section.splitlines():
        if line.startswith("### "):
            current = {"Added": out.added, "Changed": out.changed, "Removed": out.removed}[line[4:].strip()]
        elif line.startswith("- `") and current is not None:
            tid, reason = line[3:].split("`: ", 1)
            current[tid] = reason
    return out


def diff(a: Release, b: Release) -> ChangeSet:
    ta, tb = a.by_id(), b.by_id()
    out = ChangeSet()
    for tid in sorted(tb.keys() - ta.keys()):
        out.added[tid] = "new in " + b.version
    for tid in sorted(ta.keys() - tb.keys()):
        out.removed[tid] = "not in " + b.version
    for tid in sorted(ta.keys() & tb.keys()):
        if ta[tid] != tb[tid]:
            fields = [f for f in Task.model_fields if getattr(ta[tid], f) != getattr(tb[tid], f)]
            out.changed[tid] = "fields: " + ", ".join(fields)
    return out
