"""execute_sql refuses or cancels every hostile statement with a clear tool error, the database is
unchanged, and the run goes on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings
from evalpkg.sql.guard import SqlRefused, check
from tests.agent.conftest import NewToolkit
from tests.sync.helpers import content_fingerprint

TABLES = [
    "t_patient_info",
    "t_zy_visit",
    "t_diag_record",
    "t_lab_result",
    "t_med_order",
    "dict_dept",
    "dict_lab_item",
    "dict_drug",
]


# What holds an answer key: the ticket log (gold SQL of every refresh task), other sessions' statements.
ANSWER_KEYS = [
    "select * from ops.query_ticket",
    "select sql_text from ops.query_ticket",
    "select request_text, sql_text from query_ticket",  # unqualified: not on the search path either
]
OTHER_SESSIONS = [
    "select query from pg_stat_activity",
    "select query from pg_catalog.pg_stat_activity where usename = current_user",
    "select * from pg_stat_get_activity(null)",
]


def hostile_corpus() -> list[str]:
    handmade = (Path(__file__).parent / "hostile.sql").read_text(encoding="utf-8").split("\n----\n")
    generated = []
    for t in TABLES:
        generated += [
            f"insert into emr.{t} select * from emr.{t}",
            f"delete from emr.{t}",
            f"update emr.{t} set {'ksdm' if t in ('t_zy_visit', 'dict_dept') else 'patient_id'} = null",
        ]
    return handmade + generated


def test_corpus_is_large() -> None:
    assert len(hostile_corpus()) >= 100


def test_every_hostile_statement_is_refused_and_nothing_changes(generated: Settings, new_toolkit: NewToolkit) -> None:
    before = content_fingerprint(generated)
    toolkit = new_toolkit()
    for sql in hostile_corpus():
        result = toolkit.call("execute_sql", {"sql": sql})
        assert not result.ok, sql
        assert result.error and "\n" not in result.error, (sql, result.error)
    assert content_fingerprint(generated) == before
    after = toolkit.call("execute_sql", {"sql": "select count(*) from emr.t_patient_info"})
    assert after.ok and after.content["rows"][0][0] > 0  # the run continues


def test_sleep_beyond_the_timeout_is_cancelled(new_toolkit: NewToolkit) -> None:
    toolkit = new_toolkit(RunConfig(sql_timeout_ms=300))
    result = toolkit.call("execute_sql", {"sql": "select pg_sleep(5)"})
    assert not result.ok and "statement timeout" in (result.error or "")
    assert result.elapsed_ms < 3000
    assert toolkit.call("execute_sql", {"sql": "select 1 as one"}).content["rows"] == [[1]]


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("select 1; select 2", "exactly one statement"),
        ("delete from t", "only SELECT"),
        ("select pg_read_file('x')", "pg_read_file() is not allowed"),
        ("with d as (delete from t returning *) select * from d", "DELETE is not allowed"),
        ("select * from t for update", "not allowed"),
    ],
)
def test_parse_guard_says_why(sql: str, reason: str) -> None:
    with pytest.raises(SqlRefused, match=re.escape(reason)):
        check(sql)


def test_legitimate_queries_pass_the_parse_guard() -> None:
    for sql in [
        "select count(*) from emr.t_zy_visit where ksdm = '0101'",
        "with x as (select patient_id from emr.t_lab_result) select count(*) from x",
        "select 1 union all select 2",
        "select (select pinned_now from meta.snapshot) - interval '3 months'",
        "select count(*) from emr.t_diag_record d where not exists (select 1 from emr.t_med_order o where o.patient_id = d.patient_id)",
    ]:
        check(sql)


@pytest.mark.parametrize("query", ANSWER_KEYS + OTHER_SESSIONS)
def test_the_toolkit_refuses_every_answer_key(new_toolkit: NewToolkit, query: str) -> None:
    result = new_toolkit().call("execute_sql", {"sql": query})
    assert not result.ok, query
    assert result.error and (
        any(why in result.error for why in ("permission denied", "not readable", "not allowed", "does not exist"))
    ), result.error
