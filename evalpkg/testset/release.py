"""Releases on disk: tasks/<version>/tasks/*.json + MANIFEST.json (sha256 per file) + changes.json (the
per-task records), and CHANGELOG.md (the prose, one section per release)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError

from evalpkg.errors import DataError, EvalpkgError
from evalpkg.interrupts import held_interrupts
from evalpkg.testset.models import Task

MANIFEST = "MANIFEST.json"
CHANGELOG = "CHANGELOG.md"
MANIFEST_FORMAT_VERSION = 1
CHANGES = "changes.json"
CHANGES_FORMAT_VERSION = 1
Kind = Literal["added", "changed", "removed"]
KINDS: tuple[Kind, ...] = ("added", "changed", "removed")
VERSION_RE = re.compile(r"^v(\d+)$")

M = TypeVar("M", bound=BaseModel)


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

    def of_kind(self, kind: Kind) -> dict[str, str]:
        return {"added": self.added, "changed": self.changed, "removed": self.removed}[kind]


class Changes(BaseModel):
    """tasks/<version>/changes.json: what the release added, changed and removed, task by task, and why.
    Beside MANIFEST.json and not listed in it: the manifest lists the task files, so a release re-made from
    its source (migrate, reselect) has the same manifest whatever its reasons say."""

    format_version: int = CHANGES_FORMAT_VERSION
    version: str
    released: str
    added: dict[str, str] = Field(default_factory=dict)  # task id -> why
    changed: dict[str, str] = Field(default_factory=dict)
    removed: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def of(cls, version: str, released: str, changes: ChangeSet) -> Changes:
        return cls(
            version=version,
            released=released,
            added=dict(sorted(changes.added.items())),
            changed=dict(sorted(changes.changed.items())),
            removed=dict(sorted(changes.removed.items())),
        )

    def change_set(self) -> ChangeSet:
        return ChangeSet(added=dict(self.added), changed=dict(self.changed), removed=dict(self.removed))


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


# Fields added by format 3, left out of a task file while unused, so that earlier releases re-made from
# their source (migrate, reselect) are the same bytes.
_FORMAT_3_TASK: dict[str, object] = {"premise": None}
_FORMAT_3_TURN: dict[str, object] = {"gold_sql": [], "outputs": [], "answer_points": [], "result": None}
_LATER_PREMISE: dict[str, object] = {"counts_events": False}  # added in v9
_FORMAT_4_VARIANT: dict[str, object] = {"admits": []}  # likewise: a wording that admits every gold


def task_json(task: Task) -> str:
    body = task.model_dump(mode="json", exclude_defaults=False)
    for key, unused in _FORMAT_3_TASK.items():
        if body.get(key) == unused:
            del body[key]
    for key, unused in _LATER_PREMISE.items():
        if body.get("premise") and body["premise"].get(key) == unused:
            del body["premise"][key]
    for turn in body["turns"]:
        for key, unused in _FORMAT_3_TURN.items():
            if turn.get(key) == unused:
                del turn[key]
    for variant in body["variants"]:
        for key, unused in _FORMAT_4_VARIANT.items():
            if variant.get(key) == unused:
                del variant[key]
    return json.dumps(body, ensure_ascii=False, indent=2) + "\n"


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text (byte {exc.start})") from exc


def read_model(model: type[M], path: Path, *, label: str | None = None, error: type[EvalpkgError] = DataError) -> M:
    """A stored model read back, or one line naming the file (or `label`) and the field that is wrong."""
    try:
        return model.model_validate_json(read_text(path))
    except OSError as exc:
        raise error(f"{label or path}: {exc.strerror}") from exc
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(map(str, err["loc"])) or "(file)"
        raise error(f"{label or path}: field {loc}: {err['msg']}") from exc


def parse_task_file(path: Path, label: str) -> Task:
    return read_model(Task, path, label=label)


def read_manifest(path: Path) -> Manifest:
    if not path.is_file():
        raise DataError(f"{path}: release manifest not found")
    return read_model(Manifest, path)


def load_source(tasks_dir: Path, source: str, action: str) -> Release:
    """The release the next one is cut from: the latest (cutting from an older one would undo later ones)."""
    if source != (newest := latest(tasks_dir)):
        raise DataError(f"--from {source}: {action} the latest release ({newest}); an older one would undo later ones")
    return load(tasks_dir, source)


def load(tasks_dir: Path, version: str | None = None, *, verify: bool = True) -> Release:
    version = version or latest(tasks_dir)
    root = tasks_dir / version
    manifest = read_manifest(root / MANIFEST)
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
    """Write a complete release, or nothing: tasks, manifest and changes.json go to a hidden temp dir and the new
    CHANGELOG to a temp file; then the dir is renamed into place and the CHANGELOG replaced, with
    Ctrl-C held between the two. A process killed between them leaves the temp CHANGELOG, which the
    next `recover` (run first by every write) puts in place."""
    recover(tasks_dir)
    root = tasks_dir / version
    if root.exists():
        raise DataError(f"{root}: release already exists; releases are immutable")
    staging, changelog = _staging(tasks_dir, version), _pending_changelog(tasks_dir, version)
    try:
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
        record = Changes.of(version, manifest.released, changes)  # in the dir: it lands with the release
        (staging / CHANGES).write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
        changelog.write_text(_changelog_with(tasks_dir, version, manifest.released, changes), encoding="utf-8")
        with held_interrupts():
            staging.rename(root)
            changelog.replace(tasks_dir / CHANGELOG)
    except BaseException:
        if not root.exists():  # not committed: leave no trace
            _remove(staging)
            changelog.unlink(missing_ok=True)
        raise
    return Release(version, root, manifest, sorted(tasks, key=lambda t: t.id))


def _staging(tasks_dir: Path, version: str) -> Path:
    return tasks_dir / f".{version}.tmp"  # hidden, and no VERSION_RE match: never seen as a release


def _pending_changelog(tasks_dir: Path, version: str) -> Path:
    return tasks_dir / f".{CHANGELOG}.{version}.tmp"


def _remove(path: Path) -> None:
    if path.is_dir():
        for p in sorted(path.rglob("*"), reverse=True):
            p.unlink() if p.is_file() or p.is_symlink() else p.rmdir()
        path.rmdir()


def _has_entry(tasks_dir: Path, version: str) -> bool:
    path = tasks_dir / CHANGELOG
    return path.is_file() and f"\n## {version} (" in path.read_text(encoding="utf-8")


def recover(tasks_dir: Path) -> None:
    """Finish or undo what an interrupted `write` left: a release whose CHANGELOG entry was not yet in
    place gets it; temp dirs and CHANGELOGs of releases never renamed into place are removed."""
    if not tasks_dir.is_dir():
        return
    for pending in tasks_dir.glob(f".{CHANGELOG}.v*.tmp"):
        version = pending.name.removeprefix(f".{CHANGELOG}.").removesuffix(".tmp")
        if (tasks_dir / version / MANIFEST).is_file() and not _has_entry(tasks_dir, version):
            pending.replace(tasks_dir / CHANGELOG)
        else:
            pending.unlink()
    for staging in tasks_dir.glob(".v*.tmp"):
        _remove(staging)


def first_released_in(tasks_dir: Path) -> dict[str, str]:
    """Task id -> the first release that holds it, from the manifests alone."""
    out: dict[str, str] = {}
    for version in versions(tasks_dir):
        for rel in read_manifest(tasks_dir / version / MANIFEST).files:
            out.setdefault(Path(rel).stem, version)
    return out


def _changelog_with(tasks_dir: Path, version: str, released: str, changes: ChangeSet) -> str:
    """The CHANGELOG with this version's section on top: its counts and a link to its per-task records (the
    prose goes above them, by `add_changelog_summary`)."""
    path = tasks_dir / CHANGELOG
    lines = [f"## {version} ({released})", "", counts_line(version, changes), ""]
    old = path.read_text(encoding="utf-8") if path.exists() else "# Test set changelog\n"
    at = old.find("\n## ") + 1  # above the newest section: the title and what the file holds stay on top
    head, rest = (old[:at], old[at:]) if at else (old.rstrip("\n") + "\n\n", "")
    return (head + "\n".join(lines) + "\n" + rest).rstrip("\n") + "\n"


def counts_line(version: str, changes: ChangeSet) -> str:
    counts = ", ".join(f"{kind} {len(changes.of_kind(kind))}" for kind in KINDS)
    return f"Tasks {counts} ([per-task changes]({version}/{CHANGES}))."


def read_changes(tasks_dir: Path, version: str) -> Changes:
    """One release's per-task records, from its changes.json."""
    read_manifest(tasks_dir / version / MANIFEST)  # an unknown release says so, as every command does
    path = tasks_dir / version / CHANGES
    if not path.is_file():
        raise DataError(f"{path}: per-task changes not found")
    record = read_model(Changes, path)
    if record.version != version:
        raise DataError(f"{path}: field version: {record.version!r}, expected {version!r}")
    return record


def changelog_entry(tasks_dir: Path, version: str) -> ChangeSet:
    """One release's added/changed/removed tasks with their reasons, from its changes.json."""
    return read_changes(tasks_dir, version).change_set()


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


def add_changelog_summary(tasks_dir: Path, version: str, text: str) -> None:
    """The why, as a paragraph under the version's heading (above its counts and link, and above any paragraph
    an earlier step of the same release wrote)."""
    path = tasks_dir / CHANGELOG
    old = path.read_text(encoding="utf-8")
    heading = next(line for line in old.splitlines() if line.startswith(f"## {version} "))
    path.write_text(old.replace(heading + "\n", f"{heading}\n\n{text}\n", 1), encoding="utf-8")
