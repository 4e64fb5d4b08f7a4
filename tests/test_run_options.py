"""`evalpkg run`'s options are RunConfig's fields: one definition for the command line and the
agent_eval form, `--config` as the base that only the options typed override."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from evalpkg.cli import app
from evalpkg.cli_options import option_name, run_fields, with_run_options
from evalpkg.orchestration import FORM_LIMIT, RUN_OPTIONS, eval_params
from evalpkg.runconfig import RunConfig

runner = CliRunner()


def configured(*args: str) -> RunConfig:
    """The RunConfig a command with the run options builds from these arguments."""
    seen: list[RunConfig] = []
    probe = typer.Typer()

    @probe.command()
    @with_run_options
    def go(config: RunConfig) -> None:
        seen.append(config)

    result = runner.invoke(probe, list(args))
    assert result.exit_code == 0, result.output
    (config,) = seen
    return config


@pytest.mark.parametrize(
    ("args", "expected", "why"),
    [
        (
            ["--config", '{"shards": 4}', "--limit", "8"],
            {"shards": 4, "limit": 8},
            "an untyped option keeps --config's",
        ),
        (["--config", '{"shards": 4}', "--shards", "2"], {"shards": 2}, "a typed option overrides --config"),
        ([], {"shards": 1, "max_steps": 12}, "nothing typed: RunConfig's defaults"),
        (
            ["--config", '{"strategy": "plan", "agent": "openai", "endpoint": "http://h/v1"}'],
            {"strategy": "plan"},
            "a field that had no option before still comes through --config",
        ),
        (
            ["--agent", "openai", "--endpoint", "http://h/v1", "--strategy", "plan"],
            {"strategy": "plan"},
            "and now has its option",
        ),
        (["--text-protocol"], {"native_tools": False}, "a boolean's off switch keeps its old name"),
        (["--config", '{"native_tools": false}', "--native-tools"], {"native_tools": True}, "and its on switch wins"),
        (["--language", "en", "--language", "zh"], {"languages": ["en", "zh"]}, "a list option repeats"),
        (
            ["--max-tokens", "256", "--max-result-bytes", "1048576"],
            {"max_tokens": 256, "max_result_bytes": 2**20},
            "the generation and result bounds are options",
        ),
    ],
)
def test_config_then_typed_options(args: list[str], expected: dict[str, Any], why: str) -> None:
    dumped = configured(*args).model_dump(mode="json")
    assert {k: dumped[k] for k in expected} == expected, why


def test_config_from_a_file(tmp_path: Any) -> None:
    path = tmp_path / "run.json"
    path.write_text('{"shards": 3, "max_steps": 5}')
    config = configured("--config", str(path), "--max-steps", "7")
    assert (config.shards, config.max_steps) == (3, 7)


def test_help_lists_every_field_with_its_help() -> None:
    result = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "400", "TERM": "dumb"})
    assert result.exit_code == 0, result.output
    for name, field in run_fields().items():
        assert option_name(name) in result.output, name
        first_words = " ".join((field.description or "").split()[:3])
        assert first_words in " ".join(result.output.split()), name


def test_cli_params_and_runconfig_have_the_same_fields_and_defaults() -> None:
    defaults = RunConfig().model_dump(mode="json")
    params = {k: v for k, v in eval_params().items() if k not in RUN_OPTIONS}
    cli = set(run_fields())
    assert set(params) == cli - {"api_key"}  # the key is never logged, so the form has no field for it
    # the same defaults, but the form's limit: a person's quick run, not the whole release (FORM_LIMIT)
    assert {k: p["default"] for k, p in params.items()} == {k: defaults[k] for k in params} | {"limit": FORM_LIMIT}
    assert configured().model_dump(mode="json") == defaults


def test_help_at_80_columns_names_every_option_in_full() -> None:
    result = CliRunner().invoke(app, ["run", "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    names = [option_name(name) for name in run_fields()]
    missing = [n for n in names if n not in result.output]
    assert not missing, missing
    assert max(len(line) for line in result.output.splitlines()) <= 80
