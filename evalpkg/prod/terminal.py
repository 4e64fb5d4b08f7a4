"""Death is terminal: nothing starts or ends for a patient after the first discharge as dead (cyfs = 5).

Visits are drawn independently of each other, so a patient can die in one stay and be seen again in a
later one. This runs after every random draw and only drops rows (the visits and their diagnoses, labs
and orders), so the rest of the world, and its seed determinism, stay as they were."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import numpy as np

from evalpkg.prod.clinical import Labs, Orders
from evalpkg.prod.encounters import Diagnoses, Visits

DIED = 5  # t_zy_visit.cyfs
NEVER = np.datetime64("9999-12-31T00:00:00", "s")

T = TypeVar("T", Visits, Diagnoses, Labs, Orders)
Rows = TypeVar("Rows", Diagnoses, Labs, Orders)  # rows of one visit each


def visit_end(v: Visits) -> np.ndarray:
    """When a visit ends: an outpatient visit when seen, a stay at discharge, a stay still open never."""
    end = np.where(v.inpatient, v.discharged, v.admitted)
    return np.where(np.isnat(end), NEVER, end)


def death_times(v: Visits, n_patients: int) -> np.ndarray:
    """Each patient's first discharge as dead (NEVER if none); soft-deleted stays count too, so the
    rule holds on every subset of the rows."""
    died = v.discharge_way == DIED
    first = np.full(n_patients, NEVER, dtype="datetime64[s]")
    np.minimum.at(first, v.patient[died], v.discharged[died].astype("datetime64[s]"))
    return first


def after_death(v: Visits, n_patients: int) -> np.ndarray:
    """Visits that start or end after their patient's first death discharge."""
    died_at = death_times(v, n_patients)[v.patient]
    late: np.ndarray = (v.admitted > died_at) | (visit_end(v) > died_at)
    return late


def _take(rows: T, keep: np.ndarray, **renumbered: np.ndarray) -> T:
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(rows):
        value = getattr(rows, f.name)
        changes[f.name] = [x for x, k in zip(value, keep, strict=True) if k] if isinstance(value, list) else value[keep]
    changes.update(renumbered)
    return dataclasses.replace(rows, **changes)


def _of_kept_visits(rows: Rows, keep: np.ndarray, new_index: np.ndarray) -> Rows:
    """Rows of the kept visits, pointing at the visits' positions after the drop."""
    mine = keep[rows.visit]
    return _take(rows, mine, visit=new_index[rows.visit[mine]])


def drop_after_death(
    v: Visits, d: Diagnoses, lab: Labs, orders: Orders, n_patients: int
) -> tuple[Visits, Diagnoses, Labs, Orders, int]:
    """The world without the visits after a death (and their rows); the number of visits dropped."""
    keep = ~after_death(v, n_patients)
    new_index = np.cumsum(keep) - 1
    return (
        _take(v, keep),
        _of_kept_visits(d, keep, new_index),
        _of_kept_visits(lab, keep, new_index),
        _of_kept_visits(orders, keep, new_index),
        int((~keep).sum()),
    )


def drop_after_end(
    v: Visits, d: Diagnoses, lab: Labs, orders: Orders, end: np.datetime64
) -> tuple[Diagnoses, Labs, Orders]:
    """Nothing is recorded after the world's end (a stay admitted hours before it has no diagnosis,
    lab or order yet), and no ward sample is taken after its stay's discharge."""
    discharged = np.where(np.isnat(v.discharged), NEVER, v.discharged)[lab.visit]
    lab_kept = (lab.executed <= end) & (lab.sampled <= discharged)
    return _take(d, d.time <= end), _take(lab, lab_kept), _take(orders, orders.start <= end)
