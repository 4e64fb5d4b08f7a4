"""Tolerant text protocol for models without native tool calling: JSON in code fences or bare,
with unescaped newlines, single quotes, trailing commas and prose around it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

FENCE = re.compile(r"```(?:json|JSON|tool|tool_call)?\s*(.*?)```", re.DOTALL)
NAME_KEYS = ("tool", "name", "action", "function", "tool_name")
ARG_KEYS = ("arguments", "args", "parameters", "action_input", "input", "tool_input")
FINAL_KEYS = ("final_answer", "answer", "final")


@dataclass
class ParsedAction:
    kind: str  # "tool" | "final" | "none"
    name: str = ""
    arguments: dict[str, Any] | None = None
    text: str = ""
    error: str = ""


def _balanced_objects(text: str) -> list[str]:
    """Top-level {...} spans, aware of strings."""
    spans, depth, start, in_str, esc, quote = [], 0, -1, False, False, ""
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                in_str = False
        elif ch in "\"'" and depth > 0:
            in_str, quote = True, ch
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


def _repair(raw: str) -> str:
    out, in_str, esc = [], False, False
    for ch in raw:  # escape raw control characters inside strings
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            elif ch == "\n":
                out.append("\\n")
                continue
            elif ch == "\t":
                out.append("\\t")
                continue
        elif ch == '"':
            in_str = True
        out.append(ch)
    fixed = "".join(out)
    fixed = re.sub(r",\s*([}\]])", r"\1", fixed)  # trailing commas
    return fixed


def _load(raw: str) -> Any:
    for candidate in (raw, _repair(raw), _repair(raw.replace("'", '"'))):
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            continue
    raise ValueError("no parsable JSON")


def _interpret(obj: Any) -> ParsedAction | None:
    if not isinstance(obj, dict):
        return None
    for key in FINAL_KEYS:
        if key in obj and isinstance(obj[key], str | int | float):
            return ParsedAction("final", text=str(obj[key]))
    name = next((obj[k] for k in NAME_KEYS if isinstance(obj.get(k), str)), None)
    if name is None and isinstance(obj.get("function"), dict):
        return _interpret(obj["function"])
    if name is None:
        return None
    args: Any = next((obj[k] for k in ARG_KEYS if k in obj), {})
    if isinstance(args, str):
        try:
            args = _load(args)
        except ValueError:
            args = {"sql": args} if name == "execute_sql" else {}
    return ParsedAction("tool", name=name, arguments=args if isinstance(args, dict) else {})


def parse(text: str) -> ParsedAction:
    """Find the first tool call or final answer in free text; otherwise the text is the answer."""
    if not text or not text.strip():
        return ParsedAction("none", error="empty model output")
    candidates = [m.group(1) for m in FENCE.finditer(text)] + _balanced_objects(text)
    errors = []
    for raw in candidates:
        try:
            action = _interpret(_load(raw.strip()))
        except ValueError as exc:
            errors.append(str(exc))
            continue
        if action is not None:
            return action
    if candidates:
        return ParsedAction("none", text=text, error="JSON found but no tool call or answer in it")
    return ParsedAction("final", text=text.strip())
