"""The experiment's saved view "Headline measures" in MLflow's UI (its Views menu): the measures people
compare first, as the first charts of the chart view and the columns of the runs table, so comparing runs
starts from them rather than from some 40 metrics in alphabetical order.

MLflow keeps a saved view as an experiment tag `mlflow.sharedViewState.<id>` holding {name, createdAt,
updatedAt, state}, where state is the runs page's own UI state as JSON (MLflow 3.17's format; the browser
test in tests/pipeline/test_mlflow_view.py opens it, so a change of format fails there)."""

from __future__ import annotations

import json
import time
from typing import Any

HEADLINE_METRICS = ("accuracy", "semantic_accuracy", "expected_call_precision", "expected_call_recall")
VIEW_ID = "evalpkg-headline"
VIEW_NAME = "Headline measures"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_ID}"
SECTION = VIEW_ID  # its one chart section
CHART_GRID = {"columns": 2, "cardHeight": 300}  # two by two: all four on a 1920x1080 screen
COLUMN_WIDTH = 180  # px: "expected_call_precision" whole in the table's header


def view_state() -> dict[str, Any]:
    """Charts: one bar chart per headline measure, two by two (MLflow's own layout, every metric in
    alphabetical order, is a click away: "Exit shared view"). Table: a column per headline measure beside
    the run names."""
    charts = [
        {
            "uuid": f"{SECTION}-{metric}",
            "type": "BAR",
            "metricSectionId": SECTION,
            "metricKey": metric,
            "displayName": metric,
            "runsCountToCompare": 10,
            "isGenerated": False,
            "deleted": False,
        }
        for metric in HEADLINE_METRICS
    ]
    columns = [f"metrics.`{metric}`" for metric in HEADLINE_METRICS]
    return {
        "compareRunCharts": charts,
        "compareRunSections": [
            {"uuid": SECTION, "name": "Headline", "display": True, "isReordered": False, **CHART_GRID}
        ],
        "selectedColumns": columns,
        "columnOrder": columns,
        "columnWidths": dict.fromkeys(columns, COLUMN_WIDTH),
    }


def ensure_view(client: Any, experiment_id: str) -> bool:
    """Save the view on the experiment unless it holds this one already (a view the user renamed or
    restyled is put back); returns whether it wrote."""
    state = json.dumps(view_state(), sort_keys=True)
    held = client.get_experiment(experiment_id).tags.get(VIEW_TAG)
    created = int(time.time() * 1000)
    if held:
        try:
            envelope = json.loads(held)
            if envelope.get("name") == VIEW_NAME and envelope.get("state") == state:
                return False
            created = int(envelope.get("createdAt", created))
        except (ValueError, TypeError, AttributeError):
            pass  # not a view MLflow could read either: replaced
    envelope = {"name": VIEW_NAME, "createdAt": created, "updatedAt": int(time.time() * 1000), "state": state}
    client.set_experiment_tag(experiment_id, VIEW_TAG, json.dumps(envelope))
    return True


def view_url(tracking_uri: str, experiment_id: str, mode: str = "CHART") -> str:
    """The experiment's runs page opened on the view, in chart (or TABLE) mode."""
    base = tracking_uri.rstrip("/")
    return f"{base}/#/experiments/{experiment_id}/runs?viewStateShareKey={VIEW_ID}&compareRunsMode={mode}"
