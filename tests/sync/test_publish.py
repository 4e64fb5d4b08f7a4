"""Blue/green publishing of the marts: a sync whose build fails its checks publishes nothing, agents
never see a build schema, and a query running across a publish is neither blocked nor broken."""

from __future__ import annotations

import psycopg
import pytest

from evalpkg.db import connect
from evalpkg.dburl import with_user
from evalpkg.errors import SyncError
from evalpkg.settings import AGENT_ROLE, EVAL_DB, PROD_DB, Settings
from evalpkg.sync import publish
from evalpkg.sync.runner import SyncReport, run_sync
from evalpkg.sync.validate import in_schemas
from tests.sync.helpers import CHANGED_NOW, content_fingerprint


def schemas(settings: Settings) -> list[str]:
    with connect(settings.db_url(EVAL_DB)) as conn:
        rows = conn.execute("select nspname from pg_namespace where nspname like '%\\_\\_%' order by 1").fetchall()
    return [str(r[0]) for r in rows]


def test_suite_queries_are_pointed_at_the_build() -> None:
    assert in_schemas("select * from emr.t_lab_result where xmdm = 'K'", "__build") == (
        "select * from emr__build.t_lab_result where xmdm = 'K'"
    )
    assert in_schemas("select a from meta.snapshot, ops.query_ticket", "__build") == (
        "select a from meta__build.snapshot, ops__build.query_ticket"
    )
    assert in_schemas("select x.emr.y, xemr.z from staging.t", "__build") == "select x.emr.y, xemr.z from staging.t"
    assert in_schemas("select * from emr.t", "") == "select * from emr.t"


def test_a_build_failing_validation_is_never_published(synced: SyncReport, generated: Settings) -> None:
    before = content_fingerprint(generated)
    with connect(generated.db_url(PROD_DB)) as prod:
        lab_id, value = prod.execute(
            "select lab_id, result_value from his.t_lab_result "
            "where xmdm = 'K' and result_value is not null and is_deleted = 0 order by lab_id limit 1"
        ).fetchone()  # type: ignore[misc]
        prod.execute(
            f"update his.t_lab_result set result_value = 99, update_time = {CHANGED_NOW} where lab_id = %s", (lab_id,)
        )
    try:
        with pytest.raises(SyncError, match=r"lab_K_mmol_per_L: expect_column_values_to_be_between"):
            run_sync(generated)
        assert content_fingerprint(generated) == before  # agents still query the last good snapshot
        assert "emr__build" in schemas(generated)  # the failed build stays for a look, unpublished
        with (
            connect(with_user(generated.db_url(EVAL_DB), AGENT_ROLE)) as agent,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
        ):
            agent.execute("select count(*) from emr__build.t_lab_result")
    finally:
        with connect(generated.db_url(PROD_DB)) as prod:
            prod.execute(
                f"update his.t_lab_result set result_value = %s, update_time = {CHANGED_NOW} where lab_id = %s",
                (value, lab_id),
            )
    again = run_sync(generated)  # starts from a clean build; the watermark never moved past the bad row
    assert again.snapshot_version == synced.snapshot_version
    assert content_fingerprint(generated) == before
    assert schemas(generated) == []


def test_a_query_running_across_a_publish_is_not_blocked(synced: SyncReport, generated: Settings) -> None:
    url = with_user(generated.db_url(EVAL_DB), AGENT_ROLE)
    with connect(url, autocommit=False) as reader:
        first = reader.execute("select count(*) from t_lab_result").fetchone()  # holds its tables
        run_sync(generated, validate=False)  # publishes; the replaced tables are still in use
        assert reader.execute("select count(*) from t_lab_result").fetchone() == first
        assert "emr__old" in schemas(generated)  # left for the next sync, not waited for
        reader.rollback()
        with connect(url) as fresh:
            assert fresh.execute("select snapshot_version from meta.snapshot").fetchone() == (synced.snapshot_version,)
    run_sync(generated, validate=False)
    assert schemas(generated) == []


def test_publish_without_a_build_changes_nothing(synced: SyncReport, generated: Settings) -> None:
    before = content_fingerprint(generated)
    with pytest.raises(SyncError, match="nothing to publish: ehr_eval has no emr__build, meta__build, ops__build"):
        publish.publish(generated)
    assert content_fingerprint(generated) == before
