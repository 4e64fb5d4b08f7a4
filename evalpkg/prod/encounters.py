"""Visits (outpatient MZ / inpatient ZY) and their diagnoses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import numpy as np

from evalpkg.prod.catalog import conditions, departments
from evalpkg.prod.patients import Patients
from evalpkg.prod.stays import Draft, add_readmissions, draw_los, separate_stays

HOUR = np.timedelta64(3600, "s")
DAY = np.timedelta64(86400, "s")
CHECKUP = -1  # visit focus without a condition: routine check-up
CHECKUP_ICD = ("Z00.000", "健康查体")
RETIRED_DEPT = "0199"
PEDIATRICS = "0401"
PEDIATRIC_AGE = 14  # 儿科 takes children under this age (years at the visit)


@dataclass
class Visits:
    patient: np.ndarray  # index into Patients
    focus: np.ndarray  # condition index or CHECKUP
    visit_id: np.ndarray
    inpatient: np.ndarray  # bool
    dept: np.ndarray  # ksdm
    registered: np.ndarray  # ghrq datetime64[s]
    admitted: np.ndarray  # ryrq
    discharged: np.ndarray  # cyrq (NaT: outpatient or still in hospital)
    los_days: np.ndarray  # zyts (-1 = NULL)
    discharge_way: np.ndarray  # cyfs (0 = NULL)
    deleted: np.ndarray

    def __len__(self) -> int:
        return len(self.visit_id)


@dataclass
class Diagnoses:
    visit: np.ndarray
    condition: np.ndarray  # index or CHECKUP
    primary: np.ndarray  # bool
    text: list[str]
    time: np.ndarray
    deleted: np.ndarray


def _seasonal_days(rng: np.random.Generator, n: int, span: int, winter: np.ndarray) -> np.ndarray:
    """Day offsets in [0, span); winter-peaking conditions are resampled towards Dec-Feb."""
    days = rng.integers(0, span, n)
    alt = rng.integers(0, span, n)
    doy = days % 365
    keep = rng.random(n) < 0.5 + 0.5 * np.cos(2 * np.pi * (doy - 15) / 365)
    return np.where(winter & ~keep, alt, days)


def generate_visits(rng: np.random.Generator, pts: Patients, start: date, as_of: date) -> Visits:
    conds = conditions()
    depts = {d["ksdm"]: d for d in departments()}
    n_chronic = pts.has[:, [c["chronic"] for c in conds]].sum(axis=1)
    counts = 1 + rng.poisson(0.7 + 0.8 * n_chronic)
    patient = np.repeat(np.arange(len(pts)), counts)
    nv = len(patient)

    # Focus: mostly one of the patient's own conditions, else a check-up.
    focus = np.full(nv, CHECKUP)
    has_rows = pts.has[patient]
    weights = has_rows * rng.random(has_rows.shape)
    any_cond = has_rows.any(axis=1) & (rng.random(nv) < 0.85)
    focus[any_cond] = weights[any_cond].argmax(axis=1)

    winter = np.array([bool(conds[f].get("winter")) if f >= 0 else False for f in focus])
    span = (as_of - start).days
    day = np.datetime64(start, "D") + _seasonal_days(rng, nv, span, winter).astype("timedelta64[D]")
    birth = pts.birth[patient]
    # A visit drawn before the patient's birth is drawn again after it: piled on the day after birth,
    # the visits of the children born in the last years made a bump in every world's recent volume.
    born = (birth + np.timedelta64(1, "D")).astype("datetime64[D]")
    after_birth = (np.datetime64(as_of, "D") - born).astype(int) + 1
    redrawn = born + (rng.random(nv) * np.maximum(after_birth, 1)).astype("timedelta64[D]")
    day = np.where(day < born, redrawn, day)
    age_at = (day - birth).astype(int) / 365.25

    dept = np.empty(nv, dtype=object)
    for i in range(nv):
        f = focus[i]
        if age_at[i] < PEDIATRIC_AGE:
            dept[i] = PEDIATRICS
        elif f == CHECKUP:
            dept[i] = "0601" if rng.random() < 0.8 else "0501"
        else:
            options = conds[f]["depts"]
            dept[i] = options[0] if rng.random() < 0.7 else options[rng.integers(len(options))]
            if dept[i] == PEDIATRICS:  # an adult with a condition 儿科 also treats: the adult department
                dept[i] = next(d for d in options if d != PEDIATRICS)
    rate = np.array([depts[d]["inpatient_rate"] for d in dept])
    rate = np.where(age_at > 70, np.minimum(rate * 1.6, 0.9), rate)
    inpatient = rng.random(nv) < rate
    for opened in (d for d in depts.values() if "opened" in d):
        # a department split off another: from its opening, this share of the other's outpatients are seen there
        moved = (dept == opened["takes_outpatients_of"]) & ~inpatient & (day >= np.datetime64(opened["opened"], "D"))
        dept[moved & (rng.random(nv) < opened["share"])] = opened["ksdm"]
    retire = np.datetime64(depts[RETIRED_DEPT]["retired_after"], "D")
    to_retired = inpatient & (age_at > 65) & (day <= retire) & (rng.random(nv) < 0.35)
    dept[to_retired] = RETIRED_DEPT

    hour = np.where(inpatient, rng.uniform(0, 24, nv), np.clip(rng.normal(10, 2.2, nv), 7.5, 17.5))
    admitted = day.astype("datetime64[s]") + (hour * 3600).astype("timedelta64[s]")
    # Registration (ghrq): outpatients on the day or booked 1-14 days ahead (预约挂号); inpatients when
    # the admission notice is issued, hours before admission or days before when they wait for a bed.
    lead_h = np.where(inpatient, rng.uniform(1, 48, nv), rng.uniform(0.2, 3, nv))
    booked = rng.random(nv) < np.where(inpatient, 0.3, 0.4)
    lead_h = np.where(booked, rng.uniform(24, 14 * 24, nv), lead_h)
    registered = admitted - (lead_h * 3600).astype("timedelta64[s]")
    draft = Draft(patient, focus, dept.astype(str), inpatient, admitted, registered, draw_los(rng, age_at))

    # Readmissions, then one stay at a time per patient; nothing after the world's end.
    end = np.datetime64(as_of, "s") + DAY - np.timedelta64(1, "s")
    draft = add_readmissions(rng, draft, n_chronic, pts.birth)
    draft = draft.take(np.flatnonzero(draft.admitted <= end))
    draft = separate_stays(rng, draft, end)
    draft = draft.take(np.lexsort((draft.admitted, draft.patient)))
    patient, focus, inpatient, admitted = draft.patient, draft.focus, draft.inpatient, draft.admitted
    nv = len(patient)
    day = admitted.astype("datetime64[D]")
    age_at = (day - pts.birth[patient]).astype(int) / 365.25
    dept = draft.dept.astype(object)
    # A readmission, or a stay moved after another, does not go to a department closed by then.
    late = (dept == RETIRED_DEPT) & (day > retire)
    dept[late] = [conds[f]["depts"][0] if f != CHECKUP else "0601" for f in focus[late]]

    discharged = admitted + (draft.los * 86400).astype("timedelta64[s]")
    # Stays not over by the world's end are open: no discharge time, length or way yet.
    still_in = discharged > end
    discharged = np.where(inpatient & ~still_in, discharged, np.datetime64("NaT"))
    los_days = np.where(
        inpatient & ~still_in,
        np.maximum((discharged.astype("datetime64[D]") - admitted.astype("datetime64[D]")).astype(int), 1),
        -1,
    )
    p_death = np.clip(0.004 + 0.0009 * np.maximum(age_at - 60, 0), 0, 0.08)
    way = rng.choice(np.array([1, 2, 4, 9]), nv, p=[0.92, 0.04, 0.03, 0.01])
    way = np.where(rng.random(nv) < p_death, 5, way)
    discharge_way = np.where(inpatient & ~still_in, way, 0)

    prefix = np.where(inpatient, "ZY", "MZ")
    ymd = np.char.replace(np.datetime_as_string(day, unit="D"), "-", "")
    seq = np.char.zfill((np.arange(nv) % 1_000_000).astype(str), 6)
    visit_id = np.char.add(np.char.add(prefix, ymd), seq)
    deleted = pts.deleted[patient] | (rng.random(nv) < 0.01)
    return Visits(
        patient,
        focus,
        visit_id,
        inpatient,
        dept.astype(str),
        draft.registered,
        admitted,
        discharged,
        los_days,
        discharge_way,
        deleted,
    )


def generate_diagnoses(rng: np.random.Generator, pts: Patients, v: Visits) -> Diagnoses:
    conds = conditions()
    chronic = np.array([c["chronic"] for c in conds])
    visit_idx: list[int] = []
    cond_idx: list[int] = []
    primary: list[bool] = []
    for i in range(len(v)):
        visit_idx.append(i)
        cond_idx.append(int(v.focus[i]))
        primary.append(True)
        p_secondary = 0.75 if v.inpatient[i] else 0.25
        for j in np.flatnonzero(pts.has[v.patient[i]] & chronic):
            if j != v.focus[i] and rng.random() < p_secondary:
                visit_idx.append(i)
                cond_idx.append(int(j))
                primary.append(False)
    visits = np.array(visit_idx)
    cond = np.array(cond_idx)
    texts: list[str] = []
    pick = rng.random(len(cond))
    paste_name = rng.random(len(cond)) < 0.02  # free text sometimes carries the patient's name
    for k, c in enumerate(cond):
        base = CHECKUP_ICD[1] if c == CHECKUP else conds[c]["texts"][int(pick[k] * len(conds[c]["texts"]))]
        if paste_name[k]:
            base = f"{base}（患者{pts.name[v.patient[visits[k]]]}）"
        texts.append(base)
    time = v.admitted[visits] + (rng.uniform(0.1, 24, len(cond)) * 3600).astype("timedelta64[s]")
    deleted = v.deleted[visits] | (rng.random(len(cond)) < 0.01)
    return Diagnoses(visits, cond, np.array(primary), texts, time, deleted)
