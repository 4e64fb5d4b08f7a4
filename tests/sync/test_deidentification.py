"""De-identification properties, checked against prod with an independent HMAC implementation."""

from __future__ import annotations

from datetime import date, timedelta

from evalpkg.db import connect
from evalpkg.settings import EVAL_DB, PROD_DB, Settings
from evalpkg.sync import dbt
from evalpkg.sync.runner import SyncReport
from tests.conftest import SESSION_KEY
from tests.sync.helpers import HAPPENED, MART_TABLES, by_now, current_key, pseudonym, shift_days

IDENTIFIER_COLUMNS = ("patient_id", "brxm", "sfzh", "lxdh", "jtzz")


def _prod_identifiers(settings: Settings) -> set[str]:
    with connect(settings.db_url(PROD_DB)) as conn:
        values: set[str] = set()
        for col in IDENTIFIER_COLUMNS:
            values |= {r[0] for r in conn.execute(f"select {col} from his.t_patient_info")}
        values |= {r[0] for r in conn.execute("select visit_id from his.t_zy_visit")}
    return values


def _eval_values(settings: Settings) -> list[tuple[str, str]]:
    """(schema.table.column, value) for every column of every table agents can see."""
    out = []
    with connect(settings.db_url(EVAL_DB)) as conn:
        cols = conn.execute(
            "select table_schema, table_name, column_name from information_schema.columns "
            "where table_schema in ('emr', 'meta', 'ops')"
        ).fetchall()
        for schema, table, col in cols:
            for (value,) in conn.execute(f'select distinct "{col}"::text from "{schema}"."{table}"'):
                if value is not None:
                    out.append((f"{schema}.{table}.{col}", value))
    return out


def test_no_production_identifier_value_survives_anywhere(synced: SyncReport, generated: Settings) -> None:
    identifiers = _prod_identifiers(generated)
    values = _eval_values(generated)
    assert len(values) > 1000
    exact = [(where, v) for where, v in values if v in identifiers]
    assert exact == []
    # names, id cards, phones, addresses (short digit strings would match counts by chance)
    long_identifiers = [i for i in identifiers if len(i) >= 2 and (not i.isdigit() or len(i) >= 8)]
    contained = [(where, v) for where, v in values for i in long_identifiers if i in v]
    assert contained == []


def test_pseudonyms_are_keyed_hmacs_and_consistent_across_tables(synced: SyncReport, generated: Settings) -> None:
    key = current_key(generated)
    with connect(generated.db_url(PROD_DB)) as prod:
        visits = prod.execute("select visit_id, patient_id, ryrq from his.t_zy_visit where is_deleted = 0").fetchall()
        labs = prod.execute(
            "select lab_id, visit_id, patient_id, exec_time from his.t_lab_result where is_deleted = 0"
        ).fetchall()
    with connect(generated.db_url(EVAL_DB)) as ev:
        eval_visits = dict(ev.execute("select visit_id, patient_id from emr.t_zy_visit").fetchall())
        eval_labs = {
            r[0]: (r[1], r[2]) for r in ev.execute("select lab_id, visit_id, patient_id from emr.t_lab_result")
        }
        patients = {r[0] for r in ev.execute("select patient_id from emr.t_patient_info")}
    later = 0
    for visit_id, patient_id, happened in visits:
        if not by_now(key, patient_id, happened):
            later += 1
            assert pseudonym(key, "vid", "V", visit_id) not in eval_visits
            continue
        assert eval_visits[pseudonym(key, "vid", "V", visit_id)] == pseudonym(key, "pid", "P", patient_id)
    for lab_id, visit_id, patient_id, happened in labs:
        expected = (pseudonym(key, "vid", "V", visit_id), pseudonym(key, "pid", "P", patient_id))
        assert eval_labs.get(lab_id) == (expected if by_now(key, patient_id, happened) else None)
    assert later > 0  # production runs past the snapshot's "now"
    assert {v for v in eval_visits.values()} <= patients


def test_every_date_of_a_patient_moves_by_one_whole_week_offset(synced: SyncReport, generated: Settings) -> None:
    key = current_key(generated)
    checks = [
        ("t_zy_visit", "visit_id", "ryrq"),
        ("t_diag_record", "diag_id", "zdsj"),
        ("t_lab_result", "lab_id", "report_time"),
        ("t_med_order", "order_id", "kssj"),
    ]
    seen_offsets: dict[str, set[int]] = {}
    for table, key_col, time_col in checks:
        with connect(generated.db_url(PROD_DB)) as prod:
            rows = [
                r
                for r in prod.execute(
                    f"select {key_col}, patient_id, {time_col} from his.{table} "
                    f"where is_deleted = 0 and {time_col} is not null"
                )
                if by_now(key, r[1], r[2])
            ]
        with connect(generated.db_url(EVAL_DB)) as ev:
            if key_col == "visit_id":
                shifted = {}
                for vid, t in ev.execute(f"select visit_id, {time_col} from emr.{table}"):
                    shifted[vid] = t
                lookup = {r[0]: shifted[pseudonym(key, "vid", "V", r[0])] for r in rows}
            else:
                lookup = dict(ev.execute(f"select {key_col}, {time_col} from emr.{table}").fetchall())
        for k, patient_id, t in rows:
            delta = t - lookup[k]
            assert delta.seconds == 0 and delta.days % 7 == 0 and 7 <= delta.days <= 364
            assert t.weekday() == lookup[k].weekday()
            seen_offsets.setdefault(patient_id, set()).add(delta.days)
            assert delta.days == shift_days(key, patient_id)
    assert all(len(offsets) == 1 for offsets in seen_offsets.values())
    assert len({next(iter(o)) for o in seen_offsets.values()}) > 10  # offsets differ between patients


AGE_GROUPS = ((90, "90+"), (65, "65-89"), (45, "45-64"), (18, "18-44"), (0, "0-17"))


def test_birth_year_only_and_ages_over_89_grouped(synced: SyncReport, generated: Settings) -> None:
    """One rule for both columns: the age shown is the snapshot's year minus the shifted birth year."""
    key = current_key(generated)
    as_of = date(2026, 10, 31)
    with connect(generated.db_url(PROD_DB)) as prod:
        births = [
            (patient_id, birth)
            for patient_id, birth, created in prod.execute(
                "select patient_id, csrq, jdrq from his.t_patient_info where is_deleted = 0"
            )
            if by_now(key, patient_id, created)
        ]
    with connect(generated.db_url(EVAL_DB)) as ev:
        eval_rows = {r[0]: (r[1], r[2]) for r in ev.execute("select patient_id, csnf, nlfz from emr.t_patient_info")}
    over_89 = shown_older = 0
    for patient_id, birth in births:
        csnf, nlfz = eval_rows[pseudonym(key, "pid", "P", patient_id)]
        age = as_of.year - birth.year - ((as_of.month, as_of.day) < (birth.month, birth.day))
        shown = as_of.year - (birth - timedelta(days=shift_days(key, patient_id))).year
        assert shown >= age  # Safe Harbor: never an age below the true one, so none over 89 slips out
        shown_older += shown > age
        if shown > 89:
            over_89 += 1
            assert (csnf, nlfz) == (None, "90+")
        else:
            assert csnf == as_of.year - shown
            assert nlfz == next(group for low, group in AGE_GROUPS if shown >= low)
    assert over_89 > 0 and shown_older > 0


def test_row_parity_and_no_deleted_rows(synced: SyncReport, generated: Settings) -> None:
    """Every live prod row that happened by the snapshot's "now" (shifted), and no other."""
    key = current_key(generated)
    with connect(generated.db_url(PROD_DB)) as prod:
        expected = {
            t: sum(
                by_now(key, patient_id, happened)
                for patient_id, happened in prod.execute(
                    f"select patient_id, {HAPPENED[t]} from his.{t} where is_deleted = 0"
                )
            )
            for t in MART_TABLES
        }
    assert synced.rows == expected


def test_free_text_diagnoses_are_replaced_by_the_mapping(synced: SyncReport, generated: Settings) -> None:
    with connect(generated.db_url(EVAL_DB)) as ev:
        texts = {r[0] for r in ev.execute("select distinct zdmc from emr.t_diag_record")}
    assert "2型糖尿病" in texts
    assert not texts & {"T2DM", "房颤", "上感", "HTN"}  # free-text variants never pass


def test_patient_specific_tickets_stay_in_production(synced: SyncReport, generated: Settings) -> None:
    with connect(generated.db_url(PROD_DB)) as prod:
        total = prod.execute("select count(*) from ops.query_ticket").fetchone()[0]  # type: ignore[index]
        personal = prod.execute("select count(*) from ops.query_ticket where request_text like '%病案号%'").fetchone()[
            0
        ]  # type: ignore[index]
    with connect(generated.db_url(EVAL_DB)) as ev:
        synced_tickets = ev.execute("select count(*) from ops.query_ticket").fetchone()[0]  # type: ignore[index]
    assert personal > 0
    assert synced_tickets == total - personal


def test_key_never_travels_to_prod(synced: SyncReport, generated: Settings) -> None:
    from evalpkg.services.postgres import paths

    log = paths(generated).log.read_text(errors="ignore")
    assert "SELECT" in log and "his.t_lab_result" in log  # prod's statements are being logged
    assert current_key(generated).hex() not in log


def test_key_never_reaches_dbt_artifacts(synced: SyncReport, generated: Settings) -> None:
    key_hex = current_key(generated).hex()
    target, logs = dbt.target_dir(generated), dbt.log_dir(generated)  # where the sync's dbt wrote
    assert (target / "manifest.json").is_file() and (logs / "dbt.log").is_file()
    for path in [*target.rglob("*"), *logs.rglob("*")]:
        if path.is_file() and path.suffix in {".sql", ".json", ".txt", ".log"}:
            assert key_hex not in path.read_text(errors="ignore"), path


def test_the_test_world_is_de_identified_under_the_key_the_session_prints(
    synced: SyncReport, generated: Settings
) -> None:
    """A check that fails for some keys only is rerun under the failing one with EVALPKG_TEST_KEY."""
    assert current_key(generated) == SESSION_KEY
