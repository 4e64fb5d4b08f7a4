"""Gold SQL runs through the agents' read-only path (guard, read-only transaction, limits, cursor) with
its own timeout, and is never truncated at the agents' row cap."""

from __future__ import annotations

from decimal import Decimal

import pytest

from evalpkg.settings import Settings
from evalpkg.sql.executor import DEFAULT_ROW_CAP
from evalpkg.testset.gold import GoldError, agent_connection, run_gold

OVER_CAP = f"select g from generate_series(1, {DEFAULT_ROW_CAP + 5}) g order by g"


def test_a_gold_over_the_agent_cap_comes_back_whole(generated: Settings) -> None:
    with agent_connection(generated) as conn:
        rows = run_gold(conn, OVER_CAP)
        assert len(rows) == DEFAULT_ROW_CAP + 5 and rows[-1] == (DEFAULT_ROW_CAP + 5,)
        with pytest.raises(GoldError, match="more than 100 rows"):  # a cap, when given, fails loudly
            run_gold(conn, OVER_CAP, row_cap=100)


def test_gold_rows_keep_the_driver_types(generated: Settings) -> None:
    with agent_connection(generated) as conn:
        assert run_gold(conn, "select 1.50::numeric as x, 2 as n") == [(Decimal("1.50"), 2)]


def test_gold_is_guarded_read_only_and_timed(generated: Settings) -> None:
    with agent_connection(generated) as conn:
        with pytest.raises(GoldError, match=r"not one read-only query: function set_config\(\)"):
            run_gold(conn, "select set_config('statement_timeout', '0', false)")
        setting = "select setting from pg_settings where name = 'transaction_read_only'"
        assert run_gold(conn, setting) == [("on",)]  # on a connection with no read-only default
        with pytest.raises(GoldError, match="after the 200 ms statement timeout"):
            run_gold(conn, "select pg_sleep(3)", timeout_ms=200)
        assert run_gold(conn, "select 1") == [(1,)]  # the connection is usable after a failure
