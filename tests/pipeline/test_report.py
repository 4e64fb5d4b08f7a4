"""The report opens at any size: a small page with every instance's row, trajectories in chunk files
read when a row is opened, written so that no reader ever sees half a report (no database needed)."""

from __future__ import annotations

import os
import pathlib
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evalpkg.pipeline import report_files
from evalpkg.pipeline.report_views import outcome
from tests.pipeline.cdp import Browser
from tests.pipeline.report_helpers import (
    FULL_RUN,
    RESULT_MARK,
    SyntheticRun,
    chunks,
    final_sql,
    folders,
    instance_table,
    synthetic_run,
)

FIRST_SCREEN_BYTES = 1_000_000
LOAD_S = 3.0


@pytest.fixture(scope="module")
def full_run() -> SyntheticRun:
    return synthetic_run(FULL_RUN)


@pytest.fixture(scope="module")
def full_report(full_run: SyntheticRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return full_run.write(tmp_path_factory.mktemp("full") / "report.html")


def test_the_first_screen_is_small_and_each_chunk_holds_only_its_trajectories(
    full_run: SyntheticRun, full_report: Path
) -> None:
    page = full_report.read_text("utf-8")
    folder = full_report.parent / instance_table(full_report).files
    total = sum(p.stat().st_size for p in folder.iterdir())
    print(f"\npage {len(page.encode()):,} bytes; {len(os.listdir(folder))} files beside it, {total:,} bytes")
    # the first screen is the page alone: it loads nothing eagerly (no script, style or image file)
    assert not re.search(r"<(script|img|link|iframe)\b[^>]*\b(src|href)=\"(?!data:)", page)
    assert len(page.encode()) < FIRST_SCREEN_BYTES
    assert RESULT_MARK not in page  # no trajectory inlined
    table = instance_table(full_report)
    rows = table.decoded()
    assert len(rows) == FULL_RUN == len({r["instance_id"] for r in rows})
    held = chunks(full_report)
    assert sorted(held) == list(range(table.chunks))
    for index, chunk in held.items():
        assert chunk.chunk == index
        assert [t.instance_id for t in chunk.trajectories] == [r["instance_id"] for r in rows if r["chunk"] == index]
    scores = {s.instance_id: s for s in full_run.scores}
    for chunk in held.values():
        for t in chunk.trajectories:
            assert t.final_sql == scores[t.instance_id].final_sql and RESULT_MARK in t.steps[0].calls[0].result
    outcomes = Counter(r["outcome"] for r in rows)
    assert outcomes == Counter(outcome(s) for s in full_run.scores) and len(outcomes) == 3
    # a chunk stops before CHUNK_BYTES (a trajectory here is ~8 KB): opening a row reads a few hundred KB
    assert max(p.stat().st_size for p in folder.glob("trajectories-*.js")) < report_files.CHUNK_BYTES + 100


@dataclass(frozen=True)
class Rewrite:
    reason: str
    other_run: bool  # the second write holds other trajectories (else the same report again)
    interrupt: str | None  # where the second write is stopped: "chunks", "page" or not at all


REWRITES = [
    Rewrite("the same report written again changes nothing", other_run=False, interrupt=None),
    Rewrite("a report written over another removes the earlier one's chunks", other_run=True, interrupt=None),
    Rewrite("stopped while writing chunks, the earlier report stays whole", other_run=True, interrupt="chunks"),
    Rewrite("stopped before the page is replaced, the earlier report stays whole", other_run=True, interrupt="page"),
]


def _snapshot(page: Path) -> dict[str, bytes]:
    return {str(p.relative_to(page.parent)): p.read_bytes() for p in page.parent.rglob("*") if p.is_file()}


def _stop_at(monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    def stop(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    if where == "page":
        monkeypatch.setattr(os, "replace", stop)  # report_files.publish swaps the page in with it
        return
    write_text, calls = pathlib.Path.write_text, []

    def second_call_stops(self: Path, *args: Any, **kwargs: Any) -> int:
        calls.append(self)
        return stop() if len(calls) == 2 else write_text(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", second_call_stops)


@pytest.mark.parametrize("case", REWRITES, ids=[c.reason for c in REWRITES])
def test_a_report_is_written_whole_or_not_at_all(
    case: Rewrite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_files, "CHUNK_BYTES", 30_000)  # several chunks from a few instances
    page = tmp_path / "report.html"
    synthetic_run(40).write(page)
    before = _snapshot(page)
    assert len(chunks(page)) > 3 and folders(page) == [instance_table(page).files.split("/")[1]]
    second = synthetic_run(41 if case.other_run else 40)
    if case.interrupt is None:
        second.write(page)
    else:
        with monkeypatch.context() as patched:
            _stop_at(patched, case.interrupt)
            with pytest.raises(KeyboardInterrupt):
                second.write(page)
        assert page.read_bytes() == before["report.html"]  # the earlier page, and every chunk it refers to
        assert {t.instance_id for c in chunks(page).values() for t in c.trajectories} == {
            r["instance_id"] for r in instance_table(page).decoded()
        }
        second.write(page)  # the next write finishes and clears what the stopped one left
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary page left
    assert folders(page) == [instance_table(page).files.split("/")[1]]  # no earlier or temporary folder
    assert len(instance_table(page).rows) == (41 if case.other_run else 40)
    if not case.other_run:
        assert _snapshot(page) == before


def _wait_for(browser: Browser, condition: str) -> Any:
    """Polls a JavaScript expression in the page until it is truthy (5 s at most) and returns it."""
    return browser.evaluate(
        f"new Promise((done, fail) => {{ const end = Date.now() + 5000; const poll = () => {{ const v = ({condition});"
        " if (v) done(v); else if (Date.now() > end) fail(new Error('timed out')); else setTimeout(poll, 20); }; poll(); })"
    )


def _choose(select: str, label: str) -> str:
    return (
        f"(() => {{ const s = document.getElementById('{select}');"
        f" s.value = [...s.options].find(o => o.text === {label!r}).value; s.dispatchEvent(new Event('change')); }})()"
    )


CLEAR_FILTERS = (
    "document.querySelectorAll('.filters select').forEach(s => { s.value = ''; });"
    "document.getElementById('f-text').value = ''; document.getElementById('f-text').dispatchEvent(new Event('input'))"
)


def _search(text: str) -> str:
    return f"(() => {{ const i = document.getElementById('f-text'); i.value = {text!r}; i.dispatchEvent(new Event('input')); }})()"


FIRST_SCREEN = {"width": 1280, "height": 720}  # a laptop's browser window

# Where each headline figure lies on the first screen: its label, its text and whether it is in view unscrolled
HEADLINE_FIGURES = (
    "[...document.querySelectorAll('.headline .figure')].map(f => { const r = f.getBoundingClientRect();"
    " return [f.querySelector('span').textContent, f.querySelector('b').textContent,"
    " r.top >= 0 && r.bottom <= window.innerHeight]; })"
)


def test_the_report_opens_filters_and_loads_a_trajectory_in_chromium(
    full_run: SyntheticRun, full_report: Path, tmp_path: Path
) -> None:
    scores = full_run.scores
    errors = sum(outcome(s) == "error" for s in scores)
    type_errors = sum(outcome(s) == "error" and s.type == "negation" for s in scores)
    task = scores[7].task_id
    filters = [  # why, what is chosen (after clearing every filter), how many rows are left
        ("no filter lists every instance", [], FULL_RUN),
        ("by outcome", [_choose("f-outcome", "error")], errors),
        ("by outcome and task type", [_choose("f-outcome", "error"), _choose("f-type", "negation")], type_errors),
        ("by task id: its variants and repeats", [_search(task)], sum(s.task_id == task for s in scores)),
        (
            "by error cluster",
            [_choose("f-cluster", "1: wrong_result")],
            sum(v == 1 for v in full_run.assignment.values()),
        ),
    ]
    accuracy = sum(s.correct for s in scores) / len(scores)
    with Browser(tmp_path / "profile") as browser:
        browser.send("Page.enable")
        browser.send("Emulation.setDeviceMetricsOverride", **FIRST_SCREEN, deviceScaleFactor=1, mobile=False)
        started = time.monotonic()
        browser.send("Page.navigate", url=full_report.as_uri())
        browser.wait_for("Page.loadEventFired")
        wall = time.monotonic() - started
        load_ms = browser.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
        print(f"\nloaded in {load_ms:.0f} ms (navigation timing), {wall:.2f} s from navigate to load event")
        assert load_ms < LOAD_S * 1000 and wall < LOAD_S
        # the numbers a person looks for first are on the first screen, unscrolled
        assert browser.evaluate(HEADLINE_FIGURES) == [
            ["accuracy", f"{accuracy:.1%}", True],
            ["semantic accuracy", "not measured (snapshot only)", True],
        ]
        for why, chosen, rows in filters:
            browser.evaluate(";".join([CLEAR_FILTERS, *chosen]))
            shown = f"{rows} of {FULL_RUN} instances"
            assert _wait_for(browser, f"document.getElementById('f-count').textContent === {shown!r}"), why
            listed = browser.evaluate("document.querySelectorAll('#instances tbody tr.row').length")
            assert listed == min(rows, 100), why  # a page of rows at a time
        assert not browser.evaluate("[...document.scripts].filter(s => s.src).length")  # no chunk read yet
        browser.evaluate("document.querySelector('#instances tbody tr.row').click()")
        opened = browser.evaluate("document.querySelector('#instances tbody tr.row').dataset.instance")
        sql = final_sql(next(i for i, s in enumerate(scores) if s.instance_id == opened))
        assert _wait_for(browser, "document.querySelector('.final-sql')?.textContent") == sql
        assert browser.evaluate("document.querySelector('.call-sql').textContent") == sql  # a tool call's, in its step
        table = instance_table(full_report)
        chunk = next(r["chunk"] for r in table.decoded() if r["instance_id"] == opened)
        loaded = browser.evaluate("[...document.scripts].filter(s => s.src).map(s => s.src)")
        assert loaded == [(full_report.parent / table.files / report_files.chunk_name(chunk)).as_uri()]
        state_rows = sum(s.slot_accuracy is not None for s in scores)
        browser.evaluate("document.querySelector('button[data-table=state]').click()")
        assert _wait_for(browser, f"document.querySelectorAll('#full-state tr').length === {state_rows + 1}")


def test_the_first_screen_says_what_was_run_and_how_well(tmp_path: Path) -> None:
    from evalpkg.pipeline.cluster import Cluster
    from evalpkg.pipeline.report import headline

    run = synthetic_run(200)
    page = run.write(tmp_path / "report.html").read_text("utf-8")
    top = page[: page.index("<h2>Every measure</h2>")]  # the headline comes before every other table
    accuracy = sum(s.correct for s in run.scores) / len(run.scores)
    assert f"<b>{accuracy:.1%}</b>" in top and "not measured (snapshot only)" in top
    assert all(f"<td>{t}</td>" in top for t in {s.type for s in run.scores})  # accuracy per type

    table = {
        "overall": {
            "instances": 60.0,
            "accuracy": 0.5,
            "accuracy_ci_low": 0.4,
            "accuracy_ci_high": 0.6,
            "semantic_accuracy": 0.45,
            "semantic_accuracy_ci_low": 0.3,
            "semantic_accuracy_ci_high": 0.55,
        },
        "difficulty.hard": {"instances": 20.0, "accuracy": 0.25},
    }
    clusters = [Cluster(0, 3, "wrong time column", [], []), Cluster(1, 9, "unit not converted", [], [])]
    config = {"model": "m", "agent": "openai", "strategy": "plan", "testset_version": "v7"}
    shown = headline(config, table, clusters)
    assert "50.0% (95% CI 40.0%-60.0%)" in shown and "45.0% (95% CI 30.0%-55.0%)" in shown
    assert "plan objects" in shown and "<td>hard</td>" in shown and "25.0%" in shown
    assert "Failed most: unit not converted (9 instances)" in shown
