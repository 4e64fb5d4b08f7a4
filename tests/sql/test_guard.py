"""One definition of an allowed read-only statement: the ticket miner, gold validation, gold execution
and an agent's execute_sql give the same verdict on every statement of the hostile corpus and on named
cases, and accept ordinary analyst queries alike. Every case names its reason."""

from __future__ import annotations

import re
from typing import Any

import pytest

from evalpkg.agent import tools
from evalpkg.sql import executor, fingerprint, guard
from evalpkg.sql.gold import GoldError, GoldRunner
from evalpkg.testset import refresh
from tests.agent.test_guards import hostile_corpus

# Hostile statements the parse guard lets through because the database refuses them: the agents'
# role has no privilege on these schemas (tests/agent/test_guards.py runs them).
DATABASE_REFUSES = {
    "select * from deid_secret.hmac_key": "the de-identification key schema is not granted to the agents' role",
    "select * from src_his.t_patient_info": "identified source data is not granted to the agents' role",
    "select * from staging.stg_his__visit_keys": "dbt staging is not granted to the agents' role",
}

# (sql, what the refusal says, why it must be refused)
REFUSED = [
    ("select set_config('statement_timeout', '0', false)", "set_config()", "set_config changes a session setting"),
    (
        "select set_config('default_transaction_read_only', 'off', true)",
        "set_config()",
        "set_config could lift read-only",
    ),
    ("select pg_sleep_for('1 hour')", "pg_sleep_for()", "pg_sleep_for is denied outright"),
    ("select pg_sleep_until(now() + interval '1 hour')", "pg_sleep_until()", "pg_sleep_until is denied outright"),
    ("select * from dblink('dbname=ehr_prod', 'select 1') as t(x int)", "dblink()", "dblink reaches another database"),
    (
        "select dblink_exec('dbname=ehr_eval', 'delete from emr.t_lab_result')",
        "dblink_exec()",
        "dblink_exec writes elsewhere",
    ),
    ("do $$ begin delete from emr.t_lab_result; end $$", "got DO", "a DO block runs arbitrary code"),
    ("select 1; select 2", "exactly one statement", "a multi-statement string, even of two reads"),
    (
        "select count(*) from emr.t_zy_visit; delete from emr.t_lab_result",
        "exactly one statement",
        "a read, then a write",
    ),
    (
        "select * into emr.copy_of_patients from emr.t_patient_info",
        "INTO is not allowed",
        "SELECT INTO creates a table",
    ),
    (
        "with d as (delete from emr.t_lab_result returning *) select count(*) from d",
        "DELETE is not allowed",
        "a CTE with DELETE ... RETURNING writes inside a query",
    ),
    (
        "with u as (update emr.t_zy_visit set ksdm = null returning 1) select 1",
        "UPDATE is not allowed",
        "a CTE with UPDATE",
    ),
    ("copy emr.t_patient_info to '/tmp/patients.csv'", "got COPY", "COPY writes a server file"),
    ("copy (select 1) to program 'id'", "got COPY", "COPY TO PROGRAM runs a shell command"),
    ("lock table emr.t_zy_visit in access exclusive mode", "got LOCK", "LOCK blocks every other session"),
    ("select * from emr.t_lab_result for update", "LOCK is not allowed", "row locks from a query"),
    ("select nextval('emr.some_seq')", "nextval()", "a writable function call: nextval advances a sequence"),
    ("select setval('emr.some_seq', 1)", "setval()", "a writable function call: setval resets a sequence"),
    ("select pg_advisory_lock(1)", "pg_advisory_lock()", "a session lock that outlives the query"),
    ("select pg_read_file('/etc/passwd')", "pg_read_file()", "reads a server file"),
    ("select lo_import('/etc/passwd')", "lo_import()", "a large-object import writes"),
    (
        "select query_to_xml('delete from emr.t_lab_result returning 1', true, true, '')",
        "query_to_xml()",
        "dynamic SQL",
    ),
    ("call emr.some_procedure()", "got CALL", "CALL runs a procedure"),
    ("explain analyze delete from emr.t_lab_result", "got EXPLAIN", "EXPLAIN ANALYZE executes the statement"),
    ("set statement_timeout = 0", "got SET", "SET changes a session setting"),
    ("select version()", "version()", "server details are denied"),
    ("", "empty SQL", "nothing to run"),
    ("select from where (", "does not parse", "not SQL"),
]

ACCEPTED = [
    ("select count(*) from emr.t_zy_visit where ksdm = '0101'", "a plain filtered count"),
    (
        "with per_patient as (select patient_id, count(*) as n from emr.t_lab_result group by patient_id) "
        "select avg(n) from per_patient",
        "a CTE feeding an aggregate",
    ),
    (
        "with recursive d(n) as (select 1 union all select n + 1 from d where n < 12) select n from d",
        "a recursive CTE that only reads",
    ),
    (
        "select patient_id, visit_id, row_number() over (partition by patient_id order by visit_id) as k "
        "from emr.t_zy_visit",
        "a window function",
    ),
    (
        "select ksdm, count(*), sum(count(*)) over () as total, lag(count(*)) over (order by ksdm) "
        "from emr.t_zy_visit group by ksdm",
        "window functions over an aggregate",
    ),
    ("select ksdm from emr.t_zy_visit union select ksdm from emr.dict_dept", "UNION"),
    ("select 1 union all select 2 except select 3", "chained set operations"),
    (
        "select * from emr.t_patient_info p where exists "
        "(select 1 from emr.t_diag_record d where d.patient_id = p.patient_id)",
        "a correlated EXISTS subquery",
    ),
    (
        "select v.ksdm, x.n from emr.t_zy_visit v join (select visit_id, count(*) as n from emr.t_lab_result "
        "group by visit_id) x on x.visit_id = v.visit_id",
        "a derived table in a join",
    ),
    ("select (select pinned_now from meta.snapshot) - interval '3 months'", "a scalar subquery"),
    (
        "select case when zyts > 30 then 'long' else 'short' end as stay, count(*) from emr.t_zy_visit group by 1",
        "CASE and positional GROUP BY",
    ),
    ("-- visits per department\nselect ksdm, count(*) from emr.t_zy_visit group by ksdm", "a leading comment"),
    ("select count(*) from emr.t_diag_record where diag_name like '%delete%'", "a write verb inside a literal"),
    ("select pg_sleep(5)", "pg_sleep alone is left to the statement timeout, which cancels it (test_guards)"),
]


class NoDatabase(executor.ReadOnlyExecutor):
    """A refused gold must never reach the database."""

    def __init__(self) -> None:
        super().__init__("postgresql://nowhere.invalid/none")

    def _sessions(self) -> Any:
        raise AssertionError("the database was used for a statement the guard refuses")


NOWHERE = GoldRunner(NoDatabase())


def agent_accepts(sql: str) -> bool:
    """The verdict of the check execute_sql calls (tools.check, the very function object)."""
    try:
        tools.check(sql)
    except guard.SqlRefused:
        return False
    return True


def verdicts(sql: str) -> dict[str, bool]:
    return {
        "agent execute_sql": agent_accepts(sql),
        "refresh miner": refresh.ticket_sql_accepted(sql),
        "gold validation": fingerprint.is_single_select(sql),
    }


def test_every_path_calls_the_one_guard() -> None:
    assert tools.check is guard.check  # execute_sql
    assert executor.check is guard.check  # ReadOnlyExecutor.run and run_on, which golds run through


def test_the_corpus_is_the_shared_one() -> None:
    corpus = hostile_corpus()
    assert len(corpus) >= 100
    assert set(DATABASE_REFUSES) <= set(corpus)  # a stale entry here would hide nothing


@pytest.mark.parametrize("sql", hostile_corpus())
def test_hostile_corpus_same_verdict_everywhere(sql: str) -> None:
    expected = sql in DATABASE_REFUSES  # accepted here only where the database refuses it
    assert verdicts(sql) == dict.fromkeys(verdicts(sql), expected), (sql, DATABASE_REFUSES.get(sql, "refused"))
    if not expected:
        with pytest.raises(GoldError, match="not one read-only query"):
            NOWHERE.result(sql)


@pytest.mark.parametrize(("sql", "says", "why"), REFUSED, ids=[why for *_, why in REFUSED])
def test_named_cases_are_refused_everywhere(sql: str, says: str, why: str) -> None:
    assert not any(verdicts(sql).values()), (why, verdicts(sql))
    with pytest.raises(guard.SqlRefused, match=re.escape(says)):
        tools.check(sql)
    with pytest.raises(GoldError, match=f"not one read-only query: .*{re.escape(says)}"):
        NOWHERE.result(sql)


@pytest.mark.parametrize(("sql", "why"), ACCEPTED, ids=[why for _, why in ACCEPTED])
def test_analyst_queries_are_accepted_everywhere(sql: str, why: str) -> None:
    assert all(verdicts(sql).values()), (why, verdicts(sql))
