"""Inpatient stays of one patient: readmissions after a discharge, and never two stays at once.

Visits are drawn independently, so without this a patient could be admitted while still in hospital,
and a readmission would be as rare as two independent draws landing within a month (0.3% of
discharges). The anchor for the rate: all-cause 30-day readmission in US all-payer data is about one
discharge in seven (HCUP Statistical Brief #248, 14.0% in 2016), higher for chronic conditions such as
heart failure; here 5% plus 4 points per chronic condition of the patient, at most 30%, which gives
about 10-16% of discharges over the case mix (`sync` checks the eval DB's rate against the dbt
var readmission_band).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

DAY = np.timedelta64(86400, "s")
READMIT_BASE, READMIT_PER_CHRONIC, READMIT_MAX = 0.05, 0.04, 0.30
READMIT_MEAN_GAP_DAYS = 9.0  # readmissions cluster in the first weeks after discharge


@dataclass
class Draft:
    """Visits before their ids and discharge states are fixed; one entry per visit."""

    patient: np.ndarray
    focus: np.ndarray
    dept: np.ndarray
    inpatient: np.ndarray
    admitted: np.ndarray  # datetime64[s]
    registered: np.ndarray  # datetime64[s]
    los: np.ndarray  # length of stay in days (float); unused for outpatients

    def take(self, rows: np.ndarray) -> Draft:
        return Draft(**{f.name: getattr(self, f.name)[rows] for f in dataclasses.fields(self)})

    def extend(self, more: Draft) -> Draft:
        return Draft(
            **{f.name: np.concatenate([getattr(self, f.name), getattr(more, f.name)]) for f in dataclasses.fields(self)}
        )


def draw_los(rng: np.random.Generator, age_at: np.ndarray) -> np.ndarray:
    los_mean = np.where(age_at > 70, 9.5, 6.5)
    return np.maximum(rng.lognormal(np.log(los_mean), 0.55, len(age_at)), 0.6)


def add_readmissions(rng: np.random.Generator, draft: Draft, n_chronic: np.ndarray, birth: np.ndarray) -> Draft:
    """A readmission to the same department for the same condition, days to weeks after a stay."""
    stays = np.flatnonzero(draft.inpatient)
    p = np.minimum(READMIT_BASE + READMIT_PER_CHRONIC * n_chronic[draft.patient[stays]], READMIT_MAX)
    index = stays[rng.random(len(stays)) < p]
    again = draft.take(index)
    discharged = again.admitted + (again.los * 86400).astype("timedelta64[s]")
    gap_days = np.minimum(rng.exponential(READMIT_MEAN_GAP_DAYS, len(index)) + 0.5, 29.5)
    admitted = discharged + (gap_days * 86400).astype("timedelta64[s]")
    lead_h = rng.uniform(1, 48, len(index))  # from the admission notice, as any stay
    age_at = (admitted.astype("datetime64[D]") - birth[again.patient]).astype(int) / 365.25
    again = dataclasses.replace(
        again,
        admitted=admitted,
        registered=admitted - (lead_h * 3600).astype("timedelta64[s]"),
        los=draw_los(rng, age_at),
    )
    return draft.extend(again)


def separate_stays(rng: np.random.Generator, draft: Draft, end: np.datetime64) -> Draft:
    """Each stay that begins before the patient's previous one ended is moved to 1-14 days after it
    (registration with it); a stay moved past `end` is left out."""
    admitted, registered = draft.admitted.copy(), draft.registered.copy()
    keep = np.ones(len(admitted), dtype=bool)
    stays = np.flatnonzero(draft.inpatient)
    order = stays[np.lexsort((admitted[stays], draft.patient[stays]))]
    gaps = (rng.uniform(1, 14, len(order)) * 86400).astype("timedelta64[s]")
    last_patient, last_out = -1, np.datetime64("NaT", "s")
    for i, gap in zip(order, gaps, strict=True):
        if draft.patient[i] == last_patient and admitted[i] < last_out:
            move = last_out + gap - admitted[i]
            admitted[i] += move
            registered[i] += move
            if admitted[i] > end:
                keep[i] = False
                continue
        last_patient = draft.patient[i]
        last_out = admitted[i] + np.timedelta64(int(draft.los[i] * 86400), "s")
    moved = dataclasses.replace(draft, admitted=admitted, registered=registered)
    return moved.take(np.flatnonzero(keep))
