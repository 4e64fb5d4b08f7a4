"""Numeric citation errors, the hallucination measure: numbers a final answer states that appear in
nothing the agent saw (the question, the clinician's replies, its own tool calls and their results),
after the rounding and percent/ratio normalization the claim checker allows. Years are not counted,
nor codes with a leading zero (department '0199' is a name, not a quantity), nor zero itself (absence
of rows is its evidence)."""

from __future__ import annotations

import json
from typing import Any

from evalpkg.agent.claims import check_claim
from evalpkg.agent.trajectory import Trajectory


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return text


def evidence(traj: Trajectory) -> list[Any]:
    seen: list[Any] = [traj.question]
    for step in traj.steps:
        seen += [step.user_message] if step.user_message else []
        for call in step.tool_calls:
            seen += [call.arguments, _parsed(call.result)]
    return seen


def unsupported_numbers(traj: Trajectory) -> tuple[int, list[str]]:
    """(numbers stated in the final answer, those no evidence supports)."""
    if not traj.final_answer:
        return 0, []
    checked = check_claim(traj.final_answer, evidence(traj))
    unsupported = list(checked["unsupported_numbers"])
    exempt = [n for n in unsupported if _is_code_or_zero(n)]
    return int(checked["numbers_checked"]) - len(exempt), [n for n in unsupported if n not in exempt]


def _is_code_or_zero(raw: str) -> bool:
    digits = raw.lstrip("+-").rstrip("%")
    return (len(digits) > 1 and digits.startswith("0") and digits.isdigit()) or digits.strip("0.") == ""
