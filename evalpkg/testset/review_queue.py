"""The review queue (tasks/review/<month>/<task id>.json): candidate tasks mined from query tickets, with
who drafted and who approved each wording, the measured second annotation and the reviewers' decisions."""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ValidationError

from evalpkg.errors import DataError
from evalpkg.settings import Settings
from evalpkg.testset import release
from evalpkg.testset.models import Annotator, Complexity, Language, Task
from evalpkg.testset.ticket_task import NEEDS_WORDING

Role = Literal["clinician", "analyst", "dba", "generator"]
QUEUE_FORMAT_VERSION: Final = 2  # 2: wordings and the second annotation recorded; format 1 files load, nothing approved


class Decision(BaseModel):
    decision: Literal["approve", "reject"]
    reviewer: str
    role: Role
    at: str
    note: str = ""


class Wording(BaseModel):
    """Who drafted one question variant and who approved it (its text is the task's variant)."""

    language: Language
    complexity: Complexity
    drafted_by: str  # "ticket" (the request itself), "model <name>", or "needs wording" (a reviewer writes it)
    approved_by: str | None = None  # "<role> <reviewer>"
    edited: bool = False  # the approved text is the reviewer's own

    @property
    def key(self) -> str:
        return f"{self.language.value}/{self.complexity.value}"

    @property
    def origin(self) -> str:
        """Who wrote the text approved, as the release's record says it."""
        if self.edited:  # over a draft, or where there was none (the placeholder is no draft)
            return "written by a reviewer" if self.drafted_by == NEEDS_WORDING else "rewritten by a reviewer"
        if self.drafted_by == "ticket":
            return "drafted from the ticket"
        return "drafted by the model" if self.drafted_by.startswith("model ") else f"drafted: {self.drafted_by}"


class SecondAnnotation(BaseModel):
    """A second annotator's SQL for the candidate, measured against its gold (annotate.measure_tasks)."""

    annotator: Annotator
    sql: str | None
    agreement: float
    detail: str
    snapshot_version: str
    measured_at: str
    worlds: list[str] = []  # where it was measured: the snapshot, then each reference world ([]: before they were)
    # Why the agreement no longer stands: a wording changed after it was measured (the annotator read the
    # questions as they were). Empty: it stands; annotating again replaces it.
    voided: str = ""


class Candidate(BaseModel):
    format_version: Literal[1, 2] = QUEUE_FORMAT_VERSION
    month: str
    ticket_id: int
    request: str = ""  # the ticket's request: source material for the wordings
    pattern: str
    task: Task
    decisions: list[Decision] = []
    wordings: list[Wording] = []
    second_annotation: SecondAnnotation | None = None
    released_in: str | None = None

    @property
    def status(self) -> str:
        """pending, approved, rejected, or released (its decisions final: `released_in` names the version)."""
        if self.released_in:
            return "released"
        return (
            "pending"
            if not self.decisions
            else {"approve": "approved", "reject": "rejected"}[self.decisions[-1].decision]
        )

    def wording(self, key: str) -> Wording | None:
        return next((w for w in self.wordings if w.key == key), None)

    def unapproved(self) -> list[str]:
        """The task's variants no reviewer approved, as language/complexity."""
        keys = [f"{v.language.value}/{v.complexity.value}" for v in self.task.variants]
        return [k for k in keys if not ((w := self.wording(k)) and w.approved_by)]


def queue_dir(settings: Settings) -> Path:
    return settings.tasks_dir / "review"


def load_queue(settings: Settings) -> list[tuple[Path, Candidate]]:
    out = []
    for path in sorted(queue_dir(settings).glob("*/*.json")):
        try:
            out.append((path, Candidate.model_validate_json(release.read_text(path))))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(map(str, err["loc"])) or "(file)"
            raise DataError(f"{path}: field {loc}: {err['msg']}") from exc
    return out


def save(path: Path, cand: Candidate) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(cand.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
