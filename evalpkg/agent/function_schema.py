"""Typed methods as model tools: `@tool(...)` marks a method as a tool of named toolsets; its argument
model and JSON schema come from the typed signature and the docstring's Args section, never written
twice (as pydantic-ai's function schema does)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, create_model

F = TypeVar("F", bound=Callable[..., Any])
_TOOLSETS = "__toolsets__"


def tool(*toolsets: str) -> Callable[[F], F]:
    """Mark a method as a tool offered by each of `toolsets`."""

    def mark(method: F) -> F:
        setattr(method, _TOOLSETS, frozenset(toolsets))
        return method

    return mark


def tools_of(cls: type, toolset: str) -> tuple[str, ...]:
    """The tools of `toolset` on `cls`: its own first, in definition order, then its bases'."""
    names: list[str] = []
    for klass in cls.__mro__:
        for name, member in vars(klass).items():
            if toolset in getattr(member, _TOOLSETS, ()) and name not in names:
                names.append(name)
    return tuple(names)


def is_tool(cls: type, name: str) -> bool:
    return bool(getattr(getattr(cls, name, None), _TOOLSETS, None))


_ARG_MODELS: dict[tuple[type, str], type[BaseModel]] = {}
_SCHEMAS: dict[tuple[tuple[str, ...], type], list[dict[str, Any]]] = {}


def arg_model(cls: type, name: str) -> type[BaseModel]:
    """A pydantic model of a tool's arguments, from the method's typed signature (built once)."""
    if (cls, name) not in _ARG_MODELS:
        method = getattr(cls, name)
        hints = inspect.get_annotations(method, eval_str=True)
        fields: dict[str, Any] = {}
        for p in list(inspect.signature(method).parameters.values())[1:]:
            fields[p.name] = (hints[p.name], ... if p.default is inspect.Parameter.empty else p.default)
        _ARG_MODELS[(cls, name)] = create_model(f"{name}_args", __config__={"extra": "forbid"}, **fields)
    return _ARG_MODELS[(cls, name)]


def openai_tools(names: tuple[str, ...], cls: type) -> list[dict[str, Any]]:
    """Chat-completions `tools` for the model, derived from the typed signatures and docstrings."""
    key = (names, cls)
    if key not in _SCHEMAS:
        _SCHEMAS[key] = [_schema(cls, name) for name in names]
    return _SCHEMAS[key]


def _schema(cls: type, name: str) -> dict[str, Any]:
    description, arg_docs = _docs(getattr(cls, name))
    parameters = arg_model(cls, name).model_json_schema()
    parameters.pop("title", None)
    for pname, prop in parameters.get("properties", {}).items():
        prop.pop("title", None)
        if pname in arg_docs:
            prop["description"] = arg_docs[pname]
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def _docs(method: Any) -> tuple[str, dict[str, str]]:
    """The docstring's summary, and each argument's description from its Args section."""
    doc = inspect.getdoc(method) or ""
    head, _, args = doc.partition("Args:")
    known = inspect.signature(method).parameters
    params: dict[str, str] = {}
    current = None
    for line in args.splitlines():
        m = re.match(r"\s*(\w+):\s*(.*)", line)
        if m and m.group(1) in known:
            current = m.group(1)
            params[current] = m.group(2).strip()
        elif current and line.strip():
            params[current] += " " + line.strip()
    return " ".join(head.split()), params
