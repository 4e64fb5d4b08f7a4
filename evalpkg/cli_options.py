"""`evalpkg run`'s options, generated from RunConfig: one option per field with the field's help text
and default, so a new field appears on the command line (as in the agent_eval form) by being added to
RunConfig. `--config` (JSON, or a file of it) is the base; only the options typed override it."""

from __future__ import annotations

import enum
import inspect
import json
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from evalpkg.errors import UsageError, validation_message
from evalpkg.runconfig import RunConfig

# Options whose names are not the field's (kept from before the options were generated).
CLI_NAMES = {
    "languages": "--language",
    "complexities": "--complexity",
    "testset_version": "--testset",
    "native_tools": "--native-tools/--text-protocol",
}
ENV_VARS = {"api_key": "EVALPKG_API_KEY"}
HIDDEN = {"format_version"}  # a constant, not a choice


def option_name(field: str) -> str:
    """The option that sets a field, as an error names it: `--max-steps`, `--text-protocol`..."""
    name = CLI_NAMES.get(field, "--" + field.replace("_", "-"))
    return name.split("/")[0]


def run_fields() -> dict[str, FieldInfo]:
    return {name: f for name, f in RunConfig.model_fields.items() if name not in HIDDEN}


def _choices(annotation: Any) -> list[str]:
    """The values of a Literal or an enum (or a list of them), for the help text."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        return [str(a) for a in args]
    if typing.get_origin(annotation) is list and args:
        return _choices(args[0])
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return [str(m.value) for m in annotation]
    return []


def _option_type(annotation: Any) -> Any:
    """What the command line parses a field as; RunConfig then checks the value."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        (annotation,) = (a for a in args if a is not type(None))
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list:
        return list[int] if args and args[0] is int else list[str]
    if annotation in (bool, int, float):
        return annotation
    return str


def _help(field: FieldInfo) -> str:
    default = field.get_default(call_default_factory=True)
    if isinstance(default, list):
        default = " ".join(str(getattr(v, "value", v)) for v in default) or "none"
    parts = [field.description or ""]
    if choices := _choices(field.annotation):
        parts.append(f"one of {', '.join(choices)}")
    parts.append("never logged" if field.exclude else f"default: {default}")
    return "; ".join(p for p in parts if p)


def _parameter(name: str, field: FieldInfo) -> inspect.Parameter:
    kind = _option_type(field.annotation)
    flag = "--" + name.replace("_", "-")
    option = typer.Option(
        CLI_NAMES.get(name, f"{flag}/--no-{flag[2:]}" if kind is bool else flag),
        help=_help(field),
        envvar=ENV_VARS.get(name),
        show_default=False,
        show_envvar=False,
    )
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=Annotated[kind | None, option]
    )


def with_run_options(command: Callable[..., None]) -> Callable[..., None]:
    """`command(config: RunConfig, **its own options)` as a typer command that also takes one option per
    RunConfig field and `--config`; the RunConfig is built and checked before the command runs."""
    own = list(inspect.signature(command, eval_str=True).parameters.values())[1:]
    fields = run_fields()
    config_option = inspect.Parameter(
        "config_json",
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[
            str | None,
            typer.Option("--config", help="RunConfig as JSON, or a JSON file: the base the options typed override"),
        ],
    )
    generated = [_parameter(name, f) for name, f in fields.items()]

    def wrapper(**values: Any) -> None:
        typed = {k: v for k, v in values.items() if k in fields and v not in (None, [], ())}
        config = run_config(values.get("config_json"), typed)
        command(config, **{p.name: values[p.name] for p in own})

    params = [*generated, config_option, *(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own)]
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    wrapper.__doc__, wrapper.__name__ = command.__doc__, command.__name__
    return wrapper


def config_base(config_json: str | None) -> dict[str, Any]:
    """--config: a JSON object, or the path of a file holding one."""
    if not config_json:
        return {}
    text, where = config_json, "--config"
    if not config_json.lstrip().startswith(("{", "[")) and Path(config_json).is_file():
        text, where = Path(config_json).read_text(encoding="utf-8"), f"--config {config_json}"
    try:
        base = json.loads(text)
    except json.JSONDecodeError as exc:
        if where == "--config" and not config_json.lstrip().startswith(("{", "[")):
            raise UsageError(f"--config: neither JSON nor a file: {config_json!r}") from exc
        raise UsageError(f"{where}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    if not isinstance(base, dict):
        raise UsageError(f"{where}: expected a JSON object of RunConfig fields, got {type(base).__name__}")
    return base


def run_config(config_json: str | None, typed: dict[str, Any]) -> RunConfig:
    """The whole run configuration, checked before anything is written: --config, then the options
    typed; a bad one is a usage error naming the option (or the --config field) that set it."""
    base = config_base(config_json)
    try:
        return RunConfig.model_validate({**base, **typed})
    except ValidationError as exc:
        label = lambda field: option_name(field) if field in typed else f"--config {field}".strip()  # noqa: E731
        raise UsageError(validation_message(exc, RunConfig, label)) from exc
