"""Lab results and medication orders, consistent with each patient's conditions."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import numpy as np

from evalpkg.prod.catalog import condition_index, drugs, lab_items
from evalpkg.prod.encounters import CHECKUP, HOUR, Visits
from evalpkg.prod.patients import Patients

ADMISSION_PANEL = ["WBC", "HGB", "GLU", "CREA", "K", "NA", "ALT"]
OUTPATIENT_PANELS = {
    "t2dm": [("HBA1C", 0.85), ("GLU", 0.9), ("CREA", 0.3)],
    "ckd": [("CREA", 0.95), ("K", 0.8), ("HGB", 0.5)],
    "htn": [("CREA", 0.3), ("K", 0.3)],
    "chd": [("LDLC", 0.7), ("TNI", 0.3)],
    "hf": [("BNP", 0.9), ("CREA", 0.5), ("K", 0.5)],
    "af": [("INR", 0.6)],
    "hyperlipidemia": [("LDLC", 0.9), ("ALT", 0.4)],
    "pneumonia": [("WBC", 0.9)],
    "uri": [("WBC", 0.6)],
}
CHECKUP_PANEL = [
    ("GLU", 0.9),
    ("HBA1C", 0.4),
    ("LDLC", 0.8),
    ("CREA", 0.8),
    ("ALT", 0.8),
    ("HGB", 0.8),
    ("WBC", 0.8),
]
REJECTED_NOTES = np.array(["标本溶血", "标本凝固", "标本量不足"])
MAX_REPORT_WAIT_H = 7 * 24  # a final report's report_time comes at most 7 days after execution


@dataclass
class Labs:
    visit: np.ndarray
    item: np.ndarray  # xmdm
    value: np.ndarray  # NaN = no result
    unit: np.ndarray
    ref_range: np.ndarray
    flag: np.ndarray  # '' = NULL
    cancelled: np.ndarray
    note: np.ndarray  # '' = NULL
    sampled: np.ndarray
    executed: np.ndarray
    reported: np.ndarray  # NaT = no report yet
    deleted: np.ndarray


@dataclass
class Orders:
    visit: np.ndarray
    drug: np.ndarray  # key into catalog.drugs()
    dose: np.ndarray
    long_term: np.ndarray
    start: np.ndarray
    stop: np.ndarray  # NaT = not stopped
    voided: np.ndarray
    deleted: np.ndarray


def _lab_requests(rng: np.random.Generator, pts: Patients, v: Visits) -> tuple[list[int], list[str], list[float]]:
    cidx = condition_index()
    keys = {i: k for k, i in cidx.items()}
    visit_idx: list[int] = []
    items: list[str] = []
    day_offset: list[float] = []
    for i in range(len(v)):
        has = pts.has[v.patient[i]]
        wanted: list[tuple[str, float]] = []
        if v.inpatient[i]:
            wanted += [(x, 1.0) for x in ADMISSION_PANEL]
            if has[cidx["t2dm"]]:
                wanted.append(("HBA1C", 0.6))
            if v.dept[i] == "0101":
                wanted += [("TNI", 0.7), ("BNP", 0.5), ("LDLC", 0.6)]
        elif v.focus[i] == CHECKUP:
            wanted += CHECKUP_PANEL
        else:
            wanted += OUTPATIENT_PANELS.get(keys[int(v.focus[i])], [])
        if has[cidx["af"]] and pts.anticoagulant[v.patient[i]] == 1:
            wanted.append(("INR", 0.8))
        for item, p in wanted:
            if rng.random() < p:
                visit_idx.append(i)
                items.append(item)
                day_offset.append(0.0)
        if v.inpatient[i] and v.los_days[i] > 5 and rng.random() < 0.6:  # repeat panel mid-stay
            for item in ("GLU", "CREA", "K", "WBC"):
                visit_idx.append(i)
                items.append(item)
                day_offset.append(float(rng.integers(2, 5)))
    return visit_idx, items, day_offset


def _values(rng: np.random.Generator, pts: Patients, patient: np.ndarray, item: np.ndarray) -> np.ndarray:
    cidx = condition_index()
    n = len(item)
    has = pts.has[patient]
    male = pts.sex[patient] == 1
    hba1c = pts.hba1c_level[patient]
    t2dm, ckd, hf, chd = (has[:, cidx[k]] for k in ("t2dm", "ckd", "hf", "chd"))
    infection = has[:, cidx["pneumonia"]] | has[:, cidx["uri"]]
    warfarin = has[:, cidx["af"]] & (pts.anticoagulant[patient] == 1)
    z = rng.normal(0, 1, n)
    by_item = {
        "HBA1C": np.clip(hba1c + 0.4 * z, 4.0, 15.0),
        "GLU": np.where(t2dm, np.clip(1.59 * hba1c - 3.6 + 0.9 * z, 3.5, 25), np.clip(5.1 + 0.45 * z, 3.6, 6.9)),
        "CREA": np.where(ckd, np.exp(np.log(190) + 0.35 * z), np.where(male, 84 + 14 * z, 64 + 11 * z)),
        "K": 4.2 + 0.32 * z + np.where(ckd, 0.5, 0.0),
        "NA": 140 + 2.4 * z,
        "ALT": np.exp(np.log(24) + 0.45 * z),
        "WBC": np.where(infection, 11.5 + 3.0 * z, 6.4 + 1.6 * z).clip(1.5),
        "HGB": np.where(male, 146 + 13 * z, 128 + 12 * z) - np.where(ckd, 22, 0),
        "LDLC": np.clip(np.where(has[:, cidx["hyperlipidemia"]], 3.9, 2.8) + 0.75 * z, 0.6, 8),
        "TNI": np.where(
            chd & (rng.random(n) < 0.25),
            np.exp(np.log(0.8) + 1.0 * z),
            np.exp(np.log(0.01) + 0.5 * z),
        ),
        "BNP": np.where(hf, np.exp(np.log(650) + 0.7 * z), np.exp(np.log(38) + 0.6 * z)),
        "INR": np.where(warfarin, 2.3 + 0.5 * z, 1.0 + 0.08 * z).clip(0.7),
    }
    out = np.empty(n)
    for code, values in by_item.items():
        sel = item == code
        out[sel] = values[sel]
    return out


def _draw_lab_times(
    rng: np.random.Generator, v: Visits, visit: np.ndarray, offsets: np.ndarray, as_of: date
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sampled, executed and reported times (reported NaT: not out by the world's end)."""
    n = len(visit)
    inpatient = v.inpatient[visit]
    day = v.admitted[visit].astype("datetime64[D]") + offsets.astype("timedelta64[D]")
    morning = rng.uniform(5.5, 8.0, n) * 3600
    sampled = np.where(
        inpatient & (offsets > 0),
        day.astype("datetime64[s]") + morning.astype("timedelta64[s]"),
        v.admitted[visit] + (rng.uniform(0.2, 3, n) * 3600).astype("timedelta64[s]"),
    )
    executed = sampled + (rng.uniform(0.3, 3, n) * 3600).astype("timedelta64[s]")
    # Most reports within a day; send-out tests (外送检验) 2-7 days after the sample was taken.
    send_out = rng.random(n) < 0.08
    report_h = np.where(send_out, rng.uniform(48, MAX_REPORT_WAIT_H, n), rng.uniform(0.5, 30, n))
    reported = executed + (report_h * 3600).astype("timedelta64[s]")
    # A final report not yet out by the world's end has no report time; as it waits at most
    # MAX_REPORT_WAIT_H, only labs executed in the last 7 days can (data dictionary, report_time).
    end = np.datetime64(as_of, "s") + np.timedelta64(86399, "s")
    reported = np.where(reported > end, np.datetime64("NaT"), reported)
    return sampled, executed, reported


def _catalog_columns(item: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each row's digits, unit, reference low and high, as the lab catalog gives them."""
    catalog = lab_items()
    digits = np.array([catalog[x]["digits"] for x in item])
    unit = np.array([catalog[x]["unit"] for x in item], dtype=object)
    low = np.array([catalog[x]["low"] for x in item], dtype=float)
    high = np.array([catalog[x]["high"] for x in item], dtype=float)
    return digits, unit, low, high


def _draw_legacy_glucose(rng: np.random.Generator, item: np.ndarray, sampled: np.ndarray) -> np.ndarray:
    """Glucose rows reported in mg/dL: sampled before the switch, or transcribed from an outside report."""
    glu = lab_items()["GLU"]
    before_switch = sampled.astype("datetime64[D]") <= np.datetime64(glu["legacy_until"])
    outside = rng.random(len(item)) < glu["outside_legacy_share"]
    legacy: np.ndarray = (item == "GLU") & (before_switch | outside)
    return legacy


def _ref_ranges(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """'low-high', or '<high' where there is no lower bound."""
    ranges: np.ndarray = np.where(
        low <= 0,
        np.char.add("<", np.char.mod("%g", high)),
        np.char.add(np.char.add(np.char.mod("%g", low), "-"), np.char.mod("%g", high)),
    )
    return ranges


def generate_labs(rng: np.random.Generator, pts: Patients, v: Visits, as_of: date) -> Labs:
    visit_idx, item_list, offsets = _lab_requests(rng, pts, v)
    visit = np.array(visit_idx, dtype=np.int64)
    item = np.array(item_list)
    n = len(item)
    value = _values(rng, pts, v.patient[visit], item)
    sampled, executed, reported = _draw_lab_times(rng, v, visit, np.array(offsets), as_of)

    digits, unit, low, high = _catalog_columns(item)
    # Glucose was reported in mg/dL until the switch, and results transcribed from outside reports
    # still are; the unit column is the only hint (data dictionary, t_lab_result.unit).
    legacy = _draw_legacy_glucose(rng, item, sampled)
    glu = lab_items()["GLU"]
    factor = glu["legacy_factor"]
    value = np.where(legacy, value * factor, value)
    low, high = np.where(legacy, low * factor, low), np.where(legacy, high * factor, high)
    unit[legacy] = glu["legacy_unit"]
    digits = np.where(legacy, 0, digits)
    # A report is cancelled (作废) mostly because its result was wrong (a contaminated or mislabelled
    # sample): its value stays in the row and is off, so counting it moves means and threshold counts.
    cancelled = rng.random(n) < 0.04
    value = np.where(cancelled, value * rng.choice(np.array([0.5, 1.6, 2.2]), n), value)
    value = np.round(value * 10.0**digits) / 10.0**digits

    flag = np.where(value > high, "H", np.where(value < low, "L", "N")).astype(object)
    rejected = rng.random(n) < 0.015
    value[rejected] = np.nan
    flag[rejected] = ""
    note = np.where(rejected, rng.choice(REJECTED_NOTES, n), "")
    return Labs(
        visit=visit,
        item=item,
        value=value,
        unit=unit,
        ref_range=_ref_ranges(low, high),
        flag=flag,
        cancelled=cancelled,
        note=note,
        sampled=sampled,
        executed=executed,
        reported=reported,
        deleted=v.deleted[visit] | (rng.random(n) < 0.01),
    )


def _drug_plan(pts: Patients, v: Visits, i: int, rng: np.random.Generator) -> list[str]:
    cidx = condition_index()
    p = v.patient[i]
    has = pts.has[p]
    plan: list[str] = []
    if has[cidx["t2dm"]]:
        if rng.random() < 0.85:
            plan.append("metformin")
        if pts.hba1c_level[p] > 8.5 and rng.random() < 0.75:
            plan.append("insulin glargine")
            if v.inpatient[i]:
                plan.append("insulin aspart")
    if has[cidx["af"]] and pts.anticoagulant[p]:
        plan.append("warfarin" if pts.anticoagulant[p] == 1 else "rivaroxaban")
    if has[cidx["htn"]]:
        plan.append("amlodipine" if p % 2 else "valsartan")
    if has[cidx["chd"]]:
        plan += ["aspirin", "atorvastatin"]
    elif has[cidx["hyperlipidemia"]] and rng.random() < 0.7:
        plan.append("atorvastatin")
    if has[cidx["hf"]]:
        plan.append("furosemide")
    focus = int(v.focus[i])
    if focus == cidx["pneumonia"]:
        plan.append("ceftriaxone" if v.inpatient[i] else "levofloxacin")
    elif focus == cidx["gastritis"]:
        plan.append("omeprazole")
    elif focus == cidx["uri"] and rng.random() < 0.5:
        plan.append("paracetamol")
    # Outpatient chronic refills only on the visit about that condition or a check-up.
    return plan if v.inpatient[i] or focus != CHECKUP or rng.random() < 0.5 else plan[:1]


def generate_orders(rng: np.random.Generator, pts: Patients, v: Visits) -> Orders:
    visit_idx: list[int] = []
    drug: list[str] = []
    for i in range(len(v)):
        for d in _drug_plan(pts, v, i, rng):
            visit_idx.append(i)
            drug.append(d)
    visit = np.array(visit_idx, dtype=np.int64)
    n = len(visit)
    catalog = drugs()
    base_dose = np.array([catalog[d]["dose"] for d in drug], dtype=float)
    dose = base_dose * rng.choice(np.array([0.5, 1.0, 1.0, 1.0, 2.0]), n)
    inpatient = v.inpatient[visit]
    start = v.admitted[visit] + (rng.uniform(0.5, 6, n) * 3600).astype("timedelta64[s]")
    inpatient_stop = v.discharged[visit] - (rng.uniform(0, 12, n) * 3600).astype("timedelta64[s]")
    supply = rng.choice(np.array([7, 14, 28, 30]), n).astype("timedelta64[D]").astype("timedelta64[s]")
    stop = np.where(inpatient, inpatient_stop, start + supply)
    stop = np.where(stop < start, start + 2 * HOUR, stop)  # NaT propagates for patients still in
    return Orders(
        visit=visit,
        drug=np.array(drug),
        dose=dose,
        long_term=inpatient,
        start=start,
        stop=stop,
        voided=rng.random(n) < 0.04,
        deleted=v.deleted[visit] | (rng.random(n) < 0.01),
    )
