"""One root error class; the CLI prints any of these as a single line and exits non-zero."""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable
from typing import Any

if typing.TYPE_CHECKING:
    from pydantic import BaseModel, ValidationError


class EvalpkgError(Exception):
    """Root of every error evalpkg raises on purpose."""

    exit_code = 1


class ConfigError(EvalpkgError):
    """A setting, option or input file is missing or invalid."""


class UsageError(ConfigError):
    """An option or argument is invalid or contradicts another one: exit 2, like the parser's own errors."""

    exit_code = 2


class ServiceError(EvalpkgError):
    """An embedded or external service (PostgreSQL, MLflow) is unreachable or failed to start."""


class DataError(EvalpkgError):
    """Data is missing or inconsistent (e.g. sync before generate)."""


class QueryError(DataError):
    """A query (an agent's, a gold, a ticket's) was refused before it ran or failed on the server; one line,
    for the model or the person reading it."""


class PlanError(DataError):
    """A plan (the plan strategy's structured query) breaks a compiler rule or cannot be written as one;
    the message names the rule and the step."""


class SyncError(EvalpkgError):
    """The de-identifying sync (dbt build or its validation) failed."""


class SqlParseError(QueryError):
    """SQL text (a gold, a ticket, an agent's query) is not exactly one statement that parses as PostgreSQL:
    a query refused before it ran, so `except QueryError` catches it with the others."""


def one_line(text: str) -> str:
    """Messages from libraries may span lines; the CLI promises one."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


RANGE_TYPES = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "literal_error", "enum"}


def allowed_values(model: type[BaseModel], field: str) -> str | None:
    """What a field accepts, in words: '1..10', '> 0', "'react' or 'plan'", 'zh or en'."""
    info = model.model_fields.get(field)
    if info is None:
        return None
    bounds = {k: getattr(m, k) for m in info.metadata for k in ("ge", "gt", "le", "lt") if hasattr(m, k)}
    if "ge" in bounds and "le" in bounds:
        return f"{bounds['ge']}..{bounds['le']}"
    if bounds:
        signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
        return " and ".join(f"{signs[k]} {v}" for k, v in bounds.items())
    choices = _choices(info.annotation)
    return ", ".join(choices[:-1]) + " or " + choices[-1] if len(choices) > 1 else "".join(choices) or None


def _choices(annotation: Any) -> list[str]:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return [repr(a) for a in typing.get_args(annotation)]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [str(m.value) for m in annotation]
    if origin in (list, typing.Union, types.UnionType):
        return [c for a in typing.get_args(annotation) if a is not type(None) for c in _choices(a)]
    return []


def validation_message(exc: ValidationError, model: type[BaseModel], label: Callable[[str], str]) -> str:
    """The first error validating ``model`` as one line naming the option (``label(field)``) and what it
    accepts, e.g. ``--repeats: must be 1..10, got 0``."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    msg = err["msg"].removeprefix("Value error, ")
    if not loc:  # a rule across fields: its message names them
        return one_line(msg)
    if err["type"] == "extra_forbidden":
        return f"{label('')}: unknown field {loc[-1]!r}"
    where = label(loc[0]) + "".join(f".{p}" for p in loc[1:] if not p.isdigit())  # list items: the option
    allowed = allowed_values(model, loc[0]) if err["type"] in RANGE_TYPES else None
    if allowed:
        return one_line(f"{where}: must be {allowed}, got {err['input']!r}")
    if err["type"] in ("value_error", "missing"):
        return one_line(f"{where}: {msg}")
    return one_line(f"{where}: {msg[:1].lower()}{msg[1:]}, got {err['input']!r}")
