"""[core] hostname_callable of the Celery workers that `scripts/airflow start --celery` starts on one
machine: a task instance then records the worker that ran it (`gpu@host`, `default@host`, the same
name Celery and `scripts/airflow status` show), not only the machine. Every other process keeps the
machine's name, which the api-server needs to fetch a remote worker's logs."""

from __future__ import annotations

import os
import socket


def worker_hostname() -> str:
    return os.environ.get("EVALPKG_AIRFLOW_WORKER_NAME") or socket.getfqdn()
