"""Airflow DAG model_quantize: AWQ 4-bit quantization of a model directory on a GPU worker
(llm-compressor's AWQ, or the deprecated autoawq), calibrated on the test set's questions, written
with a manifest. Wiring only: evalpkg.serving.quantize does the work."""

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
        "method": Param("llm-compressor", type="string", enum=["llm-compressor", "autoawq"]),
        "testset_version": Param(None, type=["null", "string"], description="calibration set; empty: latest"),
        "samples": Param(256, type="integer", minimum=1),
    },
)
def model_quantize() -> None:
    @task(pool="gpu", queue="gpu")
    def quantize(params: dict[str, Any] | None = None) -> dict[str, Any]:
        p = dict(params or {})
        return orchestration.quantize(
            p["model_dir"], p["output_dir"], p["method"], p.get("testset_version"), int(p["samples"])
        )

    quantize()


model_quantize()
