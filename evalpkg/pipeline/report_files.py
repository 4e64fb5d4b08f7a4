"""The files beside a report's page, and writing page and files so that a reader never sees half of them.

The trajectories go to chunk files of about CHUNK_BYTES each, `<page>_files/<digest>/trajectories-NNNN.js`.
A chunk is a script that hands its JSON to the page (`evalpkgReport.chunk({...})`): browsers refuse
fetch() of file:// URLs but run scripts from them, so the report opens from disk, with no server.

Writing is chunks first, page last. The chunks go to a temporary folder renamed to the digest of
their contents, then the page replaces the old one (os.replace). Until that moment the old page and
its own folder are whole; after it, folders of earlier reports (and temporary ones an interrupted
write left) are removed. The same report written twice has the same digest: nothing changes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from evalpkg.pipeline.report_views import ChunkFile, TrajectoryView

CHUNK_BYTES = 256_000  # read and parsed in well under a second, whatever the trajectories hold
CHUNK_CALLBACK = "evalpkgReport.chunk"
TABLE_CALLBACK = "evalpkgReport.table"
TEMPORARY_PREFIX = ".tmp-"


def files_folder(page: Path) -> Path:
    return page.with_name(f"{page.stem}_files")


def chunk_name(index: int) -> str:
    return f"trajectories-{index:04d}.js"


def table_name(name: str) -> str:
    return f"table-{name}.js"


def script_json(json_text: str) -> str:
    """JSON text that is safe inside an HTML <script> element and as a script file: `<` only occurs
    within JSON strings, where \\u003c reads back the same."""
    return json_text.replace("<", "\\u003c")


def chunked(views: list[TrajectoryView]) -> Iterator[list[TrajectoryView]]:
    """Consecutive views in groups of at most CHUNK_BYTES as written (or one view larger than that)."""
    group: list[TrajectoryView] = []
    size = 0
    for view in views:
        n = len(script_json(view.model_dump_json())) + 1  # as written, with its comma
        if group and size + n > CHUNK_BYTES:
            yield group
            group, size = [], 0
        group.append(view)
        size += n
    if group:
        yield group


def chunk_script(index: int, views: list[TrajectoryView]) -> str:
    return f"{CHUNK_CALLBACK}({script_json(ChunkFile(chunk=index, trajectories=views).model_dump_json())});\n"


def table_script(name: str, html_table: str) -> str:
    return f"{TABLE_CALLBACK}({script_json(json.dumps(name))}, {script_json(json.dumps(html_table))});\n"


def digest(files: dict[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode("utf-8") + b"\0")
    return h.hexdigest()[:16]


def publish(page: Path, page_html: str, files: dict[str, str], folder_name: str) -> None:
    """Write `files` into `<page>_files/<folder_name>/` (the page refers to them there), then the page,
    then remove what earlier reports left in `<page>_files/`."""
    folder = files_folder(page)
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / folder_name
    if not final.is_dir():  # the same name holds the same contents: a report written again keeps it
        staging = Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX, dir=folder))
        for name, text in files.items():
            (staging / name).write_text(text, encoding="utf-8")
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the chunks from anyone else opening the report
        try:
            staging.rename(final)
        except OSError:  # another writer of the same report got there first, with the same contents
            shutil.rmtree(staging)
    fd, temporary = tempfile.mkstemp(prefix=f".{page.name}.", suffix=".tmp", dir=page.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page_html)
        os.chmod(temporary, 0o644)
        os.replace(temporary, page)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    for stale in folder.iterdir():
        if stale.name != folder_name:
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
