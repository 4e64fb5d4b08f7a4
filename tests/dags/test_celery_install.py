"""The CeleryExecutor installs from the project's own files, with the same pins and safe defaults
everywhere: the `celery` extra, constraints.txt, scripts/setup, the Docker image and compose file.
Static checks, no server: tests/dags/test_celery.py runs the deployment itself."""

from __future__ import annotations

import re
import tomllib

import yaml

from evalpkg.settings import PROJECT_ROOT


def pins() -> dict[str, str]:
    lines = (PROJECT_ROOT / "constraints.txt").read_text().splitlines()
    return {name.lower(): version for name, _, version in (line.partition("==") for line in lines if line)}


def test_the_celery_extra_is_pinned_with_the_airflow_version_and_its_broker_client() -> None:
    extras = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (provider,) = extras["celery"]
    name, _, version = provider.partition("==")
    pinned = pins()
    assert pinned[name] == version, (provider, pinned.get(name))
    assert "apache-airflow==" + pinned["apache-airflow"] in extras["airflow"]
    # what the provider brings: a constraints.txt without them would let pip pick any version
    assert {"celery", "kombu", "redis", "flower", "billiard", "amqp", "vine"} <= set(pinned)


def test_setup_and_the_image_install_celery_and_its_broker() -> None:
    setup = (PROJECT_ROOT / "scripts" / "setup").read_text()
    assert "redis-server" in setup and "-e '.[dev,cpu-model,airflow,celery]'" in setup
    assert (
        'pip install --no-cache-dir -c constraints.txt ".[airflow,celery]"'
        in (PROJECT_ROOT / "docker" / "Dockerfile").read_text()
    )


def test_compose_has_the_same_safe_celery_defaults_as_scripts_airflow() -> None:
    script = (PROJECT_ROOT / "scripts" / "airflow").read_text()
    match = re.search(r'VISIBILITY_TIMEOUT="\$\{AIRFLOW_VISIBILITY_TIMEOUT:-(\d+)\}"', script)
    assert match, "scripts/airflow sets no default visibility timeout"
    env = yaml.safe_load((PROJECT_ROOT / "docker" / "compose.yaml").read_text())["x-airflow-common"]["environment"]
    assert env["AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT"] == match[1]
    assert env["AIRFLOW__CELERY__TASK_ACKS_LATE"] == "True"
    assert env["AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER"] == "1"
