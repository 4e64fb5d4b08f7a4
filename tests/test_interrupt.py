"""Ctrl-C in the middle of `evalpkg sync` and `evalpkg testset release`, sent for real to the real
command running as a process: it exits 130 with one `evalpkg: error: interrupted; ...` line on
stderr, what agents query (the published snapshot) and the tasks/ tree are as they were, nothing is
left running, and the next run succeeds.

The moments are found by watching the command work (a build schema filling, a progress line, the
release's temp directory appearing); where a case adds a random delay, the delay is in its messages."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from evalpkg.db import connect
from evalpkg.dburl import with_user
from evalpkg.interrupts import held_interrupts
from evalpkg.settings import AGENT_ROLE, EVAL_DB, PROD_DB, PROJECT_ROOT, SYNC_ROLE, Settings
from evalpkg.sync.runner import SyncReport, run_sync
from evalpkg.testset import release, worlds
from evalpkg.testset.models import Annotator, Task
from evalpkg.testset.refresh import Candidate, Decision, load_queue
from evalpkg.testset.review_queue import SecondAnnotation, Wording
from tests.sync.helpers import CHANGED_NOW, content_fingerprint

SYNC_PROGRESS = (
    "running dbt build (staging -> marts, data and unit tests)",
    "validating the eval DB with Great Expectations",
)
CANDIDATES = 1500  # approved tickets in the queue: the release writes ~1,850 files, long enough to hit


# --- a command running as a process ------------------------------------------------------------


@dataclass
class Command:
    proc: subprocess.Popen[str]
    started: float
    stderr: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    @classmethod
    def start(cls, args: list[str], env: dict[str, str], stdout: Path) -> Command:
        base = {k: v for k, v in os.environ.items() if not k.startswith("EVALPKG_")}
        with stdout.open("w") as out:  # dbt writes its log to stdout
            proc = subprocess.Popen(
                [sys.executable, "-m", "evalpkg", *args],
                env={**base, **env},
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
            )
        cmd = cls(proc, time.monotonic())
        cmd.reader = threading.Thread(target=cmd._read, daemon=True)
        cmd.reader.start()
        return cmd

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    def wait_for(self, what: str, ready: Callable[[], bool], timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self.proc.poll() is not None:
                pytest.fail(f"exited {self.proc.returncode} before {what}: {self.stderr}")
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"no {what} within {timeout} s: {self.stderr}")
            time.sleep(0.005)

    def said(self, line: str) -> Callable[[], bool]:
        return lambda: line in self.stderr

    def interrupt(self, delay: float = 0.0) -> float:
        """SIGINT after `delay` seconds, as Ctrl-C sends it; returns when it was sent (since start)."""
        time.sleep(delay)
        self.proc.send_signal(signal.SIGINT)
        return time.monotonic() - self.started

    def finish(self, timeout: float = 120) -> tuple[int, list[str]]:
        code = self.proc.wait(timeout)
        assert self.reader is not None
        self.reader.join(10)
        return code, self.stderr


def one_error_line(stderr: list[str], progress: tuple[str, ...] = ()) -> str:
    """Progress lines, then exactly one error line: no traceback, no stray output."""
    *before, last = stderr or [""]
    assert all(line in progress for line in before), stderr
    assert last.startswith("evalpkg: error: interrupted"), stderr
    return last


def cli_env(settings: Settings, state: Path, **extra: str) -> dict[str, str]:
    """The session's cluster as an external server, and the session's reference worlds."""
    worlds_dir = {"EVALPKG_WORLDS_DIR": str(settings.worlds_dir)} if settings.worlds_dir else {}
    return {"EVALPKG_PG_URL": settings.admin_url, "EVALPKG_STATE_DIR": str(state), **worlds_dir, **extra}


# --- `evalpkg sync` -----------------------------------------------------------------------------


def published(settings: Settings) -> dict[str, Any]:
    """What agents query, and the incremental state the next sync starts from."""
    with connect(settings.db_url(EVAL_DB)) as conn:
        version = conn.execute("select snapshot_version from meta.snapshot").fetchall()
        watermarks = conn.execute(  # a NULL high-water mark is none: the next sync reloads that model
            "select model, high_water from staging.sync_watermark where high_water is not null order by 1"
        ).fetchall()
    return {"snapshot": version, "content": content_fingerprint(settings), "watermarks": watermarks}


def agents_can_query(settings: Settings, version: str) -> None:
    with connect(with_user(settings.db_url(EVAL_DB), AGENT_ROLE)) as conn:
        assert conn.execute("select snapshot_version from meta.snapshot").fetchone() == (version,)
        for table in ("t_patient_info", "t_diag_record", "t_lab_result"):  # through the role's search_path
            row = conn.execute(f"select count(*) from {table}").fetchone()
            assert row is not None and row[0] > 0, table


def sync_sessions_left(settings: Settings, timeout: float = 10) -> list[Any]:
    """Server sessions of the sync role (dbt's) still there `timeout` s after the process exited."""
    deadline = time.monotonic() + timeout
    with connect(settings.db_url(EVAL_DB)) as conn:
        while True:
            rows = conn.execute(
                "select pid, state, left(query, 80) from pg_stat_activity where usename = %s", (SYNC_ROLE,)
            ).fetchall()
            if not rows or time.monotonic() > deadline:
                return rows
            time.sleep(0.2)


def first_mart_built(settings: Settings) -> int | None:
    with connect(settings.db_url(EVAL_DB)) as conn:
        row = conn.execute("select to_regclass('emr__build.t_patient_info')::oid").fetchone()
    return int(row[0]) if row and row[0] is not None else None


def build_started(settings: Settings) -> Callable[[], bool]:
    """dbt has rebuilt a first mart (t_patient_info) but not the last (meta.snapshot, built from all);
    not the table an earlier interrupted build left, which the sync drops first."""
    stale = first_mart_built(settings)
    return lambda: first_mart_built(settings) not in (None, stale)


@dataclass(frozen=True)
class ProdChange:
    diag_id: int
    lab_deleted: int
    lab_updated: int


@pytest.fixture(scope="module")
def prod_changed(synced: SyncReport, generated: Settings) -> Iterator[ProdChange]:
    """Prod moved on since the last sync (a diagnosis and a lab result soft-deleted, a lab value
    corrected), so a sync that published anything, or all of it, would show in the eval DB. Undone
    afterwards, and synced back, for the modules that run after this one."""
    with connect(generated.db_url(PROD_DB)) as prod:
        diag = prod.execute("select diag_id from his.t_diag_record where is_deleted = 0 order by diag_id limit 1")
        diag_id = diag.fetchone()[0]  # type: ignore[index]
        labs = prod.execute(
            "select lab_id from his.t_lab_result where is_deleted = 0 and result_value is not null "
            "order by lab_id limit 2"
        ).fetchall()
        change = ProdChange(diag_id, labs[0][0], labs[1][0])
        prod.execute(
            f"update his.t_diag_record set is_deleted = 1, update_time = {CHANGED_NOW} where diag_id = %s", (diag_id,)
        )
        prod.execute(
            f"update his.t_lab_result set is_deleted = 1, update_time = {CHANGED_NOW} where lab_id = %s",
            (change.lab_deleted,),
        )
        prod.execute(
            f"update his.t_lab_result set result_value = result_value + 0.5, update_time = {CHANGED_NOW} where lab_id = %s",
            (change.lab_updated,),
        )
    yield change
    with connect(generated.db_url(PROD_DB)) as prod:
        prod.execute(
            f"update his.t_diag_record set is_deleted = 0, update_time = {CHANGED_NOW} where diag_id = %s", (diag_id,)
        )
        prod.execute(
            f"update his.t_lab_result set is_deleted = 0, update_time = {CHANGED_NOW} where lab_id = %s",
            (change.lab_deleted,),
        )
        prod.execute(
            f"update his.t_lab_result set result_value = result_value - 0.5, update_time = {CHANGED_NOW} where lab_id = %s",
            (change.lab_updated,),
        )
    run_sync(generated, validate=False)


@dataclass(frozen=True)
class SyncMoment:
    wait: str  # what to wait for: "lock", "build", or a progress line
    delay: tuple[float, float] = (0.0, 0.0)  # then a random delay in this range, seconds


SYNC_MOMENTS = [
    pytest.param(SyncMoment("lock"), id="bootstrap-and-fresh-build-schemas-before-dbt"),
    pytest.param(SyncMoment("build"), id="dbt-has-rebuilt-some-marts-not-all-the-old-mixed-snapshot"),
    pytest.param(SyncMoment(SYNC_PROGRESS[0], (0.0, 3.0)), id="dbt-build-at-a-random-moment"),
    pytest.param(SyncMoment(SYNC_PROGRESS[1], (0.0, 0.3)), id="build-complete-but-not-yet-validated"),
]


def sync_lock_held(settings: Settings) -> Callable[[], bool]:
    from evalpkg.sync.publish import LOCK_KEY

    def ready() -> bool:
        with connect(settings.admin_url) as conn:
            row = conn.execute(
                "select count(*) from pg_locks where locktype = 'advisory' and objid = %s and granted", (LOCK_KEY,)
            ).fetchone()
        return bool(row and row[0])

    return ready


@pytest.mark.parametrize("moment", SYNC_MOMENTS)
def test_interrupted_sync_keeps_the_published_snapshot(
    moment: SyncMoment, prod_changed: ProdChange, generated: Settings, synced: SyncReport, tmp_path: Path
) -> None:
    before, built = published(generated), build_started(generated)
    cmd = Command.start(["sync"], cli_env(generated, tmp_path), tmp_path / "stdout.txt")
    if moment.wait == "lock":
        cmd.wait_for("sync lock", sync_lock_held(generated))
    elif moment.wait == "build":
        cmd.wait_for("first rebuilt mart", built)
    else:
        cmd.wait_for(repr(moment.wait), cmd.said(moment.wait))
    delay = random.uniform(*moment.delay)
    at = cmd.interrupt(delay)
    code, stderr = cmd.finish()
    why = f"SIGINT {delay:.2f} s after {moment.wait!r}, {at:.1f} s into the sync; stderr {stderr}"

    assert code == 130, why
    assert "nothing was published; the eval DB keeps its previous snapshot" in one_error_line(stderr, SYNC_PROGRESS)
    assert published(generated) == before, why  # same version, same rows, watermarks not advanced
    agents_can_query(generated, before["snapshot"][0][0])  # earlier tests may have synced since the session began
    assert sync_sessions_left(generated) == [], why  # dbt cancelled its queries: nothing keeps writing


def test_a_sync_killed_outright_mid_build_leaves_nothing_running(
    prod_changed: ProdChange, generated: Settings, synced: SyncReport, tmp_path: Path
) -> None:
    """SIGKILL: no handler runs and dbt cannot cancel its queries; the server sessions notice their
    client is gone (client_connection_check_interval on the sync role) and stop."""
    before, built = published(generated), build_started(generated)
    cmd = Command.start(["sync"], cli_env(generated, tmp_path), tmp_path / "stdout.txt")
    cmd.wait_for("first rebuilt mart", built)
    cmd.proc.kill()
    code, _ = cmd.finish()
    assert code == -signal.SIGKILL
    assert published(generated) == before
    agents_can_query(generated, before["snapshot"][0][0])  # earlier tests may have synced since the session began
    assert sync_sessions_left(generated, timeout=20) == []


def test_the_next_sync_after_interrupts_publishes_everything(
    prod_changed: ProdChange, generated: Settings, synced: SyncReport, tmp_path: Path
) -> None:
    cmd = Command.start(["sync"], cli_env(generated, tmp_path), tmp_path / "stdout.txt")
    code, stderr = cmd.finish(timeout=300)
    assert code == 0, stderr
    assert stderr[:-1] == list(SYNC_PROGRESS) and stderr[-1].startswith("synced "), stderr

    with connect(generated.db_url(EVAL_DB)) as ev:
        version = ev.execute("select snapshot_version from meta.snapshot").fetchone()
        assert version is not None and version[0] != synced.snapshot_version  # prod's changes are in
        assert version[0] in stderr[-1]
        gone = ev.execute("select count(*) from emr.t_lab_result where lab_id = %s", (prod_changed.lab_deleted,))
        assert gone.fetchone() == (0,)
        diag = ev.execute("select count(*) from emr.t_diag_record where diag_id = %s", (prod_changed.diag_id,))
        assert diag.fetchone() == (0,)
        value = ev.execute("select result_value from emr.t_lab_result where lab_id = %s", (prod_changed.lab_updated,))
        corrected = value.fetchone()
        leftovers = ev.execute("select nspname from pg_namespace where nspname like '%\\_\\_%'").fetchall()
    with connect(generated.db_url(PROD_DB)) as prod:
        expected = prod.execute(
            "select result_value from his.t_lab_result where lab_id = %s", (prod_changed.lab_updated,)
        ).fetchone()
    assert corrected == expected  # the interrupted builds did not move the incremental watermark
    assert leftovers == []  # no build or replaced schema left behind
    agents_can_query(generated, version[0])
    # incremental on top of the interrupted runs == rebuilt from scratch
    incremental = content_fingerprint(generated)
    run_sync(generated, full_refresh=True, validate=False)
    assert content_fingerprint(generated) == incremental


# --- `evalpkg testset release` -------------------------------------------------------------------


def tree(path: Path) -> dict[str, str]:
    """Every file's sha256 and every folder under `path`, hidden ones included."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(path.rglob("*"))
    }


def tasks_tree(root: Path, candidates: int) -> Path:
    """A copy of the repository's releases with `candidates` approved tickets waiting in the queue, ready to
    release (each wording approved, a second annotation that agrees: as recorded by review and annotate)."""
    root.mkdir()
    for version in release.versions(PROJECT_ROOT / "tasks"):
        shutil.copytree(PROJECT_ROOT / "tasks" / version, root / version)
    shutil.copy(PROJECT_ROOT / "tasks" / release.CHANGELOG, root / release.CHANGELOG)
    sample = release.load(root).tasks[0]
    yes = [Decision(decision="approve", reviewer="ana", role="clinician", at="2026-10-02T09:00:00+00:00")]
    wordings = [
        Wording(language=v.language, complexity=v.complexity, drafted_by="ticket", approved_by="clinician ana")
        for v in sample.variants
    ]
    second = SecondAnnotation(
        annotator=Annotator(role="analyst", id="zhao"),
        sql=sample.gold_sql[0],
        agreement=1.0,
        detail="match",
        snapshot_version="snap",
        measured_at="2026-10-02T09:00:00+00:00",
    )
    for ticket in range(20000, 20000 + candidates):
        task: Task = sample.model_copy(update={"id": f"st-ticket_{ticket}-001"})
        cand = Candidate(
            month="2026-09",
            ticket_id=ticket,
            pattern=f"pattern {ticket}",
            task=task,
            decisions=yes,
            wordings=wordings,
            second_annotation=second,
        )
        path = root / "review" / "2026-09" / f"{task.id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(cand.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    return tasks_tree(tmp_path / "tasks", CANDIDATES)


@pytest.fixture
def world_state(generated: Settings) -> Path:
    """Where a release finds the reference worlds it checks candidates in: the session's, built once (so that
    no release here builds one and says so)."""
    for _ in worlds.each(generated):
        pass
    return generated.state_dir


def released_in_full(tasks_dir: Path, version: str, base_count: int, candidates: int = CANDIDATES) -> None:
    """The new release is whole: every file as its manifest says, its CHANGELOG entry, the queue marked."""
    rel = release.load(tasks_dir, version)  # verifies every sha256
    assert rel.manifest.task_count == len(rel.tasks) == base_count + candidates
    assert len(release.changelog_entry(tasks_dir, version).added) == candidates
    changelog = (tasks_dir / release.CHANGELOG).read_text(encoding="utf-8")
    assert changelog.count(f"\n## {version} (") == 1 and f"]({version}/{release.CHANGES})" in changelog
    assert {c.released_in for _, c in load_queue_at(tasks_dir)} == {version}
    assert not [p.name for p in tasks_dir.iterdir() if p.name.startswith(".")]  # no temp dir or file


def load_queue_at(tasks_dir: Path) -> list[tuple[Path, Candidate]]:
    return load_queue(Settings(tasks_dir=tasks_dir))


RELEASE_MOMENTS = [
    pytest.param((0.0, 0.0), id="as-the-temp-release-dir-appears"),
    *[pytest.param((0.0, 1.5), id=f"random-moment-while-writing-{n}") for n in (1, 2, 3)],
]


@pytest.mark.parametrize("delay_range", RELEASE_MOMENTS)
def test_interrupted_release_is_all_or_nothing_and_the_next_run_releases(
    delay_range: tuple[float, float],
    tasks: Path,
    generated: Settings,
    synced: SyncReport,
    tmp_path: Path,
    world_state: Path,
) -> None:
    env = cli_env(generated, world_state, EVALPKG_TASKS_DIR=str(tasks))
    base, version = release.load(tasks), release.next_version(tasks)
    before = tree(tasks)
    cmd = Command.start(["testset", "release"], env, tmp_path / "stdout.txt")
    cmd.wait_for("temp release dir", (tasks / f".{version}.tmp").exists)
    delay = random.uniform(*delay_range)
    at = cmd.interrupt(delay)
    code, stderr = cmd.finish()
    why = f"SIGINT {delay:.3f} s after the temp dir appeared, {at:.2f} s in; stderr {stderr}"

    print(f"\nrelease: exit {code}, {stderr[-1:]}; {why}")
    if delay_range == (0.0, 0.0):  # signalled while the first of ~1,850 files are written
        assert code == 130 and "nothing was released" in stderr[-1], why
    released = f"released {version}: {len(base.tasks) + CANDIDATES} tasks"
    if code == 0 or stderr[:1] == [released]:  # it finished before the signal arrived, or as the process exited
        assert stderr in ([released], [released, "evalpkg: error: interrupted"]), why
        released_in_full(tasks, version, len(base.tasks))
        return
    assert code == 130, why
    message = one_error_line(stderr)
    if "nothing was released" in message:  # before the rename: no trace at all
        assert tree(tasks) == before, why
        again = Command.start(["testset", "release"], env, tmp_path / "stdout-again.txt")
        code, stderr = again.finish()
        assert (code, stderr) == (0, [f"released {version}: {len(base.tasks) + CANDIDATES} tasks"]), why
    else:  # after the rename: the rest (CHANGELOG, queue) was finished before exiting
        assert f"{version} was released in full" in message, why
        again = Command.start(["testset", "release"], env, tmp_path / "stdout-again.txt")
        assert again.finish() == (0, ["nothing approved to release"]), why
    released_in_full(tasks, version, len(base.tasks))


# --- killed outright (SIGKILL, power loss): no handler runs, the next run finishes the job --------


class Killed(BaseException):
    """Stands for the process dying at this point: nothing after it runs, no clean-up either."""


def test_release_killed_between_its_rename_and_its_changelog_gets_the_entry_next_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks_dir = tasks_tree(tmp_path / "tasks", 0)
    base, version = release.load(tasks_dir), release.next_version(tasks_dir)
    changelog = (tasks_dir / release.CHANGELOG).read_text(encoding="utf-8")
    replace = Path.replace

    def dies_before_the_changelog(self: Path, target: Any) -> Path:
        if Path(target).name == release.CHANGELOG:
            raise Killed
        return replace(self, target)

    monkeypatch.setattr(Path, "replace", dies_before_the_changelog)
    with pytest.raises(Killed):
        release.write(tasks_dir, version, base.tasks, "snap", release.ChangeSet(changed={base.tasks[0].id: "why"}))
    monkeypatch.undo()
    assert (tasks_dir / version).is_dir()
    assert (tasks_dir / release.CHANGELOG).read_text(encoding="utf-8") == changelog  # the entry is missing
    release.recover(tasks_dir)  # what the next `testset release` (or any release write) does first
    assert release.changelog_entry(tasks_dir, version).changed == {base.tasks[0].id: "why"}  # in the release dir
    after = (tasks_dir / release.CHANGELOG).read_text(encoding="utf-8")
    assert after.count(f"\n## {version} (") == 1 and f"]({version}/{release.CHANGES})" in after  # and linked
    assert not [p.name for p in tasks_dir.iterdir() if p.name.startswith(".")]


def test_release_killed_before_its_rename_leaves_nothing_after_recovery(tmp_path: Path) -> None:
    tasks_dir = tasks_tree(tmp_path / "tasks", 0)
    before = tree(tasks_dir)
    version = release.next_version(tasks_dir)
    (tasks_dir / f".{version}.tmp" / "tasks").mkdir(parents=True)  # what a kill while staging leaves
    (tasks_dir / f".{version}.tmp" / "tasks" / "x.json").write_text("{}")
    (tasks_dir / f".{release.CHANGELOG}.{version}.tmp").write_text("# Test set changelog\n\n## {version} (x)\n")
    release.recover(tasks_dir)
    assert tree(tasks_dir) == before


def test_release_killed_before_marking_the_queue_is_not_released_twice(
    generated: Settings, synced: SyncReport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, world_state: Path
) -> None:
    from evalpkg.testset import refresh, refresh_release

    tasks_dir = tasks_tree(tmp_path / "tasks", 3)
    base, version = release.load(tasks_dir), release.next_version(tasks_dir)
    settings = Settings(pg_url=generated.admin_url, state_dir=world_state, tasks_dir=tasks_dir)

    def killed(*_: Any) -> None:
        raise Killed

    monkeypatch.setattr(refresh_release, "save", killed)
    with pytest.raises(Killed):
        refresh.release_approved(settings)
    monkeypatch.undo()
    assert {c.released_in for _, c in load_queue_at(tasks_dir)} == {None}  # shipped, not marked
    cmd = Command.start(
        ["testset", "release"], cli_env(generated, world_state, EVALPKG_TASKS_DIR=str(tasks_dir)), tmp_path / "out"
    )
    assert cmd.finish() == (0, ["nothing approved to release"])
    released_in_full(tasks_dir, version, len(base.tasks), candidates=3)
    assert release.versions(tasks_dir)[-1] == version


# --- held_interrupts, in process -----------------------------------------------------------------


class InterruptsWhileFinalized:
    """Ctrl-C arriving while Python runs a finalizer, as GX's thread pools have them: Python drops
    the KeyboardInterrupt raised there (and prints 'Exception ignored in ...')."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):  # the handler runs here, inside the finalizer
            pass


def lose_a_ctrl_c() -> None:
    InterruptsWhileFinalized()


def test_a_ctrl_c_lost_in_a_finalizer_still_stops_before_the_commit_point(capfd: pytest.CaptureFixture[str]) -> None:
    committed = False
    with pytest.raises(KeyboardInterrupt), held_interrupts(lambda: False) as raise_if_interrupted:
        lose_a_ctrl_c()
        raise_if_interrupted()
        committed = True
    assert not committed
    assert "Exception ignored" not in capfd.readouterr().err  # remembered, so no traceback for it


def test_a_ctrl_c_lost_in_a_finalizer_is_raised_when_the_block_exits_at_the_latest() -> None:
    with pytest.raises(KeyboardInterrupt) as raised, held_interrupts(lambda: False, "committed"):
        lose_a_ctrl_c()
    assert str(raised.value) == ""  # not past the commit point: it does not claim the change happened


def test_a_held_ctrl_c_waits_for_the_commit_and_says_so() -> None:
    done: list[str] = []
    with pytest.raises(KeyboardInterrupt, match="committed"), held_interrupts(message="committed"):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        done.append("commit")
    assert done == ["commit"]


def test_a_ctrl_c_held_by_an_inner_block_goes_to_the_outer_one_which_may_hold_it_too() -> None:
    entered = False
    with pytest.raises(KeyboardInterrupt, match="published"), held_interrupts(lambda: entered, "published"):
        entered = True
        with held_interrupts():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        after_inner = True
    assert after_inner
