"""Patients: demographics, identifiers, and latent clinical profiles (correlated conditions)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import numpy as np

from evalpkg.prod.catalog import conditions, reference

# Cardiometabolic conditions share one latent risk factor, which correlates them.
CARDIOMETABOLIC = {"t2dm", "htn", "af", "chd", "hf", "ckd", "stroke", "hyperlipidemia"}
RISK_LOADING = 0.9
ID_CHECK_WEIGHTS = np.array([7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2])
ID_CHECK_CHARS = "10X98765432"


@dataclass
class Patients:
    patient_id: np.ndarray  # str
    name: list[str]
    id_card: list[str]
    phone: list[str]
    address: list[str]
    birth: np.ndarray  # datetime64[D]
    age: np.ndarray  # years at as_of
    sex: np.ndarray  # GB/T 2261.1 code
    marital: np.ndarray
    has: np.ndarray  # bool [n, n_conditions]
    hba1c_level: np.ndarray  # personal HbA1c mean (%)
    anticoagulant: np.ndarray  # 0 none, 1 warfarin, 2 rivaroxaban (AF patients only)
    deleted: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.patient_id)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    result: np.ndarray = 1.0 / (1.0 + np.exp(-x))
    return result


def _id_card(region: str, birth: np.datetime64, seq: int) -> str:
    body = region + str(birth).replace("-", "") + f"{seq:03d}"
    check = ID_CHECK_CHARS[int(np.dot(ID_CHECK_WEIGHTS, [int(c) for c in body])) % 11]
    return body + check


def _draw_conditions(rng: np.random.Generator, age: np.ndarray, sex: np.ndarray, child: np.ndarray) -> np.ndarray:
    """bool [n, n_conditions]: prevalence by age and sex; cardiometabolic ones share one latent risk."""
    n = len(age)
    risk = rng.normal(0, 1, n)
    conds = conditions()
    has = np.zeros((n, len(conds)), dtype=bool)
    for j, c in enumerate(conds):
        p = np.clip(c["prevalence"] + c["age_slope"] * (age - 50), 0.002, 0.9)
        logit = np.log(p / (1 - p))
        if c["key"] in CARDIOMETABOLIC:
            logit = logit + RISK_LOADING * risk - RISK_LOADING**2 / 2
        p = _sigmoid(logit)
        if c.get("female_only"):
            p = np.where(sex == 2, p, 0.0)
        lo, hi = c.get("age_range", [0, 200])
        p = np.where((age >= lo) & (age <= hi), p, 0.0)
        if c["key"] not in {"uri", "pneumonia"}:
            p = np.where(child, p * 0.05, p)
        has[:, j] = rng.random(n) < p
    return has


def _draw_hba1c_levels(rng: np.random.Generator, has: np.ndarray) -> np.ndarray:
    """Each patient's own HbA1c mean (%): diabetic or normal."""
    n = len(has)
    t2dm = has[:, [c["key"] for c in conditions()].index("t2dm")]
    levels: np.ndarray = np.where(
        t2dm,
        np.clip(rng.normal(7.6, 1.2, n), 5.8, 13.5),
        np.clip(rng.normal(5.4, 0.3, n), 4.2, 6.2),
    )
    return levels


def _draw_patient_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    ids = rng.choice(900_000_000, size=n, replace=False) + 100_000_000
    patient_id: np.ndarray = np.char.add("1", ids.astype(str))
    return patient_id


def _draw_names(rng: np.random.Generator, n: int) -> list[str]:
    """A surname and one or two given characters."""
    surnames, given = reference()["surnames"], reference()["given_chars"]
    s_idx = rng.integers(0, len(surnames), n)
    g_len = rng.choice(np.array([1, 2]), n, p=[0.3, 0.7])
    g_idx = rng.integers(0, len(given), (n, 2))
    return [surnames[s_idx[i]] + "".join(given[g] for g in g_idx[i, : g_len[i]]) for i in range(n)]


def _draw_id_cards(rng: np.random.Generator, region_codes: list[str], birth: np.ndarray) -> list[str]:
    seq = rng.integers(0, 1000, len(region_codes))
    return [_id_card(code, birth[i], int(seq[i])) for i, code in enumerate(region_codes)]


def _draw_phones(rng: np.random.Generator, n: int) -> list[str]:
    phones: list[str] = np.char.add(
        rng.choice(np.array(["13", "15", "17", "18", "19"]), n),
        rng.integers(100_000_000, 999_999_999, n).astype(str),
    ).tolist()
    return phones


def _draw_addresses(rng: np.random.Generator, region_names: list[str]) -> list[str]:
    n = len(region_names)
    streets = reference()["streets"]
    st_idx = rng.integers(0, len(streets), n)
    house = rng.integers(1, 999, n)
    unit = rng.integers(1, 30, n)
    return [f"{region}{streets[st_idx[i]]}{house[i]}号{unit[i]}单元" for i, region in enumerate(region_names)]


def generate_patients(rng: np.random.Generator, n: int, as_of: date) -> Patients:
    child = rng.random(n) < 0.12
    age = np.where(child, rng.uniform(0.1, 14, n), np.clip(rng.normal(56, 18, n), 15, 103))
    birth = np.datetime64(as_of, "D") - (age * 365.25).astype("timedelta64[D]")
    sex = rng.choice(np.array([1, 2, 0, 9]), n, p=[0.485, 0.495, 0.01, 0.01])
    marital = np.where(
        age < 22,
        10,
        rng.choice(np.array([10, 20, 30, 40, 90]), n, p=[0.12, 0.72, 0.07, 0.05, 0.04]),
    )
    has = _draw_conditions(rng, age, sex, child)
    hba1c = _draw_hba1c_levels(rng, has)
    anticoag = rng.choice(np.array([0, 1, 2]), n, p=[0.38, 0.32, 0.30])

    # Identifiers and contact details; the region is drawn once for both the ID card and the address.
    patient_id = _draw_patient_ids(rng, n)
    names = _draw_names(rng, n)
    regions = reference()["regions"]
    region = [regions[r] for r in rng.integers(0, len(regions), n)]
    id_cards = _draw_id_cards(rng, [r["code"] for r in region], birth)
    phones = _draw_phones(rng, n)
    addresses = _draw_addresses(rng, [r["name"] for r in region])
    return Patients(
        patient_id=patient_id,
        name=names,
        id_card=id_cards,
        phone=phones,
        address=addresses,
        birth=birth,
        age=age,
        sex=sex,
        marital=marital,
        has=has,
        hba1c_level=hba1c,
        anticoagulant=anticoag,
        deleted=rng.random(n) < 0.01,
    )
