"""The `evalpkg` command line. Every failure is one line on stderr and a non-zero exit."""

from __future__ import annotations

import os
import sys
from datetime import date
from enum import StrEnum
from typing import Annotated, NoReturn

import typer
from pydantic import ValidationError

from evalpkg.cli_run import register as register_run_commands
from evalpkg.cli_testset import app as testset_app
from evalpkg.errors import EvalpkgError, one_line, validation_message
from evalpkg.progress import to_stderr
from evalpkg.settings import EVAL_DB, PROD_DB, README_PATIENTS, RESULTS_DB, get_settings

# Plain help (rich_markup_mode=None): rich's option tables cut long option names at 80 columns.
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="EMR agent benchmark: services, production simulation, de-identifying sync.",
)
prod_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The simulated production HIS database.")
deid_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The de-identification key.")
app.add_typer(prod_app, name="prod")
app.add_typer(deid_app, name="deid")
app.add_typer(testset_app, name="testset")
register_run_commands(app)


class Target(StrEnum):
    prod = "prod"
    eval = "eval"
    results = "results"
    agent = "agent"
    curator = "curator"


@app.command()
def up() -> None:
    """Start the embedded PostgreSQL cluster and MLflow server (or check the configured ones)."""
    from evalpkg.services import stack

    stack.up(get_settings(), to_stderr)


@app.command()
def down() -> None:
    """Stop the embedded services that `up` started."""
    from evalpkg.services import stack

    stack.down(get_settings(), to_stderr)


@app.command()
def status() -> None:
    """Report each service: where it is and whether it answers."""
    from evalpkg.services import stack

    rows = stack.status(get_settings())
    for s in rows:
        kind = "embedded" if s.embedded else "external"
        typer.echo(f"{s.name:<11} {'up' if s.up else 'down':<5} {kind:<9} {s.location}")
    if not all(s.up for s in rows):
        raise typer.Exit(3)


@app.command("db-url")
def db_url(target: Target) -> None:
    """Print a connection URL (psql "$(evalpkg db-url eval)"); `agent` and `curator` (the refresh's ticket
    miner) are the read-only roles on the eval DB, printed without their passwords (EVALPKG_AGENT_PASSWORD,
    EVALPKG_CURATOR_PASSWORD)."""

    settings = get_settings()
    if target is Target.agent:
        typer.echo(settings.agent_url(with_password=False))
    elif target is Target.curator:
        typer.echo(settings.curator_url(with_password=False))
    else:
        typer.echo(settings.db_url({Target.prod: PROD_DB, Target.eval: EVAL_DB, Target.results: RESULTS_DB}[target]))


def _patients_in_range(value: int) -> int:
    from evalpkg.prod.generator import MAX_PATIENTS, MIN_PATIENTS

    if not MIN_PATIENTS <= value <= MAX_PATIENTS:
        raise typer.BadParameter(f"{value} is outside {MIN_PATIENTS}..{MAX_PATIENTS}")
    return value


@prod_app.command("generate")
def prod_generate(
    patients: Annotated[
        int, typer.Option(callback=_patients_in_range, help="number of patients (100..100000)")
    ] = README_PATIENTS,
    seed: Annotated[int, typer.Option(help="random seed; same seed, same database")] = 7,
    as_of: Annotated[str, typer.Option(help="the snapshot's 'now' (YYYY-MM-DD); prod runs 52 weeks on")] = "2026-10-31",
) -> None:
    """Generate the simulated production database (replaces what is there)."""
    from evalpkg.db import connect
    from evalpkg.prod.generator import generate

    try:
        as_of_date = date.fromisoformat(as_of)
    except ValueError as exc:
        raise typer.BadParameter(f"{as_of!r} is not YYYY-MM-DD", param_hint="--as-of") from exc
    url = get_settings().db_url(PROD_DB)
    with connect(url):  # an unreachable server fails now, not after generating the data
        pass
    report = generate(url, patients, seed, as_of_date, to_stderr)
    to_stderr(
        f"generated {report.total_rows:,} rows in {report.seconds:.1f}s "
        f"({report.total_rows / report.seconds:,.0f} rows/s)"
    )


@deid_app.command("set-key")
def deid_set_key(
    from_env: Annotated[str | None, typer.Option(help="read a hex key from this environment variable")] = None,
    replace: Annotated[bool, typer.Option(help="replace an existing key (all pseudonyms change)")] = False,
) -> None:
    """Store the HMAC key in the eval DB (generated at random unless --from-env is given)."""
    import os

    from evalpkg.errors import ConfigError
    from evalpkg.services import bootstrap

    key = None
    if from_env is not None:
        raw = os.environ.get(from_env)
        if not raw:
            raise ConfigError(f"--from-env: environment variable {from_env} is not set")
        try:
            key = bytes.fromhex(raw)
        except ValueError as exc:
            raise ConfigError(f"--from-env: {from_env} is not a hex string") from exc
    if bootstrap.set_key(get_settings(), key, replace=replace):
        to_stderr("de-identification key stored")
    else:
        to_stderr("a key already exists; pass --replace to rotate it")


@app.command()
def sync(
    full_refresh: Annotated[bool, typer.Option(help="rebuild incremental models from scratch")] = False,
) -> None:
    """De-identify production into the eval DB with dbt, then validate it with Great Expectations."""
    from evalpkg.interrupts import Interrupted
    from evalpkg.sync.runner import run_sync

    try:
        report = run_sync(get_settings(), full_refresh=full_refresh, progress=to_stderr)
    except KeyboardInterrupt as exc:  # run_sync says what it kept; dbt's queries are cancelled by then
        raise Interrupted(str(exc)) from None
    to_stderr(report.summary())


class QuantizeMethod(StrEnum):
    llm_compressor = "llm-compressor"
    autoawq = "autoawq"


@app.command()
def quantize(
    model_path: Annotated[str, typer.Option(help="the model directory to quantize (a config.json in it)")],
    output: Annotated[str, typer.Option(help="where the checkpoint goes (must not exist, or be empty)")],
    method: Annotated[QuantizeMethod, typer.Option(help="llm-compressor's AWQ, or autoawq (deprecated)")] = (
        QuantizeMethod.llm_compressor
    ),
    testset: Annotated[str | None, typer.Option(help="calibrate on this test-set version (default: latest)")] = None,
    samples: Annotated[int, typer.Option(min=1, help="calibration conversations")] = 256,
    dry_run: Annotated[bool, typer.Option(help="check the inputs and print the manifest; needs no GPU")] = False,
) -> None:
    """AWQ 4-bit checkpoint for the vLLM workers, with a manifest (source, recipe, calibration hash)."""
    from pathlib import Path

    from evalpkg.serving import quantize as q

    args = (Path(model_path), Path(output), method.value)
    tasks_dir = get_settings().tasks_dir
    if dry_run:
        manifest, _ = q.plan(*args, tasks_dir, testset, samples)  # type: ignore[arg-type]
        typer.echo(manifest.model_dump_json(indent=2))
        return
    done = q.quantize(*args, tasks_dir=tasks_dir, testset_version=testset, samples=samples, progress=to_stderr)  # type: ignore[arg-type]
    to_stderr(f"wrote {output} ({done.output_digest}); manifest {q.MANIFEST}")


def _fail(message: str, code: int) -> NoReturn:
    typer.echo(f"evalpkg: error: {one_line(message)}", err=True)
    sys.exit(code)


def _os_error(exc: OSError) -> str:
    """'PATH: Permission denied' rather than '[Errno 13] Permission denied: PATH'."""
    if exc.filename is None or not exc.strerror:
        return str(exc) or type(exc).__name__
    return f"{exc.filename}: {exc.strerror}"


def _settings_error(exc: ValidationError) -> str:
    from evalpkg.settings import Settings

    if exc.title != Settings.__name__:
        return f"{exc.title}: {exc.errors()[0]['msg']}"
    return validation_message(exc, Settings, lambda name: f"EVALPKG_{name.upper()}")


def _ignore_late_interrupts() -> None:
    """The command is done: a Ctrl-C between here and the process's exit (interpreter shutdown, atexit
    handlers) must not turn its outcome into a death by signal (exit -2, no message)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def main() -> None:
    from evalpkg.interrupts import INTERRUPTED_EXIT, Interrupted

    try:
        code = app(standalone_mode=False)  # returns the code of typer.Exit raised inside a command
        _ignore_late_interrupts()
        if code == INTERRUPTED_EXIT:  # typer's answer to a KeyboardInterrupt no command turned into Interrupted
            raise Interrupted()
        if isinstance(code, int) and code:
            sys.exit(code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:  # Ctrl-C outside a command (while typer parses the arguments)
        _fail(str(Interrupted()), INTERRUPTED_EXIT)
    except typer.Abort:
        typer.echo("evalpkg: aborted", err=True)
        sys.exit(130)
    except typer.TyperException as exc:  # usage errors: unknown option, bad value
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        if not message:  # empty when a group was called without a command and printed its help
            sys.exit(getattr(exc, "exit_code", 2))
        _fail(" ".join(message.replace("Value error, ", "").split()), getattr(exc, "exit_code", 2))
    except EvalpkgError as exc:
        _fail(str(exc), exc.exit_code)
    except ValidationError as exc:  # the settings read from EVALPKG_* variables
        _fail(_settings_error(exc), 1)
    except OSError as exc:  # a state or tasks directory that cannot be read or written
        _fail(_os_error(exc), 1)
    except Exception as exc:
        if os.environ.get("EVALPKG_DEBUG"):
            raise
        from evalpkg.db import first_line

        _fail(f"internal error {type(exc).__name__}: {first_line(exc)} (EVALPKG_DEBUG=1 shows the traceback)", 1)
