"""Harness overhead, measured in one run on a synced eval DB (scripts/demo):

1. the gold agent over all of v1 (zh, plain) through the real tools, sequentially: total wall time
   of the execute stage vs the floor, the sum of the time its gold SQL takes on the same database;
2. the harness's own cost per tool step and per instance, with an instantaneous scripted model,
   a trivial in-memory tool, and recording to the results store on.

    .venv/bin/python benchmarks/harness_overhead.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from evalpkg.agent.loop import run_dialogue
from evalpkg.agent.policies import ScriptedPolicy
from evalpkg.agent.session import load_shared
from evalpkg.agent.tools import Toolkit
from evalpkg.pipeline import store
from evalpkg.pipeline.execute import execute_shard
from evalpkg.pipeline.run import plan_run
from evalpkg.runconfig import RunConfig
from evalpkg.settings import RESULTS_DB, get_settings
from evalpkg.sql.executor import ReadOnlyExecutor
from evalpkg.testset import release


def sql_floor(url: str, sqls: list[str]) -> float:
    """Each gold query once, straight through psycopg in a read-only transaction: the floor."""
    total = 0.0
    with psycopg.connect(url) as conn:
        for sql in sqls:
            t0 = time.perf_counter()
            with conn.transaction():
                conn.execute("set transaction read only")
                conn.execute(sql).fetchall()  # type: ignore[call-overload]
            total += time.perf_counter() - t0
    return total


def main() -> None:
    settings = get_settings()
    tasks = release.load(settings.tasks_dir).tasks
    golds = [t.gold_sql[0] for t in tasks if t.gold_sql]
    sql_floor(settings.agent_url(), golds)  # warm the server's caches
    floor = sql_floor(settings.agent_url(), golds)

    walls = {}
    for concurrency in (1, 4):
        config = RunConfig(name="overhead", agent="gold", languages=["zh"], concurrency=concurrency)
        run_id = plan_run(settings, config)
        shared = load_shared(settings)
        t0 = time.perf_counter()
        report = execute_shard(settings, run_id, 0, shared=shared)
        walls[concurrency] = time.perf_counter() - t0

    steps = 5
    shared = load_shared(settings)
    executor = ReadOnlyExecutor(settings.agent_url())
    results = psycopg.connect(settings.db_url(RESULTS_DB), autocommit=True)
    micro_run = plan_run(settings, RunConfig(name="overhead-micro", agent="gold", languages=["zh"], limit=200))
    instances = store.load_run(settings, micro_run)[3]

    def one(i: int, n_steps: int) -> None:
        toolkit = Toolkit(shared=shared, executor=executor, question="q")
        policy = ScriptedPolicy("instant", [[("query_schema", {"table_name": "t_zy_visit"})]] * n_steps, final="ok")
        traj = run_dialogue(
            policy,
            toolkit,
            instance_id=instances[i].instance_id,
            task_id=instances[i].task_id,
            language="zh",
            complexity="plain",
            question="q",
        )
        store.record(results, micro_run, 0, traj)

    n = 100
    t1 = time.perf_counter()
    for i in range(n):
        one(i, steps)
    with_steps = (time.perf_counter() - t1) / n
    t2 = time.perf_counter()
    for i in range(n, 2 * n):
        one(i, 0)
    bare = (time.perf_counter() - t2) / n
    per_step = (with_steps - bare) / steps
    results.close()
    executor.close()

    print(f"gold agent over v1 (zh, plain): {report.recorded} instances, {len(golds)} gold queries, recording on")
    print(f"  floor: the same SQL straight to Postgres {floor:8.2f} s (one connection, sequential)")
    for concurrency, wall in walls.items():
        print(
            f"  execute stage, concurrency {concurrency}            {wall:8.2f} s   "
            f"ratio to floor {wall / floor:5.2f}x   (target <= 1.5x)"
        )
    print("instant scripted model, trivial tool, recording on:")
    print(f"  harness cost per tool step               {per_step * 1000:8.3f} ms  (target <= 1 ms)")
    print(f"  harness cost per instance (0 steps)      {bare * 1000:8.3f} ms  (target <= 3 ms)")
    print(f"  instance with {steps} steps                   {with_steps * 1000:8.3f} ms")


if __name__ == "__main__":
    main()
