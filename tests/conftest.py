"""A real PostgreSQL cluster for the whole test session, started from the system binaries."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalpkg.db import connect
from evalpkg.net import free_port
from evalpkg.prod.generator import generate
from evalpkg.services import bootstrap
from evalpkg.services.stack import scratch_cluster
from evalpkg.settings import PROD_DB, Settings
from evalpkg.sync.runner import SyncReport, run_sync

__all__ = ["free_port", "make_state_dir"]

# The suite's small world: tests here need rows, not signal, and 2,000 patients sync in seconds. The release's
# claims are tested in the reference worlds, at the reference scale (settings.README_PATIENTS).
SMALL_WORLD_PATIENTS = 2000
TEST_SEED = 7  # the README world's seed


def make_state_dir() -> Path:
    """Under /tmp with 0755 so the 'postgres' user can reach it when tests run as root."""
    path = Path(tempfile.mkdtemp(prefix="evalpkg-test-"))
    path.chmod(0o755)
    return path


# One set of reference worlds for every state directory the tests make: a run builds the missing ones, and
# they depend on the code only, so they are built at most once a session, not once per scratch state.
WORLDS_DIR = make_state_dir()
os.environ["EVALPKG_WORLDS_DIR"] = str(WORLDS_DIR)


@pytest.fixture(scope="session", autouse=True)
def _shared_worlds_removed() -> Iterator[None]:
    yield
    shutil.rmtree(WORLDS_DIR, ignore_errors=True)


# A new PostgreSQL cluster with the databases, roles and a random de-identification key.
running_cluster = scratch_cluster

# The session's world is de-identified under a random key, as every user's is, so a check that holds for
# some keys only fails some runs: the key is printed with the results, and this variable reruns under it.
KEY_VARIABLE = "EVALPKG_TEST_KEY"
SESSION_KEY = bytes.fromhex(os.environ[KEY_VARIABLE]) if os.environ.get(KEY_VARIABLE) else secrets.token_bytes(32)


@pytest.fixture(scope="session")
def settings() -> Iterator[Settings]:
    with running_cluster() as s:
        bootstrap.set_key(s, SESSION_KEY, replace=True)
        yield s


def pytest_report_header() -> str:
    return f"de-identification key of the test world: {KEY_VARIABLE}={SESSION_KEY.hex()}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if terminalreporter.stats.get("failed") or terminalreporter.stats.get("error"):
        terminalreporter.write_line(
            f"the test world's key: rerun under it with {KEY_VARIABLE}={SESSION_KEY.hex()} scripts/test ..."
        )


@pytest.fixture(scope="session")
def generated(settings: Settings) -> Settings:
    generate(settings.db_url(PROD_DB), SMALL_WORLD_PATIENTS, TEST_SEED)
    return settings


@pytest.fixture(scope="session")
def synced(generated: Settings) -> SyncReport:
    # Log every statement prod receives, so tests can prove the key never travels there.
    with connect(generated.admin_url) as conn:
        conn.execute(f"alter database {PROD_DB} set log_statement = 'all'")
    return run_sync(generated, full_refresh=True)


# Fixtures that start (or stand for) a PostgreSQL cluster or other servers: a test that needs none of
# them, and is not marked `server`, runs in `scripts/test --quick`.
SERVER_FIXTURES = {"settings", "generated", "synced"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--quick", action="store_true", help="only the tests that start no database or server")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--quick"):
        return
    quick, slow = [], []
    for item in items:
        needs_servers = SERVER_FIXTURES & set(getattr(item, "fixturenames", ())) or item.get_closest_marker("server")
        (slow if needs_servers else quick).append(item)
    config.hook.pytest_deselected(items=slow)
    items[:] = quick


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
    # A suite started in the background of a non-interactive shell (`cmd &`) inherits SIGINT ignored, and
    # so would every process it starts: the Ctrl-C tests would then test nothing. A handler (unlike an
    # ignored signal) is reset to the default in the processes the tests start.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
