"""Visits (outpatient MZ / inpatient ZY) and their diagnoses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Any

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


def _draw_focus(rng: np.random.Generator, has_rows: np.ndarray) -> np.ndarray:
    """Per visit: mostly one of the patient's own conditions, else a check-up."""
    focus = np.full(len(has_rows), CHECKUP)
    weights = has_rows * rng.random(has_rows.shape)
    any_cond = has_rows.any(axis=1) & (rng.random(len(has_rows)) < 0.85)
    focus[any_cond] = weights[any_cond].argmax(axis=1)
    return focus


def _draw_days(rng: np.random.Generator, focus: np.ndarray, birth: np.ndarray, start: date, as_of: date) -> np.ndarray:
    """The visit's day: seasonal for winter conditions, and never before the patient's birth."""
    conds = conditions()
    nv = len(focus)
    winter = np.array([bool(conds[f].get("winter")) if f >= 0 else False for f in focus])
    span = (as_of - start).days
    day = np.datetime64(start, "D") + _seasonal_days(rng, nv, span, winter).astype("timedelta64[D]")
    # A visit drawn before the patient's birth is drawn again after it: piled on the day after birth,
    # the visits of the children born in the last years made a bump in every world's recent volume.
    born = (birth + np.timedelta64(1, "D")).astype("datetime64[D]")
    after_birth = (np.datetime64(as_of, "D") - born).astype(int) + 1
    redrawn = born + (rng.random(nv) * np.maximum(after_birth, 1)).astype("timedelta64[D]")
    days: np.ndarray = np.where(day < born, redrawn, day)
    return days


def _age_years(day: np.ndarray, birth: np.ndarray) -> np.ndarray:
    age: np.ndarray = (day - birth).astype(int) / 365.25
    return age


def _draw_departments(rng: np.random.Generator, focus: np.ndarray, age_at: np.ndarray) -> np.ndarray:
    """Children go to 儿科, check-ups to the check-up clinic, others to one of their condition's departments."""
    conds = conditions()
    dept = np.empty(len(focus), dtype=object)
    for i in range(len(focus)):
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
    return dept


def _draw_inpatient(
    rng: np.random.Generator, dept: np.ndarray, age_at: np.ndarray, depts: dict[str, dict[str, Any]]
) -> np.ndarray:
    rate = np.array([depts[d]["inpatient_rate"] for d in dept])
    rate = np.where(age_at > 70, np.minimum(rate * 1.6, 0.9), rate)
    inpatient: np.ndarray = rng.random(len(dept)) < rate
    return inpatient


def _move_to_opened_departments(
    rng: np.random.Generator,
    dept: np.ndarray,
    inpatient: np.ndarray,
    day: np.ndarray,
    depts: dict[str, dict[str, Any]],
) -> None:
    """In place: a department split off another sees, from its opening, this share of the other's outpatients."""
    for opened in (d for d in depts.values() if "opened" in d):
        moved = (dept == opened["takes_outpatients_of"]) & ~inpatient & (day >= np.datetime64(opened["opened"], "D"))
        dept[moved & (rng.random(len(dept)) < opened["share"])] = opened["ksdm"]


def _move_to_retired_department(
    rng: np.random.Generator,
    dept: np.ndarray,
    inpatient: np.ndarray,
    day: np.ndarray,
    age_at: np.ndarray,
    depts: dict[str, dict[str, Any]],
) -> None:
    """In place: some elderly inpatients went to the department that has since closed, while it was open."""
    retire = np.datetime64(depts[RETIRED_DEPT]["retired_after"], "D")
    to_retired = inpatient & (age_at > 65) & (day <= retire) & (rng.random(len(dept)) < 0.35)
    dept[to_retired] = RETIRED_DEPT


def _draw_arrival(rng: np.random.Generator, day: np.ndarray, inpatient: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Admission (ryrq) and registration (ghrq) times on the visit's day."""
    nv = len(day)
    hour = np.where(inpatient, rng.uniform(0, 24, nv), np.clip(rng.normal(10, 2.2, nv), 7.5, 17.5))
    admitted = day.astype("datetime64[s]") + (hour * 3600).astype("timedelta64[s]")
    # Registration (ghrq): outpatients on the day or booked 1-14 days ahead (预约挂号); inpatients when
    # the admission notice is issued, hours before admission or days before when they wait for a bed.
    lead_h = np.where(inpatient, rng.uniform(1, 48, nv), rng.uniform(0.2, 3, nv))
    booked = rng.random(nv) < np.where(inpatient, 0.3, 0.4)
    lead_h = np.where(booked, rng.uniform(24, 14 * 24, nv), lead_h)
    registered = admitted - (lead_h * 3600).astype("timedelta64[s]")
    return admitted, registered


def _out_of_retired_department(draft: Draft, day: np.ndarray, depts: dict[str, dict[str, Any]]) -> np.ndarray:
    """A readmission, or a stay moved after another, does not go to a department closed by then."""
    conds = conditions()
    retire = np.datetime64(depts[RETIRED_DEPT]["retired_after"], "D")
    dept = draft.dept.astype(object)
    late = (dept == RETIRED_DEPT) & (day > retire)
    dept[late] = [conds[f]["depts"][0] if f != CHECKUP else "0601" for f in draft.focus[late]]
    return dept.astype(str)


def _draw_discharges(
    rng: np.random.Generator, draft: Draft, age_at: np.ndarray, end: np.datetime64
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Discharge time, length of stay (zyts, -1 = NULL) and way (cyfs, 0 = NULL) of each visit."""
    inpatient, admitted = draft.inpatient, draft.admitted
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
    way = rng.choice(np.array([1, 2, 4, 9]), len(admitted), p=[0.92, 0.04, 0.03, 0.01])
    way = np.where(rng.random(len(admitted)) < p_death, 5, way)
    discharge_way = np.where(inpatient & ~still_in, way, 0)
    return discharged, los_days, discharge_way


def _visit_ids(inpatient: np.ndarray, day: np.ndarray) -> np.ndarray:
    """ZY/MZ, the day as YYYYMMDD, and a six-digit running number."""
    prefix = np.where(inpatient, "ZY", "MZ")
    ymd = np.char.replace(np.datetime_as_string(day, unit="D"), "-", "")
    seq = np.char.zfill((np.arange(len(day)) % 1_000_000).astype(str), 6)
    ids: np.ndarray = np.char.add(np.char.add(prefix, ymd), seq)
    return ids


def generate_visits(rng: np.random.Generator, pts: Patients, start: date, as_of: date) -> Visits:
    depts = {d["ksdm"]: d for d in departments()}
    n_chronic = pts.has[:, [c["chronic"] for c in conditions()]].sum(axis=1)
    patient = np.repeat(np.arange(len(pts)), 1 + rng.poisson(0.7 + 0.8 * n_chronic))
    focus = _draw_focus(rng, pts.has[patient])
    day = _draw_days(rng, focus, pts.birth[patient], start, as_of)
    age_at = _age_years(day, pts.birth[patient])
    dept = _draw_departments(rng, focus, age_at)
    inpatient = _draw_inpatient(rng, dept, age_at, depts)
    _move_to_opened_departments(rng, dept, inpatient, day, depts)
    _move_to_retired_department(rng, dept, inpatient, day, age_at, depts)
    admitted, registered = _draw_arrival(rng, day, inpatient)
    draft = Draft(patient, focus, dept.astype(str), inpatient, admitted, registered, draw_los(rng, age_at))

    # Readmissions, then one stay at a time per patient; nothing after the world's end.
    end = np.datetime64(as_of, "s") + DAY - np.timedelta64(1, "s")
    draft = add_readmissions(rng, draft, n_chronic, pts.birth)
    draft = draft.take(np.flatnonzero(draft.admitted <= end))
    draft = separate_stays(rng, draft, end)
    draft = draft.take(np.lexsort((draft.admitted, draft.patient)))

    day = draft.admitted.astype("datetime64[D]")
    discharged, los_days, discharge_way = _draw_discharges(rng, draft, _age_years(day, pts.birth[draft.patient]), end)
    return Visits(
        patient=draft.patient,
        focus=draft.focus,
        visit_id=_visit_ids(draft.inpatient, day),
        inpatient=draft.inpatient,
        dept=_out_of_retired_department(draft, day, depts),
        registered=draft.registered,
        admitted=draft.admitted,
        discharged=discharged,
        los_days=los_days,
        discharge_way=discharge_way,
        deleted=pts.deleted[draft.patient] | (rng.random(len(draft.patient)) < 0.01),
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
