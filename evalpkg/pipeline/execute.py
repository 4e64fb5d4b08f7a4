"""Stages 2 and 3, execute and record: a shard's instances run concurrently (enough requests in
flight to keep a batching server busy) over one model client and two small database pools shared
by all of them; each trajectory is recorded exactly once, so a killed shard re-runs only what is
missing. A run with a worker gets its model server here, per shard, whoever calls (the CLI, a DAG
task, a retry): if the server fails, the shard raises and records nothing more, so the instances
it did not finish run on the next attempt instead of being recorded as model errors."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING

from evalpkg.agent.loop import run_dialogue, system_prompt
from evalpkg.agent.session import (
    build_executor,
    build_limits,
    build_model_client,
    build_policy,
    build_toolkit,
    load_shared,
)
from evalpkg.agent.tools import Shared
from evalpkg.agent.trajectory import Trajectory
from evalpkg.db import pool
from evalpkg.errors import ConfigError, DataError
from evalpkg.pipeline import store
from evalpkg.pipeline.plan import Instance
from evalpkg.runconfig import RunConfig
from evalpkg.settings import RESULTS_DB, Settings
from evalpkg.sql.executor import ReadOnlyExecutor
from evalpkg.testset import release
from evalpkg.testset.models import Complexity, Language, Task

if TYPE_CHECKING:  # the openai SDK is imported only by runs that call a model
    from psycopg_pool import ConnectionPool

    from evalpkg.agent.model_client import ModelClient
    from evalpkg.serving.worker import Worker


@dataclass
class ShardReport:
    shard: int
    planned: int
    skipped: int  # recorded by an earlier attempt
    recorded: int
    seconds: float
    cache: dict[str, dict[str, int]]
    worker_start_s: float | None = None  # launch to healthy, when the shard started a worker
    served: dict[str, str] | None = None  # the worker's identity (also in the results store)
    worker_log: str | None = None
    record_s: float = 0.0  # writing trajectories to the results store, summed over the dialogue threads


def run_instance(
    config: RunConfig,
    shared: Shared,
    task: Task,
    inst: Instance,
    executor: ReadOnlyExecutor,
    client: ModelClient | None,
) -> Trajectory:
    """One dialogue with its own toolkit, simulated clinician and policy over the shard's shared pieces."""
    lang, level = Language(inst.language), Complexity(inst.complexity)
    question = task.question(lang, level)
    return run_dialogue(
        build_policy(config, task, lang, client),
        build_toolkit(config, shared, executor, task, lang, question, client),
        instance_id=inst.instance_id,
        task_id=task.id,
        language=inst.language,
        complexity=inst.complexity,
        question=question,
        followups=task.followups(lang),
        limits=build_limits(config),
        system_prompt=system_prompt(config.prompt_version, tuple(config.disabled_prompt_rules)),
    )


@contextmanager
def shard_worker(settings: Settings, config: RunConfig, run_id: str, shard: int) -> Iterator[Worker]:
    """The shard's own model server: started, health-checked, its identity taken, always stopped; its
    log is `<run dir>/worker-<shard>.log`, appended to by every attempt."""
    from evalpkg.serving.identity import served_identity
    from evalpkg.serving.worker import HEALTH_DEADLINE_S, VLLM_HEALTH_DEADLINE_S, running, spec_for

    deadline = VLLM_HEALTH_DEADLINE_S if config.worker == "vllm" else HEALTH_DEADLINE_S
    log = store.run_dir(settings, run_id) / f"worker-{shard}.log"
    with running(spec_for(config), log, deadline) as worker:
        worker.identity = served_identity(worker, config)
        yield worker


class _Stopping(Exception):
    """An instance not run (or not recorded) because the shard is stopping on another one's failure."""


@dataclass
class _Dialogues:
    """Runs and records a shard's instances over its shared pieces; the first failure stops the rest."""

    settings: Settings
    run_id: str
    shard: int
    config: RunConfig
    shared: Shared
    tasks: dict[str, Task]
    executor: ReadOnlyExecutor
    results: ConnectionPool
    client: ModelClient | None
    worker: Worker | None
    stopping: threading.Event = field(default_factory=threading.Event)
    record_times: list[float] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)  # the first is what the shard raises

    def run_one(self, inst: Instance) -> bool:
        if self.stopping.is_set():
            raise _Stopping(inst.instance_id)
        try:
            traj = run_instance(self.config, self.shared, self.tasks[inst.task_id], inst, self.executor, self.client)
            self._check_worker(traj, inst)
            started = time.perf_counter()
            with self.results.connection() as conn:
                written = store.record(conn, self.run_id, self.shard, traj)
            self.record_times.append(time.perf_counter() - started)  # list.append is atomic across threads
            return written
        except _Stopping:
            raise
        except BaseException as exc:
            self.failures.append(exc)
            self.stopping.set()
            raise

    def _check_worker(self, traj: Trajectory, inst: Instance) -> None:
        """A dead server makes model errors that say nothing about the model: raise, record nothing; a model
        error from a live (perhaps busy) server is that instance's outcome."""
        if self.worker is None:
            return
        failure = self.worker.failure(probe_health=traj.stop_reason == "model_error")
        if failure is not None:
            raise failure
        if self.stopping.is_set():
            raise _Stopping(inst.instance_id)

    def run_all(self, todo: list[Instance], progress: Callable[[int, int], None]) -> int:
        """How many were recorded; a window of submitted instances, not all of them, so memory does not
        grow with the shard's size."""
        concurrency = self.config.concurrency
        recorded = done = 0
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"shard{self.shard}") as workers:
            pending = iter(todo)
            running = {workers.submit(self.run_one, i) for i in islice(pending, 2 * concurrency)}
            try:
                while running:
                    finished, running = wait(running, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        recorded += fut.result()
                        done += 1
                        progress(done, len(todo))
                    running |= {workers.submit(self.run_one, i) for i in islice(pending, len(finished))}
            except BaseException:
                self.stopping.set()  # none start; with a worker, the dialogues in flight are not recorded
                workers.shutdown(wait=True, cancel_futures=True)
                if self.failures:
                    raise self.failures[0] from None
                raise
        return recorded


def _shard_todo(
    settings: Settings, run_id: str, shard: int, shared: Shared | None
) -> tuple[RunConfig, dict[str, Task], Shared, list[Instance], list[Instance]]:
    """(config, tasks, shared pieces, the shard's instances, those not recorded yet), checked against the
    snapshot the run was planned on."""
    config, testset_version, snapshot, instances = store.load_run(settings, run_id)
    if not 0 <= shard < config.shards:
        raise ConfigError(f"--shard: {shard} is outside 0..{config.shards - 1}")
    tasks = release.load(settings.tasks_dir, testset_version).by_id()
    shared = shared or load_shared(settings)
    if shared.cache.snapshot_version != snapshot:
        raise DataError(
            f"run {run_id} was planned on snapshot {snapshot}, the eval DB is now "
            f"{shared.cache.snapshot_version}: start a new run"
        )
    mine = [i for i in instances if i.shard == shard]
    done = store.recorded_ids(settings, run_id, shard)
    return config, tasks, shared, mine, [i for i in mine if i.instance_id not in done]


def execute_shard(
    settings: Settings,
    run_id: str,
    shard: int,
    *,
    progress: Callable[[int, int], None] = lambda done, total: None,
    shared: Shared | None = None,
) -> ShardReport:
    t0 = time.perf_counter()
    config, tasks, shared, mine, todo = _shard_todo(settings, run_id, shard, shared)
    worker: Worker | None = None
    with ExitStack() as opened:  # closed in reverse order, also when opening one of them fails
        if config.worker != "none" and todo:  # a finished shard needs no server
            worker = opened.enter_context(shard_worker(settings, config, run_id, shard))
            store.record_served(settings, run_id, shard, worker.identity)
            config = config.model_copy(update={"endpoint": worker.base_url, "model": worker.served_model})
        executor = opened.enter_context(closing(build_executor(settings, config)))
        results = opened.enter_context(pool(settings.db_url(RESULTS_DB), config.results_db_pool, name="results-db"))
        client = build_model_client(config)
        if client is not None:
            opened.callback(client.close)
        dialogues = _Dialogues(settings, run_id, shard, config, shared, tasks, executor, results, client, worker)
        recorded = dialogues.run_all(todo, progress)
    started = time.perf_counter()
    store.export_jsonl(settings, run_id, shard)
    exported = time.perf_counter() - started
    return ShardReport(
        shard,
        len(mine),
        len(mine) - len(todo),
        recorded,
        time.perf_counter() - t0,
        shared.cache.stats(),
        worker.start_s if worker else None,
        worker.identity if worker else None,
        str(worker.log_path) if worker else None,
        sum(dialogues.record_times) + exported,
    )
