"""Runaway queries never reach the harness's memory (the row cap is enforced while fetching), many
dialogues share a few database sessions, the tool cache is bounded, and the agents' role carries
memory and temp-file limits on the server."""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any

import pytest

from evalpkg.agent.cache import ENTRY_ROWS, ToolCache
from evalpkg.agent.loop import run_dialogue
from evalpkg.agent.policies import ScriptedPolicy
from evalpkg.agent.trajectory import Trajectory
from evalpkg.db import connect
from evalpkg.runconfig import RunConfig
from evalpkg.services.bootstrap import AGENT_TEMP_FILE_LIMIT, AGENT_WORK_MEM
from evalpkg.settings import Settings
from evalpkg.sql.executor import DEFAULT_MAX_ROW_BYTES, DEFAULT_ROW_CAP, QueryResult, ReadOnlyExecutor
from tests.agent.conftest import NewToolkit

CROSS_JOIN = "select * from emr.t_lab_result a cross join emr.t_lab_result b"
SERIES_MATERIALIZED = "select g from generate_series(1, 200000000) as g"
SERIES_STREAMED = "select generate_series(1, 200000000) as g"


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class PeakRss:
    """The most this process grew above where it started, sampled every 5 ms."""

    def __enter__(self) -> PeakRss:
        self.start = self.peak = rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss_mb())

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())

    @property
    def growth_mb(self) -> float:
        return self.peak - self.start


def test_runaway_queries_stay_out_of_harness_memory_and_the_dialogue_goes_on(new_toolkit: NewToolkit) -> None:
    toolkit = new_toolkit(RunConfig(sql_timeout_ms=2000))
    toolkit.executor.run("select 1")  # the pooled session is open before measuring
    plan = [[("execute_sql", {"sql": sql})] for sql in (CROSS_JOIN, SERIES_MATERIALIZED, SERIES_STREAMED)]
    plan.append([("execute_sql", {"sql": "select count(*) as n from emr.t_patient_info"})])
    try:
        with PeakRss() as rss:
            traj = run_dialogue(
                ScriptedPolicy("runaway", plan, final="done"),
                toolkit,
                instance_id="i-1",
                task_id="t-1",
                language="zh",
                complexity="plain",
                question="q",
            )
    finally:
        toolkit.executor.close()
    assert rss.growth_mb < 64, f"the harness grew {rss.growth_mb:.0f} MB"
    cross, materialized, streamed, count = traj.tool_calls()
    for capped in (cross, streamed):  # the first cap rows, and the total as far as it is cheap to know
        content = json.loads(capped.result)
        assert capped.ok and len(content["rows"]) == 200 and content["total_rows"] == f"more than {DEFAULT_ROW_CAP}"
        assert "narrow the query" in content["note"]
    assert not materialized.ok and "statement timeout" in (materialized.error or "")  # one line, for the model
    assert count.ok and json.loads(count.result)["rows"][0][0] > 0
    assert traj.stop_reason == "final_answer" and traj.final_answer == "done"


def test_capped_results_report_the_true_total_when_it_is_cheap(generated: Settings) -> None:
    executor = ReadOnlyExecutor(generated.agent_url(), row_cap=100)
    try:
        result = executor.run("select g from generate_series(1, 5000) as g")
    finally:
        executor.close()
    assert result.capped and result.total_known and result.total_rows == 5000 and len(result.rows) == 100


def test_many_threads_share_a_few_sessions(generated: Settings) -> None:
    executor = ReadOnlyExecutor(generated.agent_url(), pool_size=3)
    try:
        with ThreadPoolExecutor(24) as pool:
            results = list(
                pool.map(lambda _: executor.run("select pg_backend_pid() as pid, pg_sleep(0.02)"), range(48))
            )
    finally:
        executor.close()
    assert len({r.rows[0][0] for r in results}) <= 3


def test_tool_cache_is_bounded_by_the_rows_it_holds() -> None:
    cache = ToolCache("snap", max_rows=1000)
    for i in range(50):
        cache.put("execute_sql", f"q{i}", QueryResult(["n"], [[i]] * 90, 90, False, 1.0))
    assert cache._rows <= 1000 and len(cache._data) == 1000 // (90 + ENTRY_ROWS)
    assert cache.get("execute_sql", "q0") is None and cache.get("execute_sql", "q49") is not None


def test_agent_role_has_memory_and_temp_file_limits(generated: Settings) -> None:
    with connect(generated.agent_url()) as conn:
        assert conn.execute("show work_mem").fetchone() == (AGENT_WORK_MEM,)
        assert conn.execute("show temp_file_limit").fetchone() == (AGENT_TEMP_FILE_LIMIT,)


def test_pool_wait_is_a_tool_error_not_a_crash(generated: Settings, new_toolkit: NewToolkit) -> None:
    executor = ReadOnlyExecutor(generated.agent_url(), timeout_ms=3000)
    toolkit = new_toolkit()
    toolkit.executor = executor
    try:
        executor.run("select 1")
        pool = executor._sessions()
        with pool.connection():  # the only session is busy
            pool.timeout = 0.2
            t0 = time.perf_counter()
            result = toolkit.call("execute_sql", {"sql": "select 2 as two"})
        assert not result.ok and "eval DB busy" in (result.error or "") and time.perf_counter() - t0 < 2
        assert toolkit.call("execute_sql", {"sql": "select 3 as three"}).content["rows"] == [[3]]
    finally:
        executor.close()


ONE_GIGABYTE_VALUE = "SELECT repeat('x', 1000000000)"
THREE_GIGABYTE_AGGREGATE = "SELECT string_agg(md5(g::text), '') FROM generate_series(1, 100000000) g"
MANY_BIG_ROWS = "select repeat('y', 200000) as v from generate_series(1, 200) g"  # 40 MB in rows under the row cap
THREE_MB_AGGREGATE = "SELECT string_agg(md5(g::text), '') FROM generate_series(1, 100000) g"


def test_huge_values_never_reach_the_harness_and_every_dialogue_goes_on(new_toolkit: NewToolkit) -> None:
    """8 dialogues at once, each sending values of a gigabyte (and a result of 40 MB in 200 KB rows, over
    a 2 MB result cap): the server refuses to send them, the model gets one sentence, the dialogue goes on."""
    config = RunConfig(sql_timeout_ms=4000, max_result_bytes=2 * 2**20)
    toolkits = [new_toolkit(config) for _ in range(8)]
    executor = toolkits[0].executor
    with ThreadPoolExecutor(8) as pool:  # every pooled session open before measuring
        list(pool.map(lambda _: executor.run("select pg_sleep(0.1)"), range(8)))
    plan = [
        [("execute_sql", {"sql": sql})]
        for sql in (ONE_GIGABYTE_VALUE, THREE_GIGABYTE_AGGREGATE, MANY_BIG_ROWS, THREE_MB_AGGREGATE)
    ]
    plan.append([("execute_sql", {"sql": "select count(*) as n from emr.t_patient_info"})])

    def dialogue(i: int) -> Trajectory:
        return run_dialogue(
            ScriptedPolicy("huge", [list(step) for step in plan], final="done"),
            toolkits[i],
            instance_id=f"i-{i}",
            task_id="t-1",
            language="zh",
            complexity="plain",
            question="q",
        )

    with PeakRss() as rss, ThreadPoolExecutor(8) as pool:
        trajectories = list(pool.map(dialogue, range(8)))
    print(f"\n8 dialogues of gigabyte values: the harness grew {rss.growth_mb:.1f} MB at its peak")
    assert rss.growth_mb <= 64, f"the harness grew {rss.growth_mb:.0f} MB"
    too_large_row = (
        f"the result was larger than {config.max_row_bytes} bytes in one row; select fewer or shorter values"
    )
    timed_out = "query cancelled after the 4000 ms statement timeout"
    for traj in trajectories:
        one_gb, three_gb, many_rows, three_mb, count = traj.tool_calls()
        # computing a gigabyte takes the server seconds: with 8 at once on 2 cores, the timeout may come first
        assert not one_gb.ok and one_gb.error in (too_large_row, timed_out)
        assert not three_gb.ok and three_gb.error == timed_out
        assert not three_mb.ok and three_mb.error == too_large_row
        assert not many_rows.ok and many_rows.error == (
            f"the result was larger than {config.max_result_bytes} bytes; select fewer or shorter values"
        )
        assert count.ok and json.loads(count.result)["rows"][0][0] > 0
        assert traj.stop_reason == "final_answer" and traj.final_answer == "done"


def test_a_gigabyte_value_the_server_finishes_is_refused_before_it_is_sent(new_toolkit: NewToolkit) -> None:
    toolkit = new_toolkit(RunConfig(sql_timeout_ms=60_000))
    toolkit.executor.run("select 1")
    with PeakRss() as rss:
        result = toolkit.call("execute_sql", {"sql": ONE_GIGABYTE_VALUE})
    print(f"\na gigabyte value the server computed in {result.elapsed_ms / 1000:.1f}s: grew {rss.growth_mb:.1f} MB")
    assert rss.growth_mb <= 64, f"the harness grew {rss.growth_mb:.0f} MB"
    assert not result.ok and result.error == (
        f"the result was larger than {DEFAULT_MAX_ROW_BYTES} bytes in one row; select fewer or shorter values"
    )


def test_a_gold_over_the_byte_cap_is_an_error_not_a_truncated_result(generated: Settings) -> None:
    from evalpkg.sql.gold import GoldError, gold_runner

    with gold_runner(generated) as golds:
        assert len(golds.result("select repeat('z', 1000) as v from generate_series(1, 50) g").rows) == 50
        with pytest.raises(GoldError, match=r"^the result was larger than 262144 bytes in one row"):
            golds.result("select repeat('z', 300000) as v")
        # the statement ended with its transaction: the session is usable at once
        assert golds.result("select 1 as one;").rows == [[1]]  # a final semicolon


@pytest.mark.parametrize(
    ("sql", "rows", "why"),
    [
        ("select 1 as a, 2 as a", [[1, 2]], "duplicate column names"),
        ("select", [[]], "no columns at all"),
        ("with t as (select 3 as x) select x from t order by x", [[3]], "a CTE and ORDER BY"),
        ("select g from generate_series(1, 3) g order by g desc limit 2", [[3], [2]], "order and limit kept"),
        ("select null::text as t", [[None]], "a NULL has no size"),
        ("select 1 as x\n-- a last line comment", [[1]], "a comment on the last line"),
    ],
)
def test_measured_queries_return_what_the_query_returns(generated: Settings, sql: str, rows: Any, why: str) -> None:
    from evalpkg.sql.gold import gold_runner

    with gold_runner(generated) as golds:
        assert golds.result(sql).rows == rows, why
