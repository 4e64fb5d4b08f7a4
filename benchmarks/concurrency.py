"""Execute-stage throughput against a batching model server, simulated by a fixed-latency
OpenAI-compatible endpoint this script starts on 127.0.0.1 (each dialogue: a tool call, then a final
answer, so two model calls per instance). For each concurrency level it prints the instances, the
wall time of the execute stage, the ideal time (instances x calls x latency / concurrency), the
efficiency (ideal / wall), the most requests the endpoint saw in flight at once, the most PostgreSQL
sessions the shard's pools held (eval DB + results DB; in brackets, all of its sessions, one-off
and closing ones included), the harness's peak RSS and its CPU per model call; then the peak RSS at
concurrency 128 with 200 and with 2,000 instances. Each level runs in its own process, so its RSS
and CPU are its own; start-up costs that do not scale (loading the catalog, importing the SDK) are
left out. Needs a synced eval DB (scripts/demo):

    .venv/bin/python benchmarks/concurrency.py --latency-ms 500 [--latency-ms-at-256 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import resource
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalpkg.db import connect
from evalpkg.pipeline import store
from evalpkg.pipeline.run import plan_run
from evalpkg.runconfig import RunConfig
from evalpkg.settings import EVAL_DB, RESULTS_DB, get_settings
from evalpkg.testset import release
from tests.conftest import free_port

LEVELS = (1, 8, 32, 64, 128, 256)
CALLS_PER_INSTANCE = 2
RSS_LEVEL = 128

# ---- the fixed-latency endpoint (its own process) --------------------------------------------------


def _completion(message: dict[str, Any], finish: str) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "fixed-latency",
        "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", **message}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }
    return json.dumps(body).encode()


def _reply(request: dict[str, Any]) -> dict[str, Any]:
    """A tool call first (a query no cache has seen), then a final answer once a tool result is there."""
    if any(m.get("role") == "tool" for m in request.get("messages", [])):
        return {"content": "There are 12 departments."}
    sql = f"select count(*) as n from emr.dict_dept where ksdm <> '{random.randrange(10**9)}'"
    call = {
        "id": "call-bench",
        "type": "function",
        "function": {"name": "execute_sql", "arguments": json.dumps({"sql": sql})},
    }
    return {"content": None, "tool_calls": [call]}


Reply = Callable[[dict[str, Any]], dict[str, Any]]  # a chat request -> the assistant message to answer it with


def serve(port: int, latency_s: float, reply: Reply = _reply) -> None:
    """Serves until killed; `reply` makes the answers (tests/pipeline/test_kill_resume.py replays gold)."""
    stats = {"in_flight": 0, "peak": 0, "requests": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive: one request after another on this connection
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                method, target = head.split(" ", 2)[:2]
                length = next(
                    (
                        int(line.split(":", 1)[1])
                        for line in head.split("\r\n")
                        if line.lower().startswith("content-length:")
                    ),
                    0,
                )
                body = await reader.readexactly(length) if length else b""
                if method == "POST":
                    stats["in_flight"] += 1
                    stats["requests"] += 1
                    stats["peak"] = max(stats["peak"], stats["in_flight"])
                    await asyncio.sleep(latency_s)
                    message = reply(json.loads(body))
                    out = _completion(message, "tool_calls" if message.get("tool_calls") else "stop")
                    stats["in_flight"] -= 1
                else:  # GET /stats[?reset]
                    out = json.dumps(stats).encode()
                    if target.endswith("reset"):
                        stats.update(peak=0, requests=0)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(out) + out
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def endpoint_stats(port: int, reset: bool = False) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats{'?reset' if reset else ''}", timeout=5) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


# ---- one level (its own process) -------------------------------------------------------------------


def run_level(run_id: str) -> None:
    """Executes the run's only shard and prints wall time, CPU time and RSS as one JSON line."""
    from evalpkg.agent.session import load_shared
    from evalpkg.pipeline.execute import execute_shard

    settings = get_settings()
    shared = load_shared(settings)
    import openai  # noqa: F401

    before = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    report = execute_shard(settings, run_id, 0, shared=shared)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps({"recorded": report.recorded, "wall": wall, "cpu": cpu, "peak_rss_mb": after.ru_maxrss / 1024}))


# ---- the driver ------------------------------------------------------------------------------------


class SessionSampler(threading.Thread):
    """The most sessions the shard's pools hold on the eval DB and the results DB, and the most it
    holds in all (with the stage's one-off connections, and ones closing), sampled every 20 ms."""

    def __init__(self, admin_url: str) -> None:
        super().__init__(daemon=True)
        self.admin_url = admin_url
        self.peak = {"eval-db": 0, "results-db": 0, "all": 0}
        self.stop = threading.Event()

    def run(self) -> None:
        with connect(self.admin_url) as conn:
            while not self.stop.wait(0.02):
                counts = dict.fromkeys(self.peak, 0)
                for app, n in conn.execute(
                    "select application_name, count(*) from pg_stat_activity where datname = any(%s) "
                    "and backend_type = 'client backend' group by application_name",
                    ([EVAL_DB, RESULTS_DB],),
                ):
                    counts["all"] += n
                    counts[app.removeprefix("evalpkg-")] = n
                for key in self.peak:
                    self.peak[key] = max(self.peak[key], counts.get(key, 0))


def plan(settings: Any, endpoint: str, concurrency: int, instances: int, tasks: int) -> str:
    repeats = max(1, math.ceil(instances / (2 * tasks)))
    config = RunConfig(
        name=f"concurrency-{concurrency}",
        agent="openai",
        endpoint=endpoint,
        model="fixed-latency",
        languages=["zh", "en"],
        repeats=repeats,
        limit=max(1, math.ceil(instances / (2 * repeats))),
        concurrency=concurrency,
    )
    return plan_run(settings, config)


def measure(settings: Any, port: int, concurrency: int, instances: int, tasks: int) -> dict[str, Any]:
    run_id = plan(settings, f"http://127.0.0.1:{port}/v1", concurrency, instances, tasks)
    endpoint_stats(port, reset=True)
    sampler = SessionSampler(settings.admin_url)
    sampler.start()
    try:
        child = subprocess.run(
            [sys.executable, __file__, "--level-run", run_id], capture_output=True, text=True, check=True
        )
    finally:
        sampler.stop.set()
        sampler.join()
    out = json.loads(child.stdout.strip().splitlines()[-1])
    seen = endpoint_stats(port)
    with store.results_db(settings) as conn:  # keep the bench's database small
        conn.execute("delete from results.run where run_id = %s", (run_id,))
    return {**out, "in_flight": seen["peak"], "calls": seen["requests"], "sessions": dict(sampler.peak)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--latency-ms", type=float, default=500)
    parser.add_argument("--latency-ms-at-256", type=float, help="the 256 level's latency (default: --latency-ms)")
    parser.add_argument("--rounds", type=int, default=8, help="instances per level = concurrency x rounds")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # internal: run the endpoint on this port
    parser.add_argument("--level-run", help=argparse.SUPPRESS)  # internal: execute this run's shard
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve, args.latency_ms / 1000)
    if args.level_run:
        return run_level(args.level_run)

    settings = get_settings()
    tasks = len(release.load(settings.tasks_dir).tasks)
    levels = [int(x) for x in args.levels.split(",")]
    servers: dict[float, tuple[int, subprocess.Popen[bytes]]] = {}

    def endpoint(latency_ms: float) -> int:
        if latency_ms not in servers:
            port = free_port()
            cmd = [sys.executable, __file__, "--serve", str(port), "--latency-ms", str(latency_ms)]
            servers[latency_ms] = (port, subprocess.Popen(cmd))
            for _ in range(200):
                try:
                    endpoint_stats(port)
                    break
                except OSError:
                    time.sleep(0.05)
        return servers[latency_ms][0]

    header = (
        f"{'conc':>5} {'latency':>8} {'instances':>9} {'wall s':>8} {'ideal s':>8} {'effic':>6} "
        f"{'in flight':>9} {'pg pooled (all)':>15} {'peak RSS MB':>11} {'CPU ms/call':>11}"
    )
    print(header)
    try:
        for c in levels:
            latency = args.latency_ms_at_256 if c == 256 and args.latency_ms_at_256 else args.latency_ms
            r = measure(settings, endpoint(latency), c, c * args.rounds, tasks)
            n = r["recorded"]
            ideal = n * CALLS_PER_INSTANCE * latency / 1000 / c
            sessions = f"{r['sessions']['eval-db']}+{r['sessions']['results-db']} ({r['sessions']['all']})"
            print(
                f"{c:>5} {latency:>6.0f}ms {n:>9} {r['wall']:>8.2f} {ideal:>8.2f} {ideal / r['wall']:>6.2f} "
                f"{r['in_flight']:>9} {sessions:>15} {r['peak_rss_mb']:>11.0f} {r['cpu'] * 1000 / r['calls']:>11.2f}",
                flush=True,
            )
        c = RSS_LEVEL  # below 200, so that both runs keep the same number of dialogues in flight
        rss = {n: measure(settings, endpoint(args.latency_ms), c, n, tasks)["peak_rss_mb"] for n in (200, 2000)}
        print(
            f"peak RSS at concurrency {c}: {rss[200]:.0f} MB with 200 instances, {rss[2000]:.0f} MB with 2,000 "
            f"(ratio {rss[2000] / rss[200]:.2f})"
        )
        print(
            "targets: efficiency >= 0.85 at 64 and >= 0.8 at 256, in flight == concurrency, pooled sessions <= "
            "pool sizes (eval 8 + results 2), CPU <= 5 ms per model call, RSS flat from 200 to 2,000 instances"
        )
    finally:
        for _, proc in servers.values():
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
