"""Sync behaviour over repeated runs: idempotence, incremental changes and deletions, the key."""

from __future__ import annotations

import psycopg
import pytest

from evalpkg.db import connect
from evalpkg.errors import ConfigError, DataError, ServiceError, SyncError
from evalpkg.pipeline.execute import execute_shard
from evalpkg.pipeline.run import plan_run
from evalpkg.prod.generator import generate
from evalpkg.runconfig import RunConfig
from evalpkg.services import bootstrap
from evalpkg.settings import EVAL_DB, PROD_DB, Settings
from evalpkg.sync.runner import SyncReport, run_sync
from evalpkg.sync.validate import validate_eval_db
from tests.conftest import running_cluster
from tests.sync.helpers import CHANGED_NOW, content_fingerprint, current_key


def test_second_sync_changes_nothing(synced: SyncReport, generated: Settings) -> None:
    before = content_fingerprint(generated)
    again = run_sync(generated, validate=False)
    assert content_fingerprint(generated) == before
    assert again.snapshot_version == synced.snapshot_version


def test_incremental_sync_applies_updates_inserts_and_deletions(synced: SyncReport, generated: Settings) -> None:
    with connect(generated.db_url(PROD_DB)) as prod:
        ids = [
            r[0]
            for r in prod.execute(
                "select lab_id from his.t_lab_result where is_deleted = 0 and result_value is not null "
                "order by lab_id limit 3"
            )
        ]
        soft_deleted, hard_deleted, updated = ids
        prod.execute(
            f"update his.t_lab_result set is_deleted = 1, update_time = {CHANGED_NOW} where lab_id = %s",
            (soft_deleted,),
        )
        prod.execute("delete from his.t_lab_result where lab_id = %s", (hard_deleted,))
        prod.execute(
            f"update his.t_lab_result set result_value = result_value * 1.01, update_time = {CHANGED_NOW} where lab_id = %s",
            (updated,),
        )
        new_id = prod.execute(
            "insert into his.t_lab_result select lab_id + 10000000, visit_id, patient_id, xmdm, xmmc, result_value, "
            f"unit, ref_range, result_flag, bgzt, bz, cysj, exec_time, report_time, {CHANGED_NOW}, 0 "
            "from his.t_lab_result where lab_id = %s returning lab_id",
            (updated,),
        ).fetchone()[0]  # type: ignore[index]
    report = run_sync(generated, validate=False)
    assert report.rows["t_lab_result"] == synced.rows["t_lab_result"] - 1
    with connect(generated.db_url(EVAL_DB)) as ev:
        present = dict(
            ev.execute(
                "select lab_id, result_value from emr.t_lab_result where lab_id = any(%s)",
                ([soft_deleted, hard_deleted, updated, new_id],),
            ).fetchall()
        )
    assert set(present) == {updated, new_id}
    with connect(generated.db_url(PROD_DB)) as prod:
        expected = prod.execute("select result_value from his.t_lab_result where lab_id = %s", (updated,)).fetchone()
    assert expected is not None and present[updated] == expected[0]
    incremental = content_fingerprint(generated)
    run_sync(generated, full_refresh=True, validate=False)
    assert content_fingerprint(generated) == incremental  # incremental == rebuilt from scratch


def test_sync_without_key_fails_clearly_and_writes_nothing(synced: SyncReport, generated: Settings) -> None:
    key = current_key(generated)
    before = content_fingerprint(generated)
    bootstrap.drop_key(generated)
    try:
        with pytest.raises(ConfigError, match=r"no de-identification key .*evalpkg deid set-key"):
            run_sync(generated, validate=False)
        assert content_fingerprint(generated) == before
    finally:
        bootstrap.set_key(generated, key)


def test_short_key_is_rejected(generated: Settings) -> None:
    with pytest.raises(ConfigError, match="too short"):
        bootstrap.set_key(generated, b"short", replace=True)


def test_agent_role_cannot_write_read_secrets_or_reach_prod(synced: SyncReport, generated: Settings) -> None:
    from evalpkg.dburl import with_user
    from evalpkg.settings import AGENT_ROLE

    url = with_user(generated.db_url(EVAL_DB), AGENT_ROLE)
    with connect(url) as conn:
        assert conn.execute("select count(*) from t_patient_info").fetchone()[0] > 0  # type: ignore[index]
        assert conn.execute("show statement_timeout").fetchone()[0] == "30s"  # type: ignore[index]
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("delete from emr.t_lab_result")
        # Turning the read-only default off is possible; privileges still stop the write.
        conn.execute("set default_transaction_read_only = off")
        for statement in (
            "delete from emr.t_lab_result",
            "insert into meta.snapshot select * from meta.snapshot",
            "create table emr.x (i int)",
            "select * from deid_secret.hmac_key",
            "select * from staging.sync_watermark",
            "select * from src_his.t_patient_info",
            "create temp table t (i int)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    with (
        pytest.raises(ServiceError, match='permission denied for database "ehr_prod"'),
        connect(with_user(generated.db_url(PROD_DB), AGENT_ROLE)),
    ):
        pass


def test_gx_suite_catches_an_out_of_range_lab_value(synced: SyncReport, generated: Settings) -> None:
    with connect(generated.db_url(EVAL_DB)) as ev:
        lab_id = ev.execute(
            "select lab_id from emr.t_lab_result where xmdm = 'K' and result_value is not null limit 1"
        ).fetchone()[0]  # type: ignore[index]
        original = ev.execute("select result_value from emr.t_lab_result where lab_id = %s", (lab_id,)).fetchone()[0]  # type: ignore[index]
        ev.execute("update emr.t_lab_result set result_value = 99 where lab_id = %s", (lab_id,))
    try:
        with pytest.raises(SyncError, match=r"lab_K_mmol_per_L: expect_column_values_to_be_between\(result_value\)"):
            validate_eval_db(generated)
    finally:
        with connect(generated.db_url(EVAL_DB)) as ev:
            ev.execute(
                "update emr.t_lab_result set result_value = %s where lab_id = %s",
                (original, lab_id),
            )
    assert validate_eval_db(generated).success


def test_bad_suite_file_names_file_and_field(tmp_path, generated: Settings) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "eval_db.json"
    bad.write_text('{"format_version": 1, "name": "x", "batches": [{"name": "b"}]}')
    with pytest.raises(ConfigError, match=r"eval_db.json: field batches.0.expectations: Field required"):
        validate_eval_db(generated, bad)


@pytest.mark.server  # a scratch cluster: the session's key stays as it is
def test_another_key_is_another_snapshot_and_a_run_planned_on_one_is_not_executed_on_the_other() -> None:
    """Another key shifts every date and renames every patient: the snapshot version changes with it (an
    unchanged re-sync keeps it), so a run's answers are never recorded on a world it was not planned on."""
    with running_cluster() as s:
        generate(s.db_url(PROD_DB), 200, 3)
        first = run_sync(s, full_refresh=True, validate=False).snapshot_version
        assert run_sync(s, validate=False).snapshot_version == first  # unchanged: the same version
        key = current_key(s)
        run_id = plan_run(s, RunConfig(name="rotation", agent="gold", limit=2, reference_worlds=False))
        bootstrap.set_key(s, replace=True)
        rotated = run_sync(s, validate=False).snapshot_version
        assert rotated != first
        with pytest.raises(DataError, match=f"planned on snapshot {first}, the eval DB is now {rotated}"):
            execute_shard(s, run_id, 0)
        bootstrap.set_key(s, key, replace=True)
        assert run_sync(s, validate=False).snapshot_version == first  # the key back: the world back
        shard = execute_shard(s, run_id, 0)
        assert shard.recorded == shard.planned > 0
