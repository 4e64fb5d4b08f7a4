"""The eval DB keeps production's keys (a DBA hands agents a database with its primary keys and lookup
indexes, not heaps): every primary key and index of production is on the same table and columns in `emr`,
with the time columns questions filter on; the dbt test `keys_built` fails when one is missing; agents
see them in `query_schema`."""

from __future__ import annotations

import psycopg
import pytest

from evalpkg.agent.schema import Catalog, read_indexes
from evalpkg.db import connect
from evalpkg.errors import SyncError
from evalpkg.settings import EVAL_DB, PROD_DB, Settings
from evalpkg.sync.dbt import run_dbt
from evalpkg.sync.runner import SyncReport

# the time columns questions filter on, each with an index of its own (or leading one)
TIME_COLUMNS = {("t_zy_visit", "ryrq"), ("t_zy_visit", "cyrq"), ("t_med_order", "kssj"), ("t_diag_record", "zdsj")}


def indexes(conn: psycopg.Connection, schema: str) -> set[tuple[str, tuple[str, ...], bool]]:
    return {(table, i.columns, i.primary) for table, found in read_indexes(conn, [schema]).items() for i in found}


def test_every_key_of_production_is_kept_in_the_eval_db(synced: SyncReport, generated: Settings) -> None:
    with connect(generated.db_url(PROD_DB)) as prod, connect(generated.db_url(EVAL_DB)) as ev:
        wanted = indexes(prod, "his")
        kept = indexes(ev, "emr")
        plans = [
            ev.execute(f"explain select * from emr.{t} where {col} = %s", ("x",)).fetchall()
            for t, col in (("t_lab_result", "visit_id"), ("t_zy_visit", "patient_id"))
        ]
    assert len(wanted) == 12, wanted  # 8 primary keys, 4 indexes by patient or visit
    missing = wanted - kept
    assert not missing, f"production's keys the eval DB lacks: {sorted(missing)}"
    leading = {(t, cols[0]) for t, cols, _ in kept}
    assert leading >= TIME_COLUMNS, TIME_COLUMNS - leading
    for plan in plans:  # a lookup by id reads the index, not the whole table
        assert "Index" in " ".join(str(r[0]) for r in plan), plan


@pytest.mark.parametrize(
    ("table", "drop", "restore"),
    [
        pytest.param(
            "t_zy_visit",
            "drop index emr.{patient_index}",
            "create index on emr.t_zy_visit (patient_id)",
            id="the-patient-id-index-of-the-visits",
        ),
        pytest.param(
            "t_med_order",
            "alter table emr.t_med_order drop constraint t_med_order_pkey",
            "alter table emr.t_med_order add primary key (order_id)",
            id="the-primary-key-of-the-orders",
        ),
    ],
)
def test_keys_built_fails_when_one_is_missing(
    synced: SyncReport, generated: Settings, table: str, drop: str, restore: str
) -> None:
    with connect(generated.db_url(EVAL_DB)) as ev:
        row = ev.execute(
            "select indexname from pg_indexes where schemaname = 'emr' and tablename = 't_zy_visit' "
            "and indexdef like '%%(patient_id)'"
        ).fetchone()
        assert row is not None
        ev.execute(drop.format(patient_index=row[0]))
    try:
        with pytest.raises(SyncError, match=rf"1 node\(s\) failed; first: test keys_built_{table}_"):
            run_dbt(generated, "test", "--select", "test_name:keys_built")
    finally:
        with connect(generated.db_url(EVAL_DB)) as ev:
            ev.execute(restore)
    run_dbt(generated, "test", "--select", "test_name:keys_built")  # every key back: passes


def test_agents_see_the_keys_in_query_schema(synced: SyncReport, generated: Settings) -> None:
    with connect(generated.agent_url()) as conn:
        catalog = Catalog.load(conn)
    text = catalog.table_text("t_zy_visit")
    assert "keys: primary key (visit_id); index (cyrq); index (patient_id); index (ryrq)" in text, text
    assert "primary key (lab_id)" in catalog.table_text("t_lab_result")
