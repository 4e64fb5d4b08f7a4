"""docker/ cannot run here (no Docker engine); what can be checked statically is checked."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from evalpkg.settings import PROJECT_ROOT

DOCKER = PROJECT_ROOT / "docker"


def compose() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_compose_has_every_component() -> None:
    services = compose()["services"]
    assert {
        "airflow-api-server",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
        "airflow-worker",
        "airflow-worker-gpu",
        "postgres-prod",
        "postgres-eval",
        "postgres-meta",
        "mlflow",
        "vllm",
        "redis",
    } <= set(services)


def test_every_airflow_component_runs_the_same_image_and_builds_exist() -> None:
    services = compose()["services"]
    airflow = {k: v for k, v in services.items() if k.startswith("airflow-")}
    assert {v["image"] for v in airflow.values()} == {"evalpkg-airflow:latest"}
    for name, service in services.items():
        build = service.get("build")
        if build:
            context = (DOCKER / build["context"]).resolve()
            assert (context / build.get("dockerfile", "Dockerfile")).is_file() or (
                DOCKER / build["dockerfile"]
            ).is_file(), name


def test_gpu_work_goes_to_gpu_hosts() -> None:
    services = compose()["services"]
    gpu_worker = services["airflow-worker-gpu"]
    assert "gpu" in gpu_worker["command"] and gpu_worker["profiles"] == ["gpu"]
    assert gpu_worker["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    vllm = services["vllm"]["command"]
    assert "--enable-auto-tool-choice" in vllm and "--tool-call-parser" in vllm


def test_every_queue_a_dag_declares_has_a_celery_worker() -> None:
    declared = {
        node.value.value
        for path in (PROJECT_ROOT / "dags").glob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.keyword) and node.arg == "queue" and isinstance(node.value, ast.Constant)
    }
    served: dict[str, set[str]] = {}
    for name, service in compose()["services"].items():
        command = service.get("command") or []
        if "celery" in command and "--queues" in command:
            served[name] = set(command[command.index("--queues") + 1].split(","))
    assert "gpu" in declared and declared <= set().union(*served.values()), (declared, served)
    assert served["airflow-worker-gpu"] == {"gpu"} and "gpu" not in served["airflow-worker"]


def test_airflow_tasks_run_with_mlflow_and_cosmos_telemetry_off() -> None:
    for name, service in compose()["services"].items():
        if name.startswith("airflow-"):
            assert service["environment"]["MLFLOW_DISABLE_TELEMETRY"] == "true", name
            assert service["environment"]["AIRFLOW__COSMOS__ENABLE_TELEMETRY"] == "False", name


def test_image_installs_the_package_with_the_projects_pins() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    assert "apache/airflow:3.3.2-python3.11" in text and "-c constraints.txt" in text
    for path in ("evalpkg", "dbt_project", "expectations", "tasks", "dags"):
        assert f"COPY --chown=airflow:root {path}" in text
    assert Path(PROJECT_ROOT / "constraints.txt").read_text().count("apache-airflow==3.3.2") == 1
