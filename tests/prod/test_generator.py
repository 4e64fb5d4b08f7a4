"""The simulated production HIS: determinism, clinical consistency, and the benchmark's traps."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import psycopg
import pytest

from evalpkg.db import connect
from evalpkg.errors import ConfigError
from evalpkg.prod.catalog import departments
from evalpkg.prod.generator import draw, generate
from evalpkg.settings import PROD_DB, Settings

CHECKSUM = "select md5(string_agg(t::text, '|' order by t::text)) from his.{} t"


def _one(conn: psycopg.Connection, query: str) -> object:
    row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


@pytest.fixture(scope="module")
def prod(generated: Settings) -> Iterator[psycopg.Connection]:
    with connect(generated.db_url(PROD_DB)) as conn:
        yield conn


def test_same_seed_same_database_other_seed_differs(settings: Settings) -> None:
    url = settings.db_url("postgres")
    with connect(url) as conn:
        conn.execute("drop database if exists gen_check")
        conn.execute("create database gen_check")
    other = settings.db_url("gen_check")
    sums = []
    for seed in (5, 5, 6):
        generate(other, 150, seed)
        with connect(other) as conn:
            sums.append(tuple(_one(conn, CHECKSUM.format(t)) for t in ("t_patient_info", "t_lab_result")))
    assert sums[0] == sums[1]
    assert sums[0][0] != sums[2][0] and sums[0][1] != sums[2][1]


@pytest.mark.parametrize("patients", [99, 100_001])
def test_patient_count_outside_range_is_rejected(settings: Settings, patients: int) -> None:
    with pytest.raises(ConfigError, match="--patients"):
        generate(settings.db_url("gen_check"), patients, 1)


def test_diabetics_have_diabetic_hba1c_and_treatment(prod: psycopg.Connection) -> None:
    rows = prod.execute("""
        with dm as (select distinct patient_id from his.t_diag_record where icd10_code like 'E11%')
        select (l.patient_id in (select patient_id from dm)) as diabetic, avg(l.result_value)
        from his.t_lab_result l where l.xmdm = 'HBA1C' and l.result_value is not null group by 1
    """).fetchall()
    means = {bool(d): float(m) for d, m in rows}
    assert means[True] > 7.0
    assert means.get(False, 5.4) < 6.2
    treated = prod.execute("""
        with dm as (select distinct patient_id from his.t_diag_record where icd10_code like 'E11%'),
        rx as (select distinct patient_id from his.t_med_order where ypdm in ('Y0001', 'Y0002', 'Y0003'))
        select avg(treated::int) filter (where diabetic), avg(treated::int) filter (where not diabetic)
        from (select p.patient_id in (select patient_id from rx) as treated,
                     p.patient_id in (select patient_id from dm) as diabetic
              from his.t_patient_info p) x
    """).fetchone()
    assert treated is not None
    # An undiagnosed diabetic (no E11 record kept) can still hold a metformin order.
    assert float(treated[0]) > 0.7 and float(treated[1]) < 0.1


def test_glucose_units_follow_the_data_dictionary(prod: psycopg.Connection) -> None:
    """mg/dL until 2021-06-30, mmol/L after, except results transcribed from outside reports, which
    stay mg/dL in every year: the unit column decides, as t_lab_result.unit's dictionary entry says."""
    rows = prod.execute("""
        select cysj >= '2021-07-01' as after, unit, count(*), avg(result_value) from his.t_lab_result
        where xmdm = 'GLU' group by 1, 2
    """).fetchall()
    by = {(after, unit): (int(n), float(m)) for after, unit, n, m in rows}
    assert set(by) == {(False, "mg/dL"), (True, "mg/dL"), (True, "mmol/L")}  # no mmol/L before the switch
    after_mgdl, after_mmol = by[(True, "mg/dL")][0], by[(True, "mmol/L")][0]
    assert 0.03 < after_mgdl / (after_mgdl + after_mmol) < 0.10
    assert 0.75 < (by[(False, "mg/dL")][1] / 18.0) / by[(True, "mmol/L")][1] < 1.33  # same population
    years = prod.execute(
        "select count(distinct extract(year from cysj)), count(distinct extract(year from cysj)) "
        "filter (where unit = 'mg/dL') from his.t_lab_result where xmdm = 'GLU'"
    ).fetchone()
    assert years is not None and years[0] == years[1] >= 6  # mg/dL in every year: a unit trap can bite in any
    dictionary = prod.execute(
        "select code_mapping from meta.data_dictionary where table_name = 't_lab_result' and column_name = 'unit'"
    ).fetchone()
    assert dictionary is not None and "外院报告" in dictionary[0] and "2021-06-30" in dictionary[0]


def test_registration_and_report_times_differ_from_visit_and_sample_times(prod: psycopg.Connection) -> None:
    """The time_semantics trap needs rows whose two time columns fall in different months."""
    visits = prod.execute("""
        select visit_type, avg((date_trunc('month', ghrq) <> date_trunc('month', ryrq))::int)
        from his.t_zy_visit group by 1
    """).fetchall()
    assert all(0.05 < float(share) < 0.4 for _, share in visits), visits
    labs = prod.execute(
        "select avg((date_trunc('month', report_time) <> date_trunc('month', cysj))::int) from his.t_lab_result"
    ).fetchone()
    assert labs is not None and 0.02 < float(labs[0]) < 0.2


def test_traps_exist(prod: psycopg.Connection) -> None:
    for table in ("t_patient_info", "t_zy_visit", "t_diag_record", "t_lab_result", "t_med_order"):
        assert _one(prod, f"select count(*) from his.{table} where is_deleted = 1") > 0, table
    assert (
        _one(
            prod,
            "select count(*) from his.t_lab_result where result_value is null and bz is not null",
        )
        > 0
    )
    assert _one(prod, "select count(*) from his.t_lab_result where bgzt = 'C'") > 0
    assert _one(prod, "select count(*) from his.t_med_order where zfbz = 1") > 0
    # (a stay still open at production's own "now" is chance in the small world, about 3 expected; the eval
    # DB's open stays are the states at its "now", held for every key in tests/sync/test_world_near_now.py)
    assert _one(prod, "select count(*) from his.t_zy_visit where ksdm = '0199'") > 0
    assert (
        _one(
            prod,
            "select count(*) from his.t_diag_record d join his.t_patient_info p using (patient_id) "
            "where position(p.brxm in d.zdmc) > 0",
        )
        > 0
    )
    af_untreated = """
        select count(distinct d.patient_id) from his.t_diag_record d where d.icd10_code like 'I48%'
        and not exists (select 1 from his.t_med_order o
                        where o.patient_id = d.patient_id and o.ypdm in ('Y0004', 'Y0005'))
    """
    assert _one(prod, af_untreated) > 0


def test_time_columns_are_ordered_and_stays_plausible(prod: psycopg.Connection) -> None:
    assert _one(prod, "select count(*) from his.t_zy_visit where ghrq > ryrq or cyrq < ryrq") == 0
    assert (
        _one(
            prod,
            "select count(*) from his.t_lab_result where cysj > exec_time or exec_time > report_time",
        )
        == 0
    )
    median = float(
        _one(
            prod,
            "select percentile_cont(0.5) within group (order by zyts) from his.t_zy_visit where visit_type = 'ZY'",
        )
    )
    assert 3 <= median <= 12
    assert _one(prod, "select count(*) from his.t_zy_visit where visit_type = 'MZ' and zyts is not null") == 0


def test_identifiers_look_real(prod: psycopg.Connection) -> None:
    bad = prod.execute(r"""
        select count(*) filter (where sfzh !~ '^\d{17}[\dX]$'), count(*) filter (where lxdh !~ '^1[3-9]\d{9}$'),
               count(*) filter (where substr(sfzh, 7, 8) <> to_char(csrq, 'YYYYMMDD'))
        from his.t_patient_info
    """).fetchone()
    assert bad == (0, 0, 0)


def test_the_endoscopy_centre_takes_half_of_gastroenterologys_outpatients_from_its_opening() -> None:
    """A department split (reference.json: 0107 opened 2024-07-01, takes 0104's outpatients at share 0.5):
    the organisational change behind anomaly_dept_outpatient_fall_2024 and anomaly_dept_split_outpatients."""
    centre = next(d for d in departments() if "opened" in d)
    v = draw(20_000, 7).visits
    opened = np.datetime64(centre["opened"], "s")
    own = v.dept == centre["ksdm"]
    assert own.any() and not (own & (v.admitted < opened)).any(), "no visit before it opened"
    assert not (own & v.inpatient).any(), "outpatients only"
    after = ~v.inpatient & (v.admitted >= opened) & np.isin(v.dept, [centre["ksdm"], centre["takes_outpatients_of"]])
    share = (own & after).sum() / after.sum()
    assert after.sum() > 300 and abs(share - centre["share"]) < 0.1, (int(after.sum()), share)
    before = ~v.inpatient & (v.admitted < opened) & (v.dept == centre["takes_outpatients_of"])
    assert before.sum() > 300, "Gastroenterology saw its outpatients before"
