"""Airflow DAG model_quantize: AWQ 4-bit quantization of a model directory on a GPU worker
(autoawq, or llm-compressor's AWQ). Wiring only."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import Param, dag, task

from evalpkg import orchestration

DEFAULT_ARGS = {
    "retries": 1,
    "retry_delay": timedelta(minutes=10),
    "owner": "ml-eng",
    "execution_timeout": timedelta(hours=6),
}


@dag(
    dag_id="model_quantize",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    default_args=DEFAULT_ARGS,
    tags=["emr-benchmark", "serving"],
    params={
        "model_dir": Param("", type="string", minLength=1),
        "output_dir": Param("", type="string", minLength=1),
        "method": Param("autoawq", type="string", enum=["autoawq", "llm-compressor"]),
    },
)
def model_quantize() -> None:
    @task(pool="gpu", queue="gpu")
    def quantize(params: dict[str, Any] | None = None) -> str:
        p = dict(params or {})
        return orchestration.quantize(p["model_dir"], p["output_dir"], p["method"])

    quantize()


model_quantize()
