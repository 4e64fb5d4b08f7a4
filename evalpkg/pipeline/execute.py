"""Stages 2 and 3, execute and record: a shard's instances run concurrently (enough requests in
flight to keep a batching server busy) over one model client and two small database pools shared
by all of them; each trajectory is recorded exactly once, so a killed shard re-runs only what is
missing."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import ExitStack, closing
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING

from evalpkg.agent.executor import ReadOnlyExecutor
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
from evalpkg.pipeline.config import RunConfig
from evalpkg.pipeline.plan import Instance
from evalpkg.settings import RESULTS_DB, Settings
from evalpkg.testset import release
from evalpkg.testset.models import Complexity, Language, Task

if TYPE_CHECKING:  # the openai SDK is imported only by runs that call a model
    from evalpkg.agent.model_client import ModelClient


@dataclass
class ShardReport:
    shard: int
    planned: int
    skipped: int  # recorded by an earlier attempt
    recorded: int
    seconds: float
    cache: dict[str, dict[str, int]]


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
    followups = tuple(t.user[lang] for t in task.turns[1:] if t.user and not task.hidden_slots)
    return run_dialogue(
        build_policy(config, task, lang, client),
        build_toolkit(config, shared, executor, task, lang, question, client),
        instance_id=inst.instance_id,
        task_id=task.id,
        language=inst.language,
        complexity=inst.complexity,
        question=question,
        followups=followups,
        limits=build_limits(config),
        system_prompt=system_prompt(config.prompt_version, tuple(config.disabled_prompt_rules)),
    )


def execute_shard(
    settings: Settings,
    run_id: str,
    shard: int,
    *,
    progress: Callable[[int, int], None] = lambda done, total: None,
    shared: Shared | None = None,
    endpoint: str | None = None,
    model: str | None = None,
) -> ShardReport:
    """`endpoint`/`model` override the plan's: each shard may start its own model worker."""
    t0 = time.perf_counter()
    config, testset_version, snapshot, instances = store.load_run(settings, run_id)
    if endpoint or model:
        config = config.model_copy(update={k: v for k, v in (("endpoint", endpoint), ("model", model)) if v})
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
    todo = [i for i in mine if i.instance_id not in done]
    recorded = 0
    with ExitStack() as opened:  # closed in reverse order, also when opening one of them fails
        executor = opened.enter_context(closing(build_executor(settings, config)))
        results = opened.enter_context(pool(settings.db_url(RESULTS_DB), config.results_db_pool, name="results-db"))
        client = build_model_client(config)
        if client is not None:
            opened.callback(client.close)

        def run_one(inst: Instance) -> bool:
            traj = run_instance(config, shared, tasks[inst.task_id], inst, executor, client)
            with results.connection() as conn:
                return store.record(conn, run_id, shard, traj)

        with ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix=f"shard{shard}") as workers:
            # a window of submitted instances, not all of them: memory does not grow with the shard's size
            pending = iter(todo)
            running = {workers.submit(run_one, i) for i in islice(pending, 2 * config.concurrency)}
            done_count = 0
            while running:
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    recorded += fut.result()
                    done_count += 1
                    progress(done_count, len(todo))
                running |= {workers.submit(run_one, i) for i in islice(pending, len(finished))}
    store.export_jsonl(settings, run_id, shard)
    return ShardReport(
        shard, len(mine), len(mine) - len(todo), recorded, time.perf_counter() - t0, shared.cache.stats()
    )
