"""MLflow: one parent run per evaluation, a child run per shard, metrics named so they line up in
the comparison UI, trajectories as traces (a span per model call and per tool call).

Logging the same evaluation again (a retried Airflow task, `evalpkg score RUN`) reuses its parent
and child runs, found by their tags, and replaces the parent's traces: one parent per run id.

Traces go to the server in bulk, a hundred per OTLP request (`trace_export`); a server without the OTLP
route (MLflow before 3.4) or a tracking URI that is no server (sqlite:, a folder) gets them through
MLflow's span API, a trace at a time."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalpkg.agent.trajectory import Trajectory
from evalpkg.errors import ServiceError
from evalpkg.grading.comparator import COMPARATOR_VERSION
from evalpkg.pipeline.metrics import breakdown_rows, flat_metrics, summarize
from evalpkg.pipeline.mlflow_view import ensure_view, view_url
from evalpkg.pipeline.score import InstanceScore
from evalpkg.pipeline.trace_export import NoOtlpRoute, OtlpExport, chunks, drafts
from evalpkg.runconfig import RunConfig

EXPERIMENT = "emr-agent-benchmark"
RUN_ID_TAG = "evalpkg.run_id"  # on the parent and every child: the evalpkg run they belong to
SHARD_TAG = "evalpkg.shard"  # on a child: its shard
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own tag on nested runs
BREAKDOWN_TABLE = "breakdown.json"  # the per-group measures as MLflow's table (its Evaluation / artifact view)
COMPARATOR_TAG = "evalpkg.comparator_version"  # tags, unlike params, follow a re-score
FINGERPRINT_TAG = "evalpkg.config_fingerprint"
TRACES_TAG = "evalpkg.traces"  # "N of M": how many trajectories are traces (--max-traces leaves some out)
EXPORT_TAG = "evalpkg.trace_export"  # how the traces went: "otlp" (in bulk) or "span api" (a trace at a time)
SERVED_PREFIX = "served."  # what the workers served: params (comparable) and tags (everything, per shard too)
# Where traces go through MLflow's span API (no OTLP route), they leave in batches of spans from background
# threads (its async export); log_run flushes and counts them before it returns. A user's own setting wins.
BATCHED_TRACES = {
    "MLFLOW_ENABLE_ASYNC_TRACE_LOGGING": "true",
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE": "500",
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_INTERVAL_MILLIS": "500",
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_QUEUE_SIZE": "1000000",  # a full queue drops traces: never full here
}
# OTel's span queue behind MLflow's span API holds 2,048 spans and drops what a full one is given, and a
# flush waits 30 s at most: the span API path flushes every hundred traces (about 750 spans) to lose none.
SPAN_API_FLUSH_EVERY = 100
SERVED_PARAMS = ("served_model", "model_path", "model_digest", "revision", "quantization", "server_version", "gpu")


# What an Airflow task exports to its environment (AIRFLOW_CTX_*): from the MLflow run, the DAG run it
# came from, without evalpkg importing Airflow.
ORCHESTRATOR_TAGS = {
    "AIRFLOW_CTX_DAG_ID": "airflow.dag_id",
    "AIRFLOW_CTX_DAG_RUN_ID": "airflow.run_id",
    "AIRFLOW_CTX_TASK_ID": "airflow.task_id",
}


def orchestrator_tags() -> dict[str, str]:
    return {tag: os.environ[var] for var, tag in ORCHESTRATOR_TAGS.items() if os.environ.get(var)}


def served_summary(served: dict[int, dict[str, str]]) -> dict[str, str]:
    """One value per identity field over the shards' workers ("a | b" when shards differ)."""
    values: dict[str, set[str]] = {}
    for identity in served.values():
        for key, value in identity.items():
            values.setdefault(key, set()).add(str(value))
    return {SERVED_PREFIX + k: " | ".join(sorted(v)) for k, v in sorted(values.items())}


def _served_params(summary: dict[str, str]) -> dict[str, str]:
    """The comparable fields of what the workers served, as params."""
    return {k: v for k, v in summary.items() if k.removeprefix(SERVED_PREFIX) in SERVED_PARAMS}


def _loggable(client: Any, parent_id: str | None, params: dict[str, str]) -> dict[str, str]:
    """MLflow never changes a logged param, so a reused parent keeps the values it has (a re-score by
    a newer comparator changes the fingerprint, for one; the tags show the latest)."""
    if parent_id is None:
        return params
    logged = client.get_run(parent_id).data.params
    return {k: v for k, v in params.items() if logged.get(k, v) == v}


def _log_trace(mlflow: Any, traj: Trajectory, score: InstanceScore | None) -> None:
    """One trace through MLflow's span API (the path where the server takes no OTLP export)."""
    root_draft, children = drafts(traj, score)
    root = mlflow.start_span_no_context(
        name=root_draft.name,
        span_type=root_draft.kind,
        inputs=root_draft.inputs,
        attributes=root_draft.attributes,
        start_time_ns=root_draft.start_ns,
    )
    for draft in children:
        span = mlflow.start_span_no_context(
            name=draft.name,
            span_type=draft.kind,
            parent_span=root,
            inputs=draft.inputs,
            start_time_ns=draft.start_ns,
            attributes=draft.attributes,
        )
        span.set_outputs(draft.outputs)
        span.end(end_time_ns=draft.end_ns)
    root.set_outputs(root_draft.outputs)
    root.end(end_time_ns=root_draft.end_ns)


def _log_breakdown(mlflow: Any, client: Any, reused: str | None, rows: dict[str, list[Any]]) -> None:
    """Every group's measures (the type x difficulty cells too) as the run's table. log_table appends to a
    table the run already holds, so a re-log (a run tracked again) replaces the file in the same format."""
    if not reused or BREAKDOWN_TABLE not in {f.path for f in client.list_artifacts(reused)}:
        mlflow.log_table(rows, BREAKDOWN_TABLE)
        return
    import pandas as pd

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / BREAKDOWN_TABLE
        pd.DataFrame(rows).to_json(path, orient="split", index=False)  # as log_table writes it
        mlflow.log_artifact(str(path))


def _log_artifacts(mlflow: Any, artifacts: list[Path]) -> None:
    """The files that exist, and folders with their name kept."""
    for path in artifacts:
        if path.is_dir():  # the report's trajectories, loaded as a row is opened
            mlflow.log_artifacts(str(path), path.name)
        elif path.exists():
            mlflow.log_artifact(str(path))


class Tracker:
    """One evaluation's MLflow parent run, its traces on their way from the moment it is entered (they need
    only the graded answers, so they leave while the answers are scored in the reference worlds, clustered
    and reported); `finish` logs the rest and checks that every trace arrived. Leaving it on an exception
    stops the traces not yet sent and marks the parent FAILED; a re-log completes it."""

    def __init__(
        self,
        tracking_uri: str,
        run_id: str,
        config: RunConfig,
        scores: list[InstanceScore],
        trajectories: list[Trajectory],
        max_traces: int | None = None,
    ) -> None:
        self.tracking_uri, self.run_id, self.config = tracking_uri, run_id, config
        self.by_id = {s.instance_id: s for s in scores}
        self.trajectories_count = len(trajectories)
        self.traced = _traced(trajectories, self.by_id, max_traces)
        self.export: OtlpExport | None = None
        self._stack = contextlib.ExitStack()

    @property
    def run_url(self) -> str:
        """The parent run's page in the MLflow UI."""
        return f"{self.tracking_uri.rstrip('/')}/#/experiments/{self.experiment_id}/runs/{self.parent_id}"

    @property
    def compare_url(self) -> str:
        """The experiment's runs compared on the headline measures (its saved view)."""
        return view_url(self.tracking_uri, self.experiment_id)

    def __enter__(self) -> Tracker:
        for key, value in BATCHED_TRACES.items():
            os.environ.setdefault(key, value)
        # Telemetry off (it must be set before mlflow is imported): it cannot reach its endpoint here, and its
        # session id, kept in os.environ, raced with requests reading the environment in a retried DAG task.
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        # MLflow's own "View run at" lines go to stdout, which a task log shows at the wrong level; the
        # run's address is returned (run_url) and printed by whoever ran it
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        import mlflow

        logging.getLogger("mlflow").setLevel(logging.WARNING)
        mlflow.set_tracking_uri(self.tracking_uri)
        try:
            self.experiment_id = mlflow.set_experiment(EXPERIMENT).experiment_id
        except Exception as exc:
            raise ServiceError(
                f"MLflow at {self.tracking_uri} is unreachable: {str(exc).splitlines()[0][:200]}"
            ) from exc
        self.client = mlflow.MlflowClient()
        ensure_view(self.client, self.experiment_id)
        tagged = _runs_of(self.client, self.experiment_id, self.run_id)
        parents = [r for r in tagged if PARENT_TAG not in r.data.tags]
        self.reused = parents[0].info.run_id if parents else None
        self.children = {
            int(r.data.tags[SHARD_TAG]): r.info.run_id
            for r in reversed(tagged)  # the newest child of a shard wins
            if self.reused and r.data.tags.get(PARENT_TAG) == self.reused and r.data.tags.get(SHARD_TAG, "").isdigit()
        }
        if self.reused:
            mlflow.flush_trace_async_logging()  # an attempt this process abandoned sends its last traces first
            _delete_traces(self.client, self.experiment_id, self.reused)
        config = self.config
        # the run id tag goes on at creation, so a run that an interrupted attempt left behind is found
        self.parent_id = self._stack.enter_context(
            mlflow.start_run(
                run_id=self.reused,
                run_name=None if self.reused else f"{config.name} {self.run_id}",
                tags={RUN_ID_TAG: self.run_id, "benchmark": "emr-agent", "model": config.model, "agent": config.agent},
            )
        ).info.run_id
        self._stack.callback(self._stop_export)  # Ctrl-C, or a stage that failed: the rest stays unsent
        pairs = [(t, self.by_id.get(t.instance_id)) for t in self.traced]
        try:
            self.export = _export_otlp(self.tracking_uri, self.experiment_id, self.parent_id, pairs)
        except BaseException:  # (Ctrl-C in the first request) `with` calls no __exit__ when __enter__ raises
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        # MLflow prints run links on stdout as the run ends; keep stdout for our own output (report path).
        with contextlib.redirect_stdout(sys.stderr):
            self._stack.__exit__(*exc)

    def _stop_export(self) -> None:
        if self.export is not None:
            self.export.close()

    def finish(
        self,
        testset_version: str,
        snapshot: str,
        table: dict[str, dict[str, float]],
        shards: dict[int, list[str]],
        artifacts: list[Path],
        artifacts_ready: Callable[[], object] = lambda: None,
    ) -> str:
        """Params, metrics, a child run per shard and the artifacts (once `artifacts_ready` returns: a report
        being written meanwhile); returns the parent run id once every trace reached the server."""
        import mlflow

        export = self.export
        self._log_params_and_tags(mlflow, testset_version, snapshot)
        mlflow.log_metrics(flat_metrics(table))
        _log_breakdown(mlflow, self.client, self.reused, breakdown_rows(table))
        with contextlib.redirect_stdout(sys.stderr):
            self._log_shards(mlflow, shards)
        mlflow.set_tags(
            {
                TRACES_TAG: f"{len(self.traced)} of {self.trajectories_count}",
                EXPORT_TAG: "otlp" if export else "span api" if self.traced else "none",
            }
        )
        if export is None:
            self._log_traces_by_span_api(mlflow)
        artifacts_ready()
        _log_artifacts(mlflow, artifacts)
        if export is not None:
            export.wait()
        mlflow.flush_trace_async_logging()
        return self._check_traces()

    def _log_params_and_tags(self, mlflow: Any, testset_version: str, snapshot: str) -> None:
        """The run's configuration and versions as params (a reused parent keeps the values it has), and
        the served models, orchestrator and versions as tags."""
        config = self.config
        params = config.model_dump(mode="json", exclude={"api_key"})
        params.update(
            testset_version=testset_version,
            snapshot_version=snapshot,
            config_fingerprint=config.fingerprint(),
            comparator_version=COMPARATOR_VERSION,
            run_id=self.run_id,
        )
        summary = served_summary(config.served)
        params.update(_served_params(summary))
        mlflow.log_params(_loggable(self.client, self.reused, {k: str(v) for k, v in params.items()}))
        mlflow.set_tags(
            {
                **summary,
                **orchestrator_tags(),
                COMPARATOR_TAG: str(COMPARATOR_VERSION),
                FINGERPRINT_TAG: config.fingerprint(),
            }
        )

    def _log_shards(self, mlflow: Any, shards: dict[int, list[str]]) -> None:
        """A child run per shard (the one an earlier attempt left, if any): its served model and measures."""
        for shard, ids in sorted(shards.items()):
            child_id = self.children.get(shard)
            with mlflow.start_run(
                run_id=child_id,
                run_name=None if child_id else f"shard {shard}",
                nested=True,
                tags={RUN_ID_TAG: self.run_id, SHARD_TAG: str(shard)},
            ):
                mlflow.log_params({"shard": shard, "run_id": self.run_id})  # instances: a metric
                if identity := self.config.served.get(shard):
                    mlflow.set_tags({SERVED_PREFIX + k: str(v) for k, v in identity.items()})
                shard_scores = [self.by_id[i] for i in ids if i in self.by_id]
                mlflow.log_metrics(flat_metrics({"overall": summarize(shard_scores)}))

    def _log_traces_by_span_api(self, mlflow: Any) -> None:
        """Without an OTLP export: each trace through MLflow's span API, flushed every SPAN_API_FLUSH_EVERY."""
        for n, traj in enumerate(self.traced, 1):
            _log_trace(mlflow, traj, self.by_id.get(traj.instance_id))
            if n % SPAN_API_FLUSH_EVERY == 0:
                mlflow.flush_trace_async_logging()

    def _check_traces(self) -> str:
        """The parent run id, once the server holds every trace for it (else a ServiceError of tracking)."""
        export, traced, uri = self.export, self.traced, self.tracking_uri
        rerun = f"`evalpkg score {self.run_id} --track` logs them again (it replaces them, nothing is logged twice)"
        if export is not None and export.error is not None:
            raise ServiceError(
                f"MLflow at {uri} took {len(export.sent)} of the {len(traced)} traces of run {self.run_id} "
                f"before their export failed ({export.error}): {rerun}"
            )
        held = count_traces(self.client, self.experiment_id, self.parent_id)
        if export is not None and held < len(export.sent):  # the server stored them but did not link them all
            for ids in chunks(export.sent):
                self.client.link_traces_to_run(ids, self.parent_id)
            held = count_traces(self.client, self.experiment_id, self.parent_id)
        if held != len(traced):
            raise ServiceError(
                f"MLflow at {uri} holds {held} of the {len(traced)} traces of run {self.run_id}: {rerun}"
            )
        return str(self.parent_id)


def log_run(
    tracking_uri: str,
    run_id: str,
    config: RunConfig,
    testset_version: str,
    snapshot: str,
    table: dict[str, dict[str, float]],
    scores: list[InstanceScore],
    shards: dict[int, list[str]],
    trajectories: list[Trajectory],
    artifacts: list[Path],
    max_traces: int | None = None,
    artifacts_ready: Callable[[], object] = lambda: None,
) -> str:
    """A whole run logged at once (a Tracker entered and finished); returns the parent MLflow run id, which
    logging the same run id again reuses."""
    with Tracker(tracking_uri, run_id, config, scores, trajectories, max_traces) as tracker:
        return tracker.finish(testset_version, snapshot, table, shards, artifacts, artifacts_ready)


def _export_otlp(
    tracking_uri: str, experiment_id: str, mlflow_run_id: str, pairs: list[tuple[Trajectory, InstanceScore | None]]
) -> OtlpExport | None:
    """The traces on their way in bulk, or None where they must go through MLflow's span API: a tracking
    URI that is no server, or a server without the OTLP route (said on stderr; the run's tag says it too)."""
    if not pairs or not tracking_uri.startswith(("http://", "https://")):
        return None
    export = OtlpExport(tracking_uri, experiment_id, mlflow_run_id)
    try:
        export.start(pairs)
    except NoOtlpRoute as exc:
        export.close()
        print(f"MLflow takes no OTLP span export ({exc}): traces go one at a time", file=sys.stderr)
        return None
    except BaseException:
        export.close()
        raise
    return export


def _runs_of(client: Any, experiment_id: str, run_id: str) -> list[Any]:
    """Every active MLflow run tagged with this evalpkg run id, newest first. MLflow's filter strings
    have no escapes: quote with the quote the id lacks, or (it has both) match every tagged run here."""
    quote = '"' if "'" in run_id else "'"
    value = f"{quote}{run_id}{quote}" if quote not in run_id else None
    runs = client.search_runs(
        [experiment_id],
        f"tags.`{RUN_ID_TAG}` = {value}" if value else f"tags.`{RUN_ID_TAG}` LIKE '%'",
        max_results=1000 if value else 50000,
        order_by=["attributes.start_time DESC"],
    )
    return [r for r in runs if r.data.tags.get(RUN_ID_TAG) == run_id]


def _traced(trajectories: list[Trajectory], scores: dict[str, InstanceScore], limit: int | None) -> list[Trajectory]:
    """Every trajectory, or at most `limit` of them: the failures first (what a user opens), in run order."""
    if limit is None or limit >= len(trajectories):
        return trajectories

    def passed(t: Trajectory) -> bool:
        return bool((s := scores.get(t.instance_id)) and s.correct)

    return sorted(trajectories, key=passed)[:limit]  # a stable sort keeps run order within each


def count_traces(client: Any, experiment_id: str, mlflow_run_id: str) -> int:
    """The traces MLflow holds for a run, page by page."""
    held, token = 0, None
    while True:
        page = client.search_traces(
            locations=[experiment_id], run_id=mlflow_run_id, include_spans=False, max_results=500, page_token=token
        )
        held += len(page)
        token = page.token
        if not token:
            return held


def _delete_traces(client: Any, experiment_id: str, mlflow_run_id: str) -> None:
    """A reused parent gets its traces again: drop the ones an earlier attempt logged."""
    while traces := client.search_traces(
        locations=[experiment_id], run_id=mlflow_run_id, include_spans=False, max_results=100
    ):
        if not client.delete_traces(experiment_id, trace_ids=[t.info.trace_id for t in traces]):
            return
