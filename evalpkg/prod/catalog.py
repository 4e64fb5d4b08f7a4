"""Reference data of the simulated hospital (departments, conditions, lab items, drugs)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any


@lru_cache(maxsize=1)
def reference() -> dict[str, Any]:
    text = resources.files("evalpkg.prod").joinpath("reference.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def conditions() -> list[dict[str, Any]]:
    return list(reference()["conditions"])


def condition_index() -> dict[str, int]:
    return {c["key"]: i for i, c in enumerate(conditions())}


def departments() -> list[dict[str, Any]]:
    return list(reference()["departments"])


def lab_items() -> dict[str, dict[str, Any]]:
    return {item["xmdm"]: item for item in reference()["lab_items"]}


def drugs() -> dict[str, dict[str, Any]]:
    return {d["ypmc_en"].lower(): d for d in reference()["drugs"]}
