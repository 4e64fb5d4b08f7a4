"""Template parameters, grounded in the eval DB (real departments, lab items, drugs, conditions)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import date
from types import SimpleNamespace
from typing import Any

import psycopg

from evalpkg.errors import ConfigError, DataError
from evalpkg.prod.catalog import conditions

STABLE_UNIT_LABS = ("HBA1C", "CREA", "K", "NA", "ALT", "WBC", "HGB", "LDLC", "TNI", "BNP")
YEARS = tuple(range(2020, 2026))
FASTING_GLUCOSE_CUTOFFS = ((5.6, 100), (6.1, 110), (7.0, 126))  # mmol/L, mg/dL
# 2-hour (OGTT) and random-glucose cut-offs: older releases used them on fasting glucose. They still
# render those releases' tasks; no new task is made with them.
RETIRED_GLUCOSE_CUTOFFS = ((7.8, 140), (11.1, 200))
RETIRED_GLUCOSE_WHY = "a 2-hour or random-glucose cut-off, not a fasting one (clinical review)"
MONTH_EN = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


@dataclass(frozen=True)
class Value:
    """One parameter value: the key recorded in provenance and the object templates format."""

    key: str
    obj: Any
    retired: str = ""  # why no new task may use it (old releases keep rendering with it)


def mid_sentence(name: str) -> str:
    """A dictionary's English name as a clinician types it mid-sentence: "Knee osteoarthritis" -> "knee
    osteoarthritis", "Metformin" -> "metformin"; abbreviations (HbA1c, LDL cholesterol, COPD) stay as
    they are. Department names are proper names and do not go through this."""
    first = name.split(" ", 1)[0]
    return name[:1].lower() + name[1:] if first[1:] == first[1:].lower() else name


def _month(year: int, month: int) -> SimpleNamespace:
    start = date(year, month, 1)
    end = date(year + (month == 12), month % 12 + 1, 1)
    prev = date(year - (month == 1), (month - 2) % 12 + 1, 1)
    return SimpleNamespace(
        start=start.isoformat(),
        end=end.isoformat(),
        label=f"{year}-{month:02d}",
        zh=f"{year}年{month}月",
        en=f"{MONTH_EN[month - 1]} {year}",
        prev_start=prev.isoformat(),
    )


def _quarter(year: int, n: int) -> SimpleNamespace:
    start = date(year, 3 * n - 2, 1)
    end = date(year + (n == 4), (3 * n) % 12 + 1, 1)
    return SimpleNamespace(
        year=year, n=n, start=start.isoformat(), end=end.isoformat(), zh=f"{year}年第{n}季度", en=f"Q{n} {year}"
    )


def domains(conn: psycopg.Connection) -> dict[str, list[Value]]:
    """Every parameter kind with all its values, read from the eval DB where it lives there."""
    depts = conn.execute(
        "select d.ksdm, d.ksmc, d.ksmc_en from emr.dict_dept d where d.ty_bz = 0 and d.lcks_bz = 1 "
        "and exists (select 1 from emr.t_zy_visit v where v.ksdm = d.ksdm) order by d.ksdm"
    ).fetchall()
    labs = conn.execute(
        "select xmdm, xmmc, xmmc_en, coalesce(dw, ''), ckz_low, ckz_high from emr.dict_lab_item "
        "where xmdm = any(%s) order by xmdm",
        (list(STABLE_UNIT_LABS),),
    ).fetchall()
    drugs = conn.execute("select ypdm, ypmc, ypmc_en, ypfl from emr.dict_drug order by ypdm").fetchall()
    present = {r[0] for r in conn.execute("select distinct left(icd10_code, 3) from emr.t_diag_record")}
    if not depts or not labs or not drugs:
        raise ConfigError("eval DB has no departments, lab items or drugs: run `evalpkg sync` first")
    dept = [Value(k, SimpleNamespace(ksdm=k, ksmc=zh, en=en)) for k, zh, en in depts]
    conds = [c for c in conditions() if c["icd10"][:3] in present]
    return {
        "dept": dept,
        "dept2": dept,
        "lab": [
            Value(x, SimpleNamespace(xmdm=x, xmmc=zh, en=mid_sentence(en), unit=u, low=float(lo), high=float(hi)))
            for x, zh, en, u, lo, hi in labs
        ],
        "drug": [
            Value(k, SimpleNamespace(ypdm=k, ypmc=zh, en=mid_sentence(en), category=cat)) for k, zh, en, cat in drugs
        ],
        "cond": [
            Value(c["icd10"][:3], SimpleNamespace(icd=c["icd10"][:3], name=c["name"], en=mid_sentence(c["name_en"])))
            for c in conds
        ],
        "year": [Value(str(y), y) for y in YEARS],
        "quarter": [Value(f"{y}Q{n}", _quarter(y, n)) for y in YEARS for n in range(1, 5)],
        "month": [Value(f"{y}-{m:02d}", _month(y, m)) for y in YEARS for m in range(1, 13)],
        "months_back": [Value(str(m), m) for m in (3, 6, 12)],
        "hba1c": [Value(str(t), t) for t in (6.5, 7.0, 7.5, 8.0, 9.0)],
        # fasting cut-offs (GLU is fasting plasma glucose): 5.6 / 6.1 impaired fasting glucose (ADA / WHO,
        # China), 7.0 diabetes; 7.8 and 11.1 are the 2-hour and random-glucose cut-offs, not fasting ones
        "glucose": [Value(str(m), SimpleNamespace(mmol=m, mgdl=g)) for m, g in FASTING_GLUCOSE_CUTOFFS]
        + [Value(str(m), SimpleNamespace(mmol=m, mgdl=g), RETIRED_GLUCOSE_WHY) for m, g in RETIRED_GLUCOSE_CUTOFFS],
        "age_group": [
            Value(c, SimpleNamespace(code=c, zh=zh, en=en))
            for c, zh, en in (
                ("18-44", "18到44岁", "aged 18-44"),
                ("45-64", "45到64岁", "aged 45-64"),
                ("65-89", "65到89岁", "aged 65-89"),
                ("90+", "90岁及以上", "aged 90 or over"),
            )
        ],
        "sex": [
            Value("1", SimpleNamespace(code=1, zh="男", en="male")),
            Value("2", SimpleNamespace(code=2, zh="女", en="female")),
        ],
        "top_n": [Value(str(n), n) for n in (3, 5, 10)],
        "los_days": [Value(str(n), n) for n in (7, 10, 14)],
    }


def combinations(domain: dict[str, list[Value]], names: list[str]) -> list[dict[str, Value]]:
    """All assignments of the named parameters new tasks may use (dept and dept2 always differ; no
    retired value)."""
    unknown = [n for n in names if n not in domain]
    if unknown:
        raise ConfigError(f"unknown template parameter(s): {', '.join(unknown)}")
    combos = []
    for values in itertools.product(*([v for v in domain[n] if not v.retired] for n in names)):
        combo = dict(zip(names, values, strict=True))
        if "dept" in combo and "dept2" in combo and combo["dept"].key == combo["dept2"].key:
            continue
        combos.append(combo)
    return combos


def chosen(domain: dict[str, list[Value]], params: dict[str, str], owner: str = "") -> dict[str, Value]:
    """The values a task's recorded parameters name (provenance.params), retired ones included; owner (the
    task's id) starts the error."""
    out = {}
    for name, key in params.items():
        value = next((v for v in domain.get(name, []) if v.key == key), None)
        if value is None:
            raise DataError(f"{owner}{': ' if owner else ''}parameter {name}={key!r} is not in this eval DB")
        out[name] = value
    return out
