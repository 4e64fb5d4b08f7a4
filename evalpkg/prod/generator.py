"""`evalpkg prod generate`: build the simulated production HIS database and bulk-load it."""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from importlib import resources

import numpy as np
import psycopg

from evalpkg.db import connect
from evalpkg.errors import ConfigError
from evalpkg.prod import copy_writer as cw
from evalpkg.prod.catalog import conditions, departments, drugs, lab_items, reference
from evalpkg.prod.clinical import Labs, Orders, generate_labs, generate_orders
from evalpkg.prod.encounters import (
    CHECKUP_ICD,
    Diagnoses,
    Visits,
    generate_diagnoses,
    generate_visits,
)
from evalpkg.prod.patients import Patients, generate_patients
from evalpkg.prod.terminal import drop_after_death, drop_after_end
from evalpkg.prod.tickets import Ticket, generate_tickets
from evalpkg.progress import Progress, quiet

GENERATOR_VERSION = "3"  # 2: production runs SNAPSHOT_LAG past the snapshot; 3: the endoscopy centre (2024-07)
MIN_PATIENTS, MAX_PATIENTS = 100, 100_000
DEFAULT_AS_OF = date(2026, 10, 31)  # the eval snapshot's pinned "now" (meta.his_info.as_of)
# Production's own "now" is the largest date shift (dbt macro shift_days: 52 weeks) past the snapshot's,
# so every patient, however far the shift moves it back, is whole up to the snapshot's "now".
SNAPSHOT_LAG = timedelta(days=364)
DATA_START = date(2019, 1, 1)
INDEXES = [
    "create index on his.t_zy_visit (patient_id)",
    "create index on his.t_diag_record (visit_id)",
    "create index on his.t_lab_result (visit_id)",
    "create index on his.t_med_order (visit_id)",
]


@dataclass
class GenerateReport:
    rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())


def _resource_text(name: str) -> str:
    return resources.files("evalpkg.prod").joinpath(name).read_text(encoding="utf-8")


def _update_time(*times: np.ndarray) -> np.ndarray:
    """Last event of the row; NaT events are ignored."""
    stacked = np.stack([np.where(np.isnat(t), np.datetime64("1970-01-01T00:00:00"), t) for t in times])
    last: np.ndarray = stacked.max(axis=0) + np.timedelta64(5, "m")
    return last


def _flag(values: np.ndarray) -> np.ndarray:
    return values.astype(np.int8).astype(str)


def _load_patients(conn: psycopg.Connection, p: Patients, v: Visits) -> int:
    # The record is created the day before the first registration that was not voided (any, if all were).
    never = np.datetime64("2100-01-01T00:00:00", "s")
    first_kept, first_any = np.full(len(p), never), np.full(len(p), never)
    np.minimum.at(first_kept, v.patient[~v.deleted], v.registered[~v.deleted])
    np.minimum.at(first_any, v.patient, v.registered)
    first_visit = np.where(first_kept < never, first_kept, first_any)
    created = first_visit - np.timedelta64(1, "D")
    return cw.copy_columns(
        conn,
        "his.t_patient_info",
        {
            "patient_id": p.patient_id.tolist(),
            "brxm": p.name,
            "sfzh": p.id_card,
            "lxdh": p.phone,
            "jtzz": p.address,
            "csrq": cw.fmt_date(p.birth),
            "xb": cw.fmt_int(p.sex),
            "hyzk": cw.fmt_int(p.marital),
            "jdrq": cw.fmt_time(created),
            "update_time": cw.fmt_time(created + np.timedelta64(10, "m")),
            "is_deleted": _flag(p.deleted),
        },
    )


def _load_visits(conn: psycopg.Connection, p: Patients, v: Visits) -> int:
    los = np.where(v.los_days >= 0, v.los_days.astype(float), np.nan)
    way = np.where(v.discharge_way > 0, v.discharge_way.astype(float), np.nan)
    return cw.copy_columns(
        conn,
        "his.t_zy_visit",
        {
            "visit_id": v.visit_id.tolist(),
            "patient_id": p.patient_id[v.patient].tolist(),
            "visit_type": np.where(v.inpatient, "ZY", "MZ").tolist(),
            "ksdm": v.dept.tolist(),
            "ghrq": cw.fmt_time(v.registered),
            "ryrq": cw.fmt_time(v.admitted),
            "cyrq": cw.fmt_time(v.discharged),
            "zyts": cw.fmt_num(los, 0),
            "cyfs": cw.fmt_num(way, 0),
            "update_time": cw.fmt_time(_update_time(v.admitted, v.discharged)),
            "is_deleted": _flag(v.deleted),
        },
    )


def _load_diagnoses(conn: psycopg.Connection, p: Patients, v: Visits, d: Diagnoses) -> int:
    conds = conditions()
    icd = np.array([CHECKUP_ICD[0] if c < 0 else conds[c]["icd10"] for c in d.condition])
    return cw.copy_columns(
        conn,
        "his.t_diag_record",
        {
            "diag_id": cw.fmt_int(np.arange(1, len(icd) + 1)),
            "visit_id": v.visit_id[d.visit].tolist(),
            "patient_id": p.patient_id[v.patient[d.visit]].tolist(),
            "icd10_code": icd.tolist(),
            "zdmc": d.text,
            "zdlx": np.where(d.primary, "1", "2").tolist(),
            "zdsj": cw.fmt_time(d.time),
            "update_time": cw.fmt_time(_update_time(d.time)),
            "is_deleted": _flag(d.deleted),
        },
    )


def _load_labs(conn: psycopg.Connection, p: Patients, v: Visits, lab: Labs) -> int:
    items = lab_items()  # once: this runs per lab row, a million times at full scale
    names = {k: item["xmmc"] for k, item in items.items()}
    digits = np.array([0 if u == "mg/dL" else items[x]["digits"] for x, u in zip(lab.item, lab.unit, strict=True)])
    return cw.copy_columns(
        conn,
        "his.t_lab_result",
        {
            "lab_id": cw.fmt_int(np.arange(1, len(lab.item) + 1)),
            "visit_id": v.visit_id[lab.visit].tolist(),
            "patient_id": p.patient_id[v.patient[lab.visit]].tolist(),
            "xmdm": lab.item.tolist(),
            "xmmc": [names[x] for x in lab.item],
            "result_value": cw.fmt_num(lab.value, digits),
            "unit": [u or cw.NULL for u in lab.unit],
            "ref_range": lab.ref_range.tolist(),
            "result_flag": [f or cw.NULL for f in lab.flag],
            "bgzt": np.where(lab.cancelled, "C", "F").tolist(),
            "bz": [b or cw.NULL for b in lab.note],
            "cysj": cw.fmt_time(lab.sampled),
            "exec_time": cw.fmt_time(lab.executed),
            "report_time": cw.fmt_time(lab.reported),
            "update_time": cw.fmt_time(_update_time(lab.executed, lab.reported)),
            "is_deleted": _flag(lab.deleted),
        },
    )


def _load_orders(conn: psycopg.Connection, p: Patients, v: Visits, o: Orders) -> int:
    catalog = drugs()
    rows = [catalog[d] for d in o.drug]
    return cw.copy_columns(
        conn,
        "his.t_med_order",
        {
            "order_id": cw.fmt_int(np.arange(1, len(rows) + 1)),
            "visit_id": v.visit_id[o.visit].tolist(),
            "patient_id": p.patient_id[v.patient[o.visit]].tolist(),
            "ypdm": [r["ypdm"] for r in rows],
            "ypmc": [r["ypmc"] for r in rows],
            "jl": cw.fmt_num(o.dose, 2),
            "jldw": [r["unit"] for r in rows],
            "pc": [r["freq"] for r in rows],
            "gytj": [r["route"] for r in rows],
            "yzlx": np.where(o.long_term, "1", "2").tolist(),
            "kssj": cw.fmt_time(o.start),
            "jssj": cw.fmt_time(o.stop),
            "zfbz": _flag(o.voided),
            "update_time": cw.fmt_time(_update_time(o.start, o.stop)),
            "is_deleted": _flag(o.deleted),
        },
    )


def _load_reference(conn: psycopg.Connection, as_of: date) -> None:
    stamp = datetime(2018, 12, 1)
    groups = reference()["department_groups"]
    with conn.cursor() as cur:
        cur.executemany(
            "insert into his.dict_dept values (%s,%s,%s,%s,%s,1,%s,%s,%s)",
            [
                (
                    d["ksdm"],
                    d["ksmc"],
                    d["ksmc_en"],
                    d["parent"],
                    groups[d["parent"]],
                    1 if "retired_after" in d else 0,
                    d.get("retired_after"),
                    stamp,
                )
                for d in departments()
            ],
        )
        cur.executemany(
            "insert into his.dict_lab_item values (%s,%s,%s,%s,%s,%s,%s,%s)",
            [
                (
                    x["xmdm"],
                    x["xmmc"],
                    x["xmmc_en"],
                    x["unit"] or None,
                    x["low"],
                    x["high"],
                    x["specimen"],
                    stamp,
                )
                for x in lab_items().values()
            ],
        )
        cur.executemany(
            "insert into his.dict_drug values (%s,%s,%s,%s,%s,%s)",
            [(d["ypdm"], d["ypmc"], d["ypmc_en"], d["atc"], d["category"], stamp) for d in drugs().values()],
        )
        rows = list(csv.DictReader(_resource_text("data_dictionary.csv").splitlines()))
        cur.executemany(
            "insert into meta.data_dictionary values (%s,%s,%s,%s,%s,%s,%s,%s)",
            [tuple(r[k] or None for k in r) for r in rows],
        )
        examples = json.loads(_resource_text("sql_examples.json"))
        cur.executemany(
            "insert into meta.sql_examples values (%s,%s,%s,%s)",
            [(i + 1, e["question"], e["question_en"], e["sql"]) for i, e in enumerate(examples)],
        )


@dataclass
class World:
    """Everything one seed draws, before loading."""

    patients: Patients
    visits: Visits
    diagnoses: Diagnoses
    labs: Labs
    orders: Orders
    tickets: list[Ticket]
    dropped_after_death: int  # visits drawn after their patient's death, and left out


def draw(patients: int, seed: int, as_of: date = DEFAULT_AS_OF) -> World:
    """The simulated HIS in memory: deterministic per seed, nothing touches a database."""
    rng = np.random.default_rng(seed)
    prod_now = as_of + SNAPSHOT_LAG
    p = generate_patients(rng, patients, as_of)
    v = generate_visits(rng, p, DATA_START, prod_now)
    d = generate_diagnoses(rng, p, v)
    lab = generate_labs(rng, p, v, prod_now)
    orders = generate_orders(rng, p, v)
    live = ~p.deleted
    named = list(zip(np.array(p.name, dtype=object)[live].tolist(), p.patient_id[live].tolist(), strict=True))
    tickets = generate_tickets(rng, as_of, per_month=max(8, min(40, patients // 2500)), patients=named)
    # Visits are drawn without knowing of deaths, so trimmed after every draw: this draws nothing.
    v, d, lab, orders, dropped = drop_after_death(v, d, lab, orders, len(p))
    d, lab, orders = drop_after_end(v, d, lab, orders, np.datetime64(prod_now, "s") + np.timedelta64(86399, "s"))
    return World(p, v, d, lab, orders, tickets, dropped)


def generate(
    url: str,
    patients: int,
    seed: int,
    as_of: date = DEFAULT_AS_OF,
    progress: Progress = quiet,
) -> GenerateReport:
    if not MIN_PATIENTS <= patients <= MAX_PATIENTS:
        raise ConfigError(f"--patients: {patients} is outside {MIN_PATIENTS}..{MAX_PATIENTS}")
    t0 = time.perf_counter()
    progress(f"generating {patients} patients (seed {seed}, as of {as_of})")
    world = draw(patients, seed, as_of)
    p, v, d, lab, orders = world.patients, world.visits, world.diagnoses, world.labs, world.orders
    progress(f"left out {world.dropped_after_death} visits drawn after their patient's death")
    report = GenerateReport()
    with connect(url, autocommit=False) as conn:
        conn.execute(_resource_text("schema.sql"))
        _load_reference(conn, as_of)
        loaders: list[tuple[str, Callable[[], int]]] = [
            ("t_patient_info", lambda: _load_patients(conn, p, v)),
            ("t_zy_visit", lambda: _load_visits(conn, p, v)),
            ("t_diag_record", lambda: _load_diagnoses(conn, p, v, d)),
            ("t_lab_result", lambda: _load_labs(conn, p, v, lab)),
            ("t_med_order", lambda: _load_orders(conn, p, v, orders)),
        ]
        for table, load in loaders:
            report.rows[table] = load()
            progress(f"loaded his.{table}: {report.rows[table]:,} rows")
        with conn.cursor() as cur:
            cur.executemany(
                "insert into ops.query_ticket values (%s,%s,%s,%s,%s,%s,%s)",
                [
                    (
                        t.ticket_id,
                        t.created_at,
                        t.ksdm,
                        t.requester,
                        t.request_text,
                        t.sql_text,
                        t.status,
                    )
                    for t in world.tickets
                ],
            )
            cur.execute(
                "insert into meta.his_info values (%s,%s,%s,%s,now())",
                (as_of, seed, patients, GENERATOR_VERSION),
            )
        report.rows["query_ticket"] = len(world.tickets)
        for ddl in INDEXES:
            conn.execute(ddl)
        conn.commit()
    with connect(url) as conn:
        conn.execute("analyze")
    report.seconds = time.perf_counter() - t0
    return report
