"""Issue 11: a shard of a 256-in-flight openai run SIGKILLed at 20 random moments, each kill followed
by a re-run (`evalpkg run-shard RUN --shard 0`, as a subprocess in its own process group), then run
to completion. Every planned instance is recorded exactly once, no trajectory is half-written, and
the trajectories score the same, instance by instance, as those of a clean run of the same config.

The model is the concurrency benchmark's fixed-latency endpoint (benchmarks/concurrency.py), its
answers those of the gold replay (tests/serving/gold_replay.py), spoiled for a fixed third of the
questions, so both runs mix correct and incorrect instances that only the question decides. The
kill moments are seeded and measured against the clean run: half during start-up, half just after
the attempt's first record (see kill_and_rerun)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import concurrency
from evalpkg.agent.trajectory import Trajectory
from evalpkg.pipeline import store
from evalpkg.pipeline.run import plan_run, score_run
from evalpkg.pipeline.score import InstanceScore
from evalpkg.runconfig import RunConfig
from evalpkg.settings import PROJECT_ROOT, Settings
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release
from evalpkg.testset.models import Complexity, Language
from tests.conftest import free_port
from tests.serving.gold_replay import GoldReplay
from tests.serving.stand_in import cli_env

CONCURRENCY = 256
LATENCY_S = 0.5  # per model call; a dialogue makes 3-4
TASKS = 80  # x 2 languages x 3 complexities = 480 instances, nearly 2 windows of 256
KILLS = 20
SEED = 11
WRONG_SQL = "select count(*) as n from emr.dict_dept"
# What scoring decides from the trajectory alone (not its timings): equal per instance in both runs.
COMPARED = ("correct", "exec_match", "status", "stop_reason", "final_sql", "tool_names", "answer_coverage")


def _spoiled(question: str) -> bool:
    return int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) % 3 == 0


class SpoilingReplay(GoldReplay):
    """The gold replay, except that a spoiled question's execute_sql asks WRONG_SQL instead: the
    dialogue then leaves the gold plan, gets a final answer at once and scores incorrect."""

    def reply(self, request: dict[str, Any]) -> dict[str, Any]:
        message = super().reply(request)
        question = next((str(m.get("content")) for m in request.get("messages", []) if m.get("role") == "user"), "")
        if _spoiled(question):
            for call in message.get("tool_calls") or []:
                if call["function"]["name"] == "execute_sql":
                    call["function"]["arguments"] = json.dumps({"sql": WRONG_SQL})
        return message


def serve_replay(port: int, latency_s: float, tasks_dir: str) -> None:
    """The endpoint's process: the benchmark's fixed-latency server answering with SpoilingReplay."""
    concurrency.serve(port, latency_s, SpoilingReplay(release.load(Path(tasks_dir)).tasks).reply)


@contextmanager
def replay_endpoint(settings: Settings) -> Iterator[int]:
    port = free_port()
    code = f"from tests.pipeline.test_kill_resume import serve_replay; serve_replay({port}, {LATENCY_S}, {str(settings.tasks_dir)!r})"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=PROJECT_ROOT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                concurrency.endpoint_stats(port)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "the endpoint did not start"
                time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def launch(run_id: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`evalpkg run-shard RUN --shard 0` in a new session, so that killing its group kills all of it."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "evalpkg", "run-shard", run_id, "--shard", "0"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def count(conn: psycopg.Connection, run_id: str) -> int:
    row = conn.execute("select count(*) from results.trajectory where run_id = %s", (run_id,)).fetchone()
    return int(row[0]) if row else 0


def wait_for(proc: subprocess.Popen[bytes], done: Callable[[], bool], timeout_s: float = 180) -> None:
    """Until `done` or the process exits, polling every 20 ms."""
    deadline = time.monotonic() + timeout_s
    while not done() and proc.poll() is None:
        assert time.monotonic() < deadline, "the shard neither recorded nor exited"
        time.sleep(0.02)


@dataclass
class Timeline:
    first_record_s: float  # launch to the first trajectory recorded: start-up and the first dialogues
    end_s: float  # launch to exit


def clean_run(conn: psycopg.Connection, run_id: str, env: dict[str, str], log: Path) -> Timeline:
    t0 = time.monotonic()
    proc = launch(run_id, env, log)
    wait_for(proc, lambda: count(conn, run_id) > 0)
    first = time.monotonic() - t0
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    return Timeline(first, time.monotonic() - t0)


@dataclass
class Kill:
    kind: str  # start-up: at a moment before the clean run's first record; mid-record: just after this attempt's first
    at_s: float  # after launch
    before: int  # recorded when the attempt started
    after: int  # recorded once it was killed
    returncode: int  # -SIGKILL, unless it exited before the moment came
    log: str  # what it printed, the end of it


def attempt(conn: psycopg.Connection, run_id: str, env: dict[str, str], log: Path, kind: str, delay_s: float) -> Kill:
    """One run of the shard, SIGKILLed (its whole process group) `delay_s` after launch (start-up) or
    after its first record (mid-record), unless it has finished by then."""
    before = count(conn, run_id)
    t0 = time.monotonic()
    proc = launch(run_id, env, log)
    if kind == "mid-record":
        wait_for(proc, lambda: count(conn, run_id) > before)
    at = time.monotonic() - t0 + delay_s if kind == "mid-record" else delay_s
    wait_for(proc, lambda: time.monotonic() - t0 >= at)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    return Kill(kind, at, before, count(conn, run_id), proc.returncode, log.read_text()[-2000:])


def kill_and_rerun(
    conn: psycopg.Connection, run_id: str, env: dict[str, str], logs: Path, clean: Timeline
) -> list[Kill]:
    """KILLS attempts, each killed at a seeded random moment: half of them uniformly between launch
    and the clean run's first record (importing, loading the catalog, the first dialogues in flight),
    half uniformly within the clean run's recording time / KILLS after the attempt's first record
    (records being written, the first dialogues finishing). Moments spread over the whole duration
    would finish the shard within a few kills: each attempt re-runs only what is missing."""
    rng = random.Random(SEED)
    kinds = ["start-up", "mid-record"] * (KILLS // 2)
    rng.shuffle(kinds)
    window = (clean.end_s - clean.first_record_s) / KILLS
    return [
        attempt(
            conn,
            run_id,
            env,
            logs / f"attempt-{k:02d}.log",
            kind,
            rng.uniform(0, clean.first_record_s if kind == "start-up" else window),
        )
        for k, kind in enumerate(kinds)
    ]


def stored(settings: Settings, run_id: str) -> list[tuple[str, int, Trajectory, str]]:
    """Every stored trajectory with the number of rows its instance has, loaded, and its recorded digest."""
    with store.results_db(settings) as conn:
        rows = conn.execute(
            "select instance_id, count(*) over (partition by instance_id), body, digest "
            "from results.trajectory where run_id = %s order by instance_id",
            (run_id,),
        ).fetchall()
    return [(iid, n, Trajectory.model_validate(body), digest) for iid, n, body, digest in rows]


def outcomes(scores: list[InstanceScore]) -> dict[str, tuple[Any, ...]]:
    return {s.instance_id: tuple(getattr(s, f) for f in COMPARED) for s in scores}


def test_a_shard_killed_20_times_records_each_instance_once_and_scores_as_a_clean_run(
    synced: SyncReport, generated: Settings, tmp_path: Path
) -> None:
    env = cli_env(generated, Path(sys.executable).parent)
    started = time.monotonic()
    with replay_endpoint(generated) as port, store.results_db(generated) as conn:
        config = RunConfig(
            name="kill-clean",
            agent="openai",
            endpoint=f"http://127.0.0.1:{port}/v1",
            model="fixed-latency",
            languages=[Language.zh, Language.en],
            complexities=list(Complexity),
            limit=TASKS,
            concurrency=CONCURRENCY,
            reference_worlds=False,  # what a kill changes is asked of the snapshot's scores
        )
        clean_id = plan_run(generated, config)
        killed_id = plan_run(generated, config.model_copy(update={"name": "kill-resumed"}))
        planned = {i.instance_id for i in store.load_run(generated, killed_id)[3]}
        total = len(planned)
        assert total > CONCURRENCY  # the window of dialogues in flight refills

        concurrency.endpoint_stats(port, reset=True)
        clean = clean_run(conn, clean_id, env, tmp_path / "clean.log")
        in_flight = concurrency.endpoint_stats(port)["peak"]
        kills = kill_and_rerun(conn, killed_id, env, tmp_path, clean)
        before_last = count(conn, killed_id)
        last = subprocess.run(
            [sys.executable, "-m", "evalpkg", "run-shard", killed_id, "--shard", "0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    executed = time.monotonic() - started
    assert last.returncode == 0, last.stderr[-3000:]
    assert f"{total - before_last} recorded, {before_last} recorded before" in last.stderr, last.stderr[-3000:]

    print(
        f"\n{total} instances, {CONCURRENCY} in flight (endpoint peak {in_flight}), {LATENCY_S}s per model call; "
        f"clean run: first record at {clean.first_record_s:.1f}s, done at {clean.end_s:.1f}s"
    )
    for k, kill in enumerate(kills):
        what = "SIGKILL" if kill.returncode == -signal.SIGKILL else f"exited {kill.returncode} before the kill"
        print(
            f"  {k:2d} {kill.kind:10s} at {kill.at_s:5.2f}s: recorded {kill.before:3d} -> {kill.after:3d} of {total} ({what})"
        )
    print(f"  last run: {total - before_last} recorded; executing took {executed:.0f}s in all")
    # many dialogues in flight at once, not a few: the peak was 110-116 of 256 on a loaded 2-core machine,
    # 200 on a quiet one; a shard that serialized its dialogues would show a handful
    assert in_flight > CONCURRENCY // 4

    # the kills landed mid-shard, some while trajectories were being recorded
    assert {k: kill.log for k, kill in enumerate(kills) if kill.returncode != -signal.SIGKILL} == {}
    assert len([k for k in kills if 0 < k.after < total]) >= KILLS // 2
    assert [
        k for k, kill in enumerate(kills) if kill.kind == "mid-record" and not kill.before < kill.after < total
    ] == []

    # exactly once: one row per planned instance, none missing, none half-written
    rows = stored(generated, killed_id)
    assert [iid for iid, n, _, _ in rows if n != 1] == []
    assert {iid for iid, _, _, _ in rows} == planned and len(rows) == total
    assert [iid for iid, _, t, digest in rows if not t.verify_hashes() or t.digest() != digest] == []
    assert [iid for iid, _, t, _ in rows if t.instance_id != iid or t.stop_reason != "final_answer"] == []
    lines = (store.run_dir(generated, killed_id) / "shard-000.jsonl").read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(line)["instance_id"] for line in lines) == sorted(planned)

    # the same scores as the clean run, instance by instance
    a, b = score_run(generated, clean_id, save=False), score_run(generated, killed_id, save=False)
    assert len(a.scores) == len(b.scores) == total
    clean_outcomes, resumed_outcomes = outcomes(a.scores), outcomes(b.scores)
    assert {i: (o, resumed_outcomes.get(i)) for i, o in clean_outcomes.items() if o != resumed_outcomes.get(i)} == {}
    accuracy = a.table["overall"]["accuracy"]
    assert b.table["overall"]["accuracy"] == accuracy and 0 < accuracy < 1  # both outcomes, so the comparison bites
    print(f"  accuracy {accuracy:.3f} in both runs")
