"""MLflow's compare view as a person meets it: two runs logged to a real MLflow server, the link a run
prints opened in headless Chromium, and the headline measures (accuracy, semantic accuracy, call
precision and recall) seen on its first screen, for both runs, in the chart view and in the runs table."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalpkg.net import free_port
from evalpkg.pipeline import mlflow_view, tracking
from evalpkg.runconfig import RunConfig
from evalpkg.services import mlflow_server
from evalpkg.settings import Settings
from tests.pipeline.cdp import Browser
from tests.pipeline.test_metrics import score

pytestmark = pytest.mark.server  # starts an MLflow server

# A desktop screen as MLflow opens on it: its assistant panel open and the shared-view banner shown.
SCREEN: dict[str, Any] = {"width": 1920, "height": 1080}
# Measures that sort before the headline ones and would fill MLflow's own alphabetical layout first.
OTHERS = ("accuracy_ci_high", "accuracy_ci_low", "answer_point_coverage", "clarification_accuracy", "exec_match")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    settings = Settings(state_dir=tmp_path_factory.mktemp("mlflow"), mlflow_port=free_port(), mlflow_uri=None)
    mlflow_server.start(settings)
    try:
        yield settings
    finally:
        mlflow_server.stop(settings)


def _log(uri: str, name: str, value: float) -> str:
    overall = {m: value for m in (*mlflow_view.HEADLINE_METRICS, *OTHERS)}
    table = {"overall": overall, "type.single_table": {"accuracy": value, "semantic_accuracy": value}}
    scores = [score("task-1:0", instance_id="inst-1")]
    return tracking.log_run(uri, name, RunConfig(name=name), "v9", "snap", table, scores, {0: ["inst-1"]}, [], [])


def _open(browser: Browser, url: str) -> None:
    browser.send("Page.enable")
    browser.send("Emulation.setDeviceMetricsOverride", **SCREEN, deviceScaleFactor=1, mobile=False)
    browser.send("Page.navigate", url=url)
    browser.wait_for("Page.loadEventFired")


def _poll(browser: Browser, expression: str, count: int, timeout_s: float = 30.0) -> dict[str, Any]:
    """What the expression finds once it finds `count` things (MLflow's page fills in after it loads)."""
    deadline = time.monotonic() + timeout_s
    while len(found := browser.evaluate(expression)) < count and time.monotonic() < deadline:
        time.sleep(0.5)
    return dict(found)


HEADLINE = json.dumps(list(mlflow_view.HEADLINE_METRICS))
# Each headline chart drawn: whether all of its card is on the first screen, and its card's text (legend).
CHARTS = """(() => {
  const out = {};
  for (const title of document.querySelectorAll('body *')) {
    const name = title.childElementCount === 0 ? title.textContent.trim() : '';
    if (!HEADLINE.includes(name) || out[name]) continue;
    let card = title;
    while (card && card.getBoundingClientRect().height < 150) card = card.parentElement;
    const box = card.getBoundingClientRect();
    out[name] = {seen: box.top >= 0 && box.bottom <= window.innerHeight && box.right <= window.innerWidth,
                 text: card.innerText};
  }
  return out;
})()""".replace("HEADLINE", HEADLINE)
# The runs table's header cell of each headline measure: whether it is on the first screen, name uncut.
COLUMNS = """(() => {
  const out = {};
  for (const cell of document.querySelectorAll('[role="columnheader"]')) {
    const name = cell.innerText.trim();
    if (!HEADLINE.includes(name)) continue;
    const box = cell.getBoundingClientRect();
    const cut = [...cell.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1);
    out[name] = {seen: box.left >= 0 && box.right <= window.innerWidth && box.bottom <= window.innerHeight && !cut,
                 text: name};
  }
  return out;
})()""".replace("HEADLINE", HEADLINE)


@pytest.fixture(scope="module")
def two_runs(server: Settings) -> str:
    """The experiment of two logged runs; the second run found the view saved by the first."""
    import mlflow

    _log(server.tracking_uri, "run-a", 0.25)
    parent = _log(server.tracking_uri, "run-b", 0.75)
    return str(mlflow.MlflowClient(server.tracking_uri).get_run(parent).info.experiment_id)


def test_the_view_is_saved_once_and_put_back_when_changed(server: Settings, two_runs: str) -> None:
    import mlflow

    client = mlflow.MlflowClient(server.tracking_uri)
    envelope = json.loads(client.get_experiment(two_runs).tags[mlflow_view.VIEW_TAG])
    assert envelope["name"] == mlflow_view.VIEW_NAME and envelope["updatedAt"] >= envelope["createdAt"]
    assert mlflow_view.ensure_view(client, two_runs) is False  # as saved: left alone
    client.set_experiment_tag(two_runs, mlflow_view.VIEW_TAG, json.dumps({**envelope, "name": "mine"}))
    assert mlflow_view.ensure_view(client, two_runs) is True
    again = json.loads(client.get_experiment(two_runs).tags[mlflow_view.VIEW_TAG])
    assert again["name"] == mlflow_view.VIEW_NAME and again["createdAt"] == envelope["createdAt"]


@pytest.mark.parametrize(
    ("page", "expression", "all_seen"),
    [
        pytest.param("CHART", CHARTS, True, id="the-view-charts-them-first"),
        pytest.param("TABLE", COLUMNS, True, id="the-view-tables-them-beside-the-run-names"),
        # the trap: MLflow's own layout charts every metric alphabetically, CI bounds among them
        pytest.param("own charts", CHARTS, False, id="mlflow-own-layout-does-not"),
    ],
)
def test_the_headline_measures_are_on_the_first_screen_for_both_runs(
    server: Settings, two_runs: str, tmp_path: Path, page: str, expression: str, all_seen: bool
) -> None:
    uri, count = server.tracking_uri, len(mlflow_view.HEADLINE_METRICS)
    own = f"{uri}/#/experiments/{two_runs}/runs?compareRunsMode=CHART"
    with Browser(tmp_path / "profile") as browser:
        _open(browser, own if page == "own charts" else mlflow_view.view_url(uri, two_runs, page))
        found = _poll(browser, expression, count, timeout_s=30 if all_seen else 10)
        text = browser.evaluate("document.body.innerText")[:1500]
    seen = {metric for metric, what in found.items() if what["seen"]}
    if not all_seen:
        assert seen != set(mlflow_view.HEADLINE_METRICS), (found, text)
        return
    assert seen == set(mlflow_view.HEADLINE_METRICS), (found, text)
    if page == "CHART":  # each chart compares both runs
        assert all("run-a" in c["text"] and "run-b" in c["text"] for c in found.values()), found
