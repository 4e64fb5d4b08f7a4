"""Gold SQL runs through the agents' read-only path (guard, read-only transaction, limits, cursor) with
its own timeout, each statement once, and is never truncated at a row cap: one runner (sql/gold.py)."""

from __future__ import annotations

import pytest

from evalpkg.settings import Settings
from evalpkg.sql.executor import DEFAULT_ROW_CAP, ReadOnlyExecutor
from evalpkg.sql.gold import GoldError, GoldRunner, gold_runner

OVER_CAP = f"select g from generate_series(1, {DEFAULT_ROW_CAP + 5}) g order by g"


def test_a_gold_over_the_agent_cap_comes_back_whole(generated: Settings) -> None:
    with gold_runner(generated) as golds:
        rows = golds.result(OVER_CAP).rows
        assert len(rows) == DEFAULT_ROW_CAP + 5 and rows[-1] == [DEFAULT_ROW_CAP + 5]
    capped = GoldRunner(ReadOnlyExecutor(generated.agent_url(), row_cap=100))  # the grader's: the agents' cap
    with capped, pytest.raises(GoldError, match="more than 100 rows"):  # a cap, when given, fails loudly
        capped.result(OVER_CAP)


def test_gold_rows_are_json_values_with_their_stated_decimals(generated: Settings) -> None:
    with gold_runner(generated) as golds:
        got = golds.result("select 1.50::numeric as x, 2 as n, date '2024-01-31' as d")
    assert (got.columns, got.rows, got.decimals) == (["x", "n", "d"], [[1.5, 2, "2024-01-31"]], [2, None, None])


def test_gold_is_guarded_read_only_and_timed(generated: Settings) -> None:
    with gold_runner(generated) as golds:
        with pytest.raises(GoldError, match=r"not one read-only query: function set_config\(\)"):
            golds.result("select set_config('statement_timeout', '0', false)")
        setting = "select setting from pg_settings where name = 'transaction_read_only'"
        assert golds.result(setting).rows == [["on"]]
    with gold_runner(generated, timeout_ms=200) as golds:
        with pytest.raises(GoldError, match="after the 200 ms statement timeout"):
            golds.result("select pg_sleep(3)")
        assert golds.result("select 1").rows == [[1]]  # the session is usable after a failure


def test_each_statement_runs_once_and_a_failure_is_remembered(generated: Settings) -> None:
    with gold_runner(generated) as golds:
        first = golds.result("select clock_timestamp() as t")
        assert golds.result("select clock_timestamp() as t") is first  # not run again: the same result
        assert golds.ran("select clock_timestamp() as t") and not golds.ran("select 2")
        with pytest.raises(GoldError) as failed:
            golds.result("select 1/0")
        with pytest.raises(GoldError) as again:
            golds.result("select 1/0")
        assert again.value is failed.value and not golds.ran("select 1/0")
