"""Sync throughput at 100,000 patients against the floor: a plain CREATE TABLE AS SELECT of the
same rows across the same postgres_fdw link, with no de-identification and no dbt.

Runs on a throwaway embedded cluster (its own state dir and port), so it never touches yours:

    .venv/bin/python benchmarks/sync_throughput.py [--patients 100000]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from evalpkg.db import connect
from evalpkg.prod.generator import generate
from evalpkg.services import bootstrap, postgres
from evalpkg.settings import EVAL_DB, PROD_DB, SYNC_ROLE, Settings
from evalpkg.sync.dbt import run_dbt
from evalpkg.sync.runner import EVAL_TABLES, prepare
from evalpkg.sync.validate import validate_eval_db
from tests.conftest import free_port, make_state_dir

# The columns each mart carries, copied raw: what the sync moves, minus the de-identification.
FLOOR_COLUMNS = {
    "t_patient_info": "patient_id, csrq, xb, hyzk, jdrq",
    "t_zy_visit": "visit_id, patient_id, visit_type, ksdm, ghrq, ryrq, cyrq, zyts, cyfs",
    "t_diag_record": "diag_id, visit_id, patient_id, icd10_code, zdmc, zdlx, zdsj",
    "t_lab_result": "lab_id, visit_id, patient_id, xmdm, xmmc, result_value, unit, ref_range, result_flag, "
    "bgzt, bz, cysj, exec_time, report_time",
    "t_med_order": "order_id, visit_id, patient_id, ypdm, ypmc, jl, jldw, pc, gytj, yzlx, kssj, jssj, zfbz",
}


def floor_seconds(settings: Settings) -> float:
    with connect(settings.db_url(EVAL_DB)) as conn:
        conn.execute(f"set role {SYNC_ROLE}")
        conn.execute("drop schema if exists bench_floor cascade")
        conn.execute("create schema bench_floor")
        t0 = time.perf_counter()
        for table, cols in FLOOR_COLUMNS.items():
            conn.execute(f"create table bench_floor.{table} as select {cols} from src_his.{table} where is_deleted = 0")
        elapsed = time.perf_counter() - t0
        conn.execute("drop schema bench_floor cascade")
    return elapsed


def plain_sql_seconds(settings: Settings) -> float:
    """The same de-identifying SELECTs dbt compiled, run as plain CTAS one after another."""
    compiled = settings.dbt_project_dir / "target" / "compiled" / "ehr_deid" / "models"
    with connect(settings.db_url(EVAL_DB)) as conn:
        conn.execute(f"set role {SYNC_ROLE}")
        conn.execute("drop schema if exists bench_plain cascade")
        conn.execute("create schema bench_plain")
        t0 = time.perf_counter()
        paths = [compiled / "staging" / "stg_his__visit_keys.sql"]
        paths += [compiled / "marts" / "emr" / f"{table}.sql" for table in FLOOR_COLUMNS]
        for path in paths:
            conn.execute(f"create table bench_plain.{path.stem} as {path.read_text()}")
        elapsed = time.perf_counter() - t0
        conn.execute("drop schema bench_plain cascade")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patients", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    state = make_state_dir()
    settings = Settings(state_dir=state, pg_port=free_port(), mlflow_port=free_port())
    try:
        postgres.init_cluster(settings)
        postgres.start(settings)
        postgres.ensure_databases(settings)
        bootstrap.ensure_roles(settings)
        bootstrap.ensure_eval_db(settings)
        bootstrap.set_key(settings)

        gen = generate(settings.db_url(PROD_DB), args.patients, args.seed)
        prepare(settings)
        with connect(settings.db_url(PROD_DB)) as conn:
            counts = [
                conn.execute(f"select count(*) from his.{t} where is_deleted = 0").fetchone() for t in EVAL_TABLES
            ]
        live = sum(int(c[0]) for c in counts if c)

        floors = [floor_seconds(settings) for _ in range(2)]
        run_dbt(settings, "seed")  # seeds are tiny; keep them out of the model timing
        t0 = time.perf_counter()
        run_dbt(settings, "run", "--full-refresh")
        models = time.perf_counter() - t0
        floors.append(floor_seconds(settings))
        plain = min(plain_sql_seconds(settings) for _ in range(2))
        t1 = time.perf_counter()
        run_dbt(settings, "build")
        build = time.perf_counter() - t1
        t2 = time.perf_counter()
        validate_eval_db(settings)
        gx = time.perf_counter() - t2
        t3 = time.perf_counter()
        run_dbt(settings, "run")
        incremental = time.perf_counter() - t3
        floor = min(floors)

        print(f"patients                         {args.patients:>12,}")
        print(
            f"prod rows generated              {gen.total_rows:>12,}  in {gen.seconds:6.1f}s  "
            f"= {gen.total_rows / gen.seconds:>10,.0f} rows/s"
        )
        print(f"eval rows (5 core tables)        {live:>12,}")
        print(f"floor: CTAS across the fdw link  {floor:>10.1f}s   = {live / floor:>10,.0f} rows/s")
        print(
            f"same de-id SQL as plain CTAS     {plain:>10.1f}s   = {live / plain:>10,.0f} rows/s  "
            f"ratio to floor {plain / floor:.2f}x (cost of keyed hashing)"
        )
        print(
            f"sync models (dbt run, full)      {models:>10.1f}s   = {live / models:>10,.0f} rows/s  "
            f"ratio to floor {models / floor:.2f}x, to plain de-id SQL {models / plain:.2f}x"
        )
        print(f"sync incremental re-run          {incremental:>10.1f}s   ratio to full run {incremental / models:.2f}x")
        print(f"dbt build (incremental + tests)  {build:>10.1f}s")
        print(f"GX validation                    {gx:>10.1f}s")
        print(f"evalpkg sync total (build + GX)  {build + gx:>10.1f}s   ratio to floor {(build + gx) / floor:.2f}x")
    finally:
        postgres.stop(settings)
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
