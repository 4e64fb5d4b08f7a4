"""validate_result: are the numbers and entities in a claim supported by the evidence? Deterministic."""

from __future__ import annotations

import re
from typing import Any

NUMBER = re.compile(r"(?<![0-9A-Za-z.])[-+]?\d+(?:,\d{3})*(?:\.\d+)?(%?)")
QUOTED = re.compile(r"[\"'“”‘’「」《》]([^\"'“”‘’「」《》]{2,40})[\"'“”‘’「」《》]")


def _numbers_in(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, str):
        return [float(m.group(0).rstrip("%").replace(",", "")) for m in NUMBER.finditer(value)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers_in(v)]
    if isinstance(value, list | tuple):
        return [n for v in value for n in _numbers_in(v)]
    return []


def _text_in(value: Any) -> str:
    if isinstance(value, dict):
        return " ".join(_text_in(v) for v in value.values())
    if isinstance(value, list | tuple):
        return " ".join(_text_in(v) for v in value)
    return "" if value is None else str(value)


def _supported(number: float, percent: bool, evidence: list[float], rel_tol: float) -> bool:
    candidates = [number, number / 100] if percent else [number, number / 100, number * 100]
    for c in candidates:
        for e in evidence:
            scale = max(abs(e), abs(c), 1e-9)
            # a claim may round the evidence: 0.4567 -> 45.7%, 12.345 -> 12.3
            if (
                abs(c - e) <= max(rel_tol * scale, 0.051 * (10 ** -_decimals(c)))
                or abs(round(e, _decimals(c)) - c) < 1e-9
            ):
                return True
    return False


def _is_year(text: str, m: re.Match[str]) -> bool:
    if m.group(1) or not m.group(0).isdigit() or not 1900 <= int(m.group(0)) <= 2100:
        return False
    after, before = text[m.end() : m.end() + 1], text[max(m.start() - 4, 0) : m.start()].lower()
    return after in ("年", "-", "/", "Q") or before.endswith(("in ", "of ", "q1 ", "q2 ", "q3 ", "q4 ", "year "))


def _decimals(x: float) -> int:
    text = f"{x:.6f}".rstrip("0")
    return len(text.split(".")[1]) if "." in text else 0


def check_claim(claim: str, evidence: Any, *, known_entities: list[str] = (), rel_tol: float = 1e-3) -> dict[str, Any]:  # type: ignore[assignment]
    """Numbers must appear in the evidence (rounding and percent/ratio forms allowed); quoted or known
    entities named in the claim must appear in the evidence text."""
    ev_numbers = _numbers_in(evidence)
    ev_text = _text_in(evidence).lower()
    unsupported_numbers = []
    checked = 0
    for m in NUMBER.finditer(claim):
        raw = m.group(0)
        value = float(raw.rstrip("%").replace(",", ""))
        if _is_year(claim, m):
            continue  # years frame the question; they are not results
        checked += 1
        if not _supported(value, raw.endswith("%"), ev_numbers, rel_tol):
            unsupported_numbers.append(raw)
    entities = {e for e in QUOTED.findall(claim)} | {e for e in known_entities if e and e in claim}
    unsupported_entities = sorted(e for e in entities if e.lower() not in ev_text)
    return {
        "supported": not unsupported_numbers and not unsupported_entities,
        "numbers_checked": checked,
        "unsupported_numbers": unsupported_numbers,
        "entities_checked": sorted(entities),
        "unsupported_entities": unsupported_entities,
    }
