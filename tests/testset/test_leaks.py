"""No answer key is readable by the agents: the ticket log (whose SQL is the gold of every task the
refresh mines) is refused to their role and through their toolkit, other sessions' statements are
refused, and an audit of every table the role reads finds no gold or ticket SQL; broken on purpose,
the audit finds the leak. Every ticket that shares a stored example's shape is named, not the first."""

from __future__ import annotations

import json

import psycopg
import pytest

from evalpkg.db import connect
from evalpkg.settings import AGENT_ROLE, EVAL_DB, PROJECT_ROOT, Settings
from evalpkg.sync.runner import SyncReport
from evalpkg.testset import release
from evalpkg.testset.leaks import audit_agent_readable, gold_queries, ticket_queries
from tests.agent.test_guards import ANSWER_KEYS


@pytest.mark.parametrize("query", ANSWER_KEYS)
def test_the_agents_role_cannot_read_the_ticket_log(synced: SyncReport, generated: Settings, query: str) -> None:
    with connect(generated.agent_url()) as conn, pytest.raises(psycopg.errors.Error) as refused:
        conn.execute(query)
    assert isinstance(refused.value, psycopg.errors.InsufficientPrivilege | psycopg.errors.UndefinedTable)


def test_the_miner_still_reads_the_ticket_log(synced: SyncReport, generated: Settings) -> None:
    tickets = ticket_queries(generated)
    assert len(tickets) > 100


def test_no_table_the_agents_read_holds_a_gold_or_a_ticket_sql(synced: SyncReport, generated: Settings) -> None:
    tasks = [t for v in release.versions(generated.tasks_dir) for t in release.load(generated.tasks_dir, v).tasks]
    answers = {**ticket_queries(generated), **gold_queries(tasks)}
    audit = audit_agent_readable(generated, answers)
    assert "meta.sql_examples" in audit.tables and "emr.t_zy_visit" in audit.tables
    assert not [t for t in audit.tables if t.startswith("ops.")]
    examples = json.loads((PROJECT_ROOT / "evalpkg" / "prod" / "sql_examples.json").read_text(encoding="utf-8"))
    assert audit.texts >= len(examples)  # every example's SQL at least was compared, not skipped
    assert audit.leaks == []

    # Broken on purpose: the old grant back, the audit names the ticket log's SQL.
    with connect(generated.db_url(EVAL_DB)) as conn:
        conn.execute(f"grant usage on schema ops to {AGENT_ROLE}")
        conn.execute(f"grant select on ops.query_ticket to {AGENT_ROLE}")
    try:
        broken = audit_agent_readable(generated, answers)
    finally:
        with connect(generated.db_url(EVAL_DB)) as conn:
            conn.execute(f"revoke select on ops.query_ticket from {AGENT_ROLE}")
            conn.execute(f"revoke usage on schema ops from {AGENT_ROLE}")
    assert "ops.query_ticket" in broken.tables
    leaked = {leak.table for leak in broken.leaks}
    assert leaked == {"ops.query_ticket"}
    assert any(leak.holds.startswith("SQL of ticket #") for leak in broken.leaks)


def test_every_ticket_of_a_stored_examples_shape_is_listed(synced: SyncReport, generated: Settings) -> None:
    examples = json.loads((PROJECT_ROOT / "evalpkg" / "prod" / "sql_examples.json").read_text(encoding="utf-8"))
    example = examples[0]["sql"]  # outpatient visits of one department (ksdm '0102') in 2022
    assert "ksdm = '0102'" in example
    tickets = {example.replace("'0102'", f"'{dept}'"): f"SQL of ticket #{n}" for n, dept in enumerate(DEPTS, 1)}
    audit = audit_agent_readable(generated, tickets)
    assert audit.leaks == []  # other literals: a method, not an answer
    named = sorted(leak.holds for leak in audit.similar if leak.table == "meta.sql_examples")
    assert named == sorted(tickets.values()), audit.similar  # all three, each once


DEPTS = ("0201", "0301", "0401")  # three tickets of the example's shape, other departments
