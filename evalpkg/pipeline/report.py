"""A report per run that opens at any size. The page holds the summary, plots (PNG data), tables,
error clusters and one short row per instance, with filters by id, task type, difficulty, outcome and
error cluster; a trajectory's drill-down is read from the files beside the page when its row is opened
(report_files.py says how they are laid out and written)."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalpkg.agent.trajectory import Trajectory
from evalpkg.pipeline.cluster import Cluster
from evalpkg.pipeline.report_files import (
    chunk_name,
    chunk_script,
    chunked,
    digest,
    files_folder,
    publish,
    script_json,
    table_name,
    table_script,
)
from evalpkg.pipeline.report_plots import plots
from evalpkg.pipeline.report_views import instance_table, trajectory_view
from evalpkg.pipeline.score import InstanceScore

ASSETS = Path(__file__).with_name("report_assets")
INLINE_ROWS = 100  # rows of a per-instance table shown in the page; the rest are read on request
REPEAT_MEASURES = ("best_of_k", "pass_all_k", "consistency")  # over a run's k repeats (metrics.repeat_metrics)
INSTANCES = """<div class="filters">
<input id="f-text" type="search" placeholder="task or instance id" aria-label="task or instance id">
<select id="f-type" aria-label="task type"></select><select id="f-difficulty" aria-label="difficulty"></select>
<select id="f-outcome" aria-label="outcome"></select><select id="f-cluster" aria-label="error cluster"></select>
<span id="f-count"></span></div>
<noscript><p>The instance table and the trajectories need JavaScript.</p></noscript>
<table id="instances"><thead><tr><th>instance</th><th>type</th><th>difficulty</th><th>outcome</th><th>stop</th>
<th>error cluster</th></tr></thead><tbody></tbody></table>
<p><button id="p-prev">previous</button> <span id="p-at"></span> <button id="p-next">next</button></p>"""


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r.values()) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def _long_table(name: str, rows: list[dict[str, Any]], files: dict[str, str]) -> str:
    """A table with a row per instance: its first INLINE_ROWS in the page, all of them in a file beside
    it that the 'show all' button reads, so a large run's page stays small."""
    if len(rows) <= INLINE_ROWS:
        return _table(rows)
    files[table_name(name)] = table_script(name, _table(rows))
    return (
        f'<div id="full-{name}">{_table(rows[:INLINE_ROWS])}<p>The first {INLINE_ROWS} of {len(rows)} rows. '
        f'<button data-table="{name}">Show all {len(rows)}</button></p></div>'
    )


def _with_ci(m: dict[str, float], key: str) -> str:
    """A measure with its 95% CI over tasks, in one cell."""
    return f"{m[key]:.3f} [{m[key + '_ci_low']:.3f}, {m[key + '_ci_high']:.3f}]"


def _group_rows(table: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """A row per task type, difficulty and complexity: its main measures, and over repeats their CIs."""
    repeated = REPEAT_MEASURES if table.get("overall", {}).get("repeats", 1) > 1 else ()  # one repeat: accuracy
    return [
        {
            "group": g,
            **{
                k: v
                for k, v in m.items()
                if k in ("instances", "accuracy", "exec_match", "avg_tool_calls", "expected_call_recall")
            },
            **{k: _with_ci(m, k) for k in repeated},
        }
        for g, m in table.items()
        if g.startswith(("type.", "difficulty.", "complexity."))
    ]


def _trajectory_chunks(
    ordered: list[InstanceScore], trajectories: list[Trajectory], files: dict[str, str]
) -> dict[str, int]:
    """Write the trajectories' drill-downs into `files` in chunks; returns instance id -> its chunk."""
    by_id = {t.instance_id: t for t in trajectories}
    chunk_of: dict[str, int] = {}
    for i, views in enumerate(chunked([trajectory_view(s, by_id.get(s.instance_id)) for s in ordered])):
        files[chunk_name(i)] = chunk_script(i, views)
        chunk_of |= dict.fromkeys((v.instance_id for v in views), i)
    return chunk_of


def _coincidental_section(scores: list[InstanceScore], overall: dict[str, float], files: dict[str, str]) -> str:
    """The correct instances whose match holds on the snapshot only, not in every reference world."""
    coincidental = [
        {"instance": s.instance_id, "type": s.type, "misses in": "; ".join(s.world_misses)}
        for s in scores
        if s.correct and s.world_misses
    ]
    return (
        "<p>Not measured: the run scored its snapshot only (<code>--no-reference-worlds</code>).</p>"
        if "semantic_accuracy" not in overall
        else _long_table("coincidental", coincidental, files)
        if coincidental
        else "<p>None: every match on the snapshot also matches in every reference world.</p>"
    )


def write_report(
    path: Path,
    run_id: str,
    config: dict[str, Any],
    table: dict[str, dict[str, float]],
    scores: list[InstanceScore],
    clusters: list[Cluster],
    trajectories: list[Trajectory],
    assignment: Mapping[str, int],
) -> Path:
    """Write the page at `path` and its files in `<stem>_files/` beside it. `assignment` (failed instance
    id -> its error cluster, as scoring made them) lets the table filter by error cluster."""
    overall = table.get("overall", {})
    ordered = sorted(scores, key=lambda s: (s.correct, s.instance_id))  # the failures first
    files: dict[str, str] = {}
    chunk_of = _trajectory_chunks(ordered, trajectories, files)
    semantic = _coincidental_section(scores, overall, files)
    state = _state_section(scores, files)
    folder = digest(files)  # every file is written by now: the folder's name says what it holds
    index = instance_table(ordered, chunk_of, clusters, assignment)
    index.files = f"{files_folder(path).name}/{folder}"
    cluster_rows = [
        {"cluster": c.cluster, "size": c.size, "name": c.name, "examples": ", ".join(c.examples)} for c in clusters
    ]
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>EMR agent run {html.escape(run_id)}</title>
<style>{(ASSETS / "report.css").read_text(encoding="utf-8")}</style></head><body>
<h1>Run {html.escape(run_id)}</h1>
{headline(config, table, clusters)}
<h2>Every measure</h2>{_table([{k: v for k, v in overall.items()}])}
<h2>Plots</h2>{"".join(plots(scores, clusters))}
<h2>By type, difficulty and complexity</h2>{_table(_group_rows(table))}
<h2>Matches on the snapshot only (coincidental)</h2>{semantic}
<h2>Dialogue state</h2>{state}
<h2>Follow-up dialogues</h2>{_followup_section(scores, files)}
<h2>Error clusters</h2>{_table(cluster_rows)}
<h2>Instances</h2><p>Click a row for its trajectory: steps, tool calls, SQL and answer.</p>{INSTANCES}
<h2>Configuration</h2><pre>{html.escape(json.dumps(config, ensure_ascii=False, indent=2))}</pre>
<script type="application/json" id="instance-table">{script_json(index.model_dump_json())}</script>
<script>{(ASSETS / "report.js").read_text(encoding="utf-8")}</script>
</body></html>"""
    publish(path, doc, files, folder)
    return path


def headline(config: dict[str, Any], table: dict[str, dict[str, float]], clusters: list[Cluster]) -> str:
    """The first screen: what was evaluated, accuracy and semantic accuracy with their CIs, per type and
    difficulty, and what failed most."""
    overall = table.get("overall", {})
    design = "plan objects" if config.get("strategy") == "plan" else "tool calls"
    if config.get("native_tools") is False:
        design += " written as text"
    what = (
        f"model <b>{html.escape(str(config.get('model')))}</b>, agent {html.escape(str(config.get('agent')))} "
        f"({design}), test set {html.escape(str(config.get('testset_version')))}, "
        f"{int(overall.get('instances', 0))} instances"
    )
    numbers = [("accuracy", _percent(overall, "accuracy"))]
    numbers.append(
        ("semantic accuracy", _percent(overall, "semantic_accuracy"))
        if "semantic_accuracy" in overall
        else ("semantic accuracy", "not measured (snapshot only)")
    )
    cells = "".join(f'<div class="figure"><span>{name}</span><b>{value}</b></div>' for name, value in numbers)
    breakdown = [
        {
            "group": g.partition(".")[2],
            "by": g.partition(".")[0],
            "instances": int(m.get("instances", 0)),
            "accuracy": f"{m['accuracy']:.1%}",
        }
        for g, m in table.items()
        if g.startswith(("type.", "difficulty.")) and "accuracy" in m
    ]
    worst = max(clusters, key=lambda c: c.size, default=None)
    failed = f"<p>Failed most: {html.escape(worst.name)} ({worst.size} instances).</p>" if worst else ""
    return f'<section class="headline"><p>{what}</p>{cells}{_table(breakdown)}{failed}</section>'


def _percent(m: dict[str, float], key: str) -> str:
    """A rate with its 95% CI where the run has one."""
    if f"{key}_ci_low" in m:
        return f"{m[key]:.1%} (95% CI {m[key + '_ci_low']:.1%}-{m[key + '_ci_high']:.1%})"
    return f"{m[key]:.1%}"


def _followup_section(scores: list[InstanceScore], files: dict[str, str]) -> str:
    """Per dialogue with follow-ups graded on their own: each turn's outcome, the broken dialogues first."""
    kept = sorted((s for s in scores if len(s.turn_correct) > 1), key=lambda s: (all(s.turn_correct), s.instance_id))
    if not kept:
        return "<p>None: no instance has a follow-up with its own gold.</p>"
    rows = [
        {
            "instance": s.instance_id,
            "turns": " ".join("right" if ok else "WRONG" for ok in s.turn_correct),
            "dialogue": "right" if all(s.turn_correct) else "wrong",
            "answer points": " ".join("-" if c is None else f"{c:.2f}" for c in s.turn_coverage),
        }
        for s in kept
    ]
    return _long_table("followups", rows, files)


def _state_section(scores: list[InstanceScore], files: dict[str, str]) -> str:
    """Per instance with a dialogue state (toolset emr-v1+state): its slot scores, the imperfect first."""
    kept = [s for s in scores if s.questions_about_filled_slots is not None]
    if not kept:
        return "<p>Not kept: the run's toolset has no dialogue state (<code>--toolset emr-v1+state</code>).</p>"
    rows = [
        {
            "instance": s.instance_id,
            "slot accuracy": "-" if s.slot_accuracy is None else s.slot_accuracy,
            "wrong slots": s.wrong_slots or "-",
            "questions about filled slots": s.questions_about_filled_slots,
            "turns to complete state": "never" if s.turns_to_complete_state is None else s.turns_to_complete_state,
        }
        for s in sorted(kept, key=lambda s: (s.slot_accuracy in (None, 1.0), s.instance_id))
        if s.slot_accuracy is not None or s.questions_about_filled_slots
    ]
    if not rows:
        return "<p>No instance has a hidden slot or a question about a filled slot.</p>"
    return _long_table("state", rows, files)
