"""A self-contained HTML report per run: plots embedded as PNG data, tables, error clusters, and a
drill-down into every trajectory."""

from __future__ import annotations

import base64
import html
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

from evalpkg.agent.trajectory import Trajectory
from evalpkg.pipeline.cluster import Cluster
from evalpkg.pipeline.score import InstanceScore
from evalpkg.testset.models import Difficulty, TaskType

CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f3f3f3}.ok{color:#107010}.bad{color:#b01010}details{margin:2px 0}
pre{background:#f7f7f7;padding:6px;white-space:pre-wrap;font-size:12px}img{max-width:560px;margin:4px}"""


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return f'<img alt="plot" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _plots(scores: list[InstanceScore], clusters: list[Cluster]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    types, levels = list(TaskType), list(Difficulty)
    grid = [[float("nan")] * len(levels) for _ in types]
    for i, t in enumerate(types):
        for j, d in enumerate(levels):
            cell = [s.correct for s in scores if s.type == t.value and s.difficulty == d.value]
            if cell:
                grid[i][j] = sum(cell) / len(cell)
    fig, ax = plt.subplots(figsize=(5, 4))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn")
    ax.set_xticks(range(len(levels)), [d.value for d in levels])
    ax.set_yticks(range(len(types)), [t.value for t in types])
    for i in range(len(types)):
        for j in range(len(levels)):
            if grid[i][j] == grid[i][j]:
                ax.text(j, i, f"{grid[i][j]:.0%}", ha="center", va="center", fontsize=8)
    ax.set_title("accuracy by type x difficulty")
    fig.colorbar(im)
    out.append(_png(fig))
    plt.close(fig)
    for title, values, bins in (
        ("tool calls per instance", [s.tool_calls for s in scores], 15),
        ("latency per instance (s)", [s.latency_s for s in scores], 30),
    ):
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.hist(values, bins=bins, color="#4a78b0")
        ax.set_title(title)
        out.append(_png(fig))
        plt.close(fig)
    names = Counter(n for s in scores for n in s.tool_names)
    if names:
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.barh(list(names), list(names.values()), color="#7a5fa8")
        ax.set_title("tool calls by tool")
        out.append(_png(fig))
        plt.close(fig)
    if clusters:
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.barh([c.name[:40] for c in clusters], [c.size for c in clusters], color="#b0604a")
        ax.set_title("error clusters")
        out.append(_png(fig))
        plt.close(fig)
    return out


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>none</p>"
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r.values()) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


REPEAT_MEASURES = ("best_of_k", "pass_all_k", "consistency")  # over a run's k repeats (metrics.repeat_metrics)


def _with_ci(m: dict[str, float], key: str) -> str:
    """A measure with its 95% CI over tasks, in one cell."""
    return f"{m[key]:.3f} [{m[key + '_ci_low']:.3f}, {m[key + '_ci_high']:.3f}]"


def write_report(
    path: Path,
    run_id: str,
    config: dict[str, Any],
    table: dict[str, dict[str, float]],
    scores: list[InstanceScore],
    clusters: list[Cluster],
    trajectories: list[Trajectory],
) -> Path:
    overall = table.get("overall", {})
    repeated = REPEAT_MEASURES if overall.get("repeats", 1) > 1 else ()  # with one repeat they are the accuracy
    groups = [
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
    by_traj = {t.instance_id: t for t in trajectories}
    drill = []
    for s in sorted(scores, key=lambda s: (s.correct, s.instance_id)):
        t = by_traj.get(s.instance_id)
        mark = '<span class="ok">✓</span>' if s.correct else '<span class="bad">✗</span>'
        calls = "".join(
            f"<details><summary>{html.escape(c.name)} {'ok' if c.ok else 'error'}</summary><pre>"
            f"{html.escape(json.dumps(c.arguments, ensure_ascii=False)[:2000])}\n→ {html.escape(c.result[:3000])}</pre>"
            f"</details>"
            for c in (t.tool_calls() if t else [])
        )
        drill.append(
            f"<details><summary>{mark} {html.escape(s.instance_id)} · {s.type}/{s.difficulty} · {s.stop_reason}"
            f"</summary><p><b>Q:</b> {html.escape(t.question if t else '')}</p>"
            f"<p><b>Answer:</b> {html.escape(t.final_answer if t else '')}</p>"
            f"<pre>{html.escape(s.final_sql or '(no SQL)')}</pre>{_final_state(t)}{calls}</details>"
        )
    cluster_rows = [
        {"cluster": c.cluster, "size": c.size, "name": c.name, "examples": ", ".join(c.examples)} for c in clusters
    ]
    coincidental = [
        {"instance": s.instance_id, "type": s.type, "misses in": "; ".join(s.world_misses)}
        for s in scores
        if s.correct and s.world_misses
    ]
    semantic = (
        "<p>Not measured: no reference world is built (<code>evalpkg testset worlds</code> builds them).</p>"
        if "semantic_accuracy" not in overall
        else _table(coincidental)
        if coincidental
        else "<p>None: every match on the snapshot also matches in every reference world.</p>"
    )
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>EMR agent run {html.escape(run_id)}</title>
<style>{CSS}</style></head><body>
<h1>Run {html.escape(run_id)}</h1>
<p>model <b>{html.escape(str(config.get("model")))}</b>, agent {html.escape(str(config.get("agent")))},
test set {html.escape(str(config.get("testset_version")))}, {int(overall.get("instances", 0))} instances</p>
<h2>Overall</h2>{_table([{k: v for k, v in overall.items()}])}
<h2>Plots</h2>{"".join(_plots(scores, clusters))}
<h2>By type, difficulty and complexity</h2>{_table(groups)}
<h2>Matches on the snapshot only (coincidental)</h2>{semantic}
<h2>Dialogue state</h2>{_state_section(scores)}
<h2>Error clusters</h2>{_table(cluster_rows)}
<h2>Trajectories</h2>{"".join(drill)}
<h2>Configuration</h2><pre>{html.escape(json.dumps(config, ensure_ascii=False, indent=2))}</pre>
</body></html>"""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc, encoding="utf-8")
    return path


def _state_section(scores: list[InstanceScore]) -> str:
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
    return _table(rows) if rows else "<p>No instance has a hidden slot or a question about a filled slot.</p>"


def _final_state(t: Trajectory | None) -> str:
    state = t.final_state() if t else None
    if state is None:
        return ""
    slots = {k: v.current for k, v in state.slots.items() if v.current}
    return (
        f"<p><b>State:</b> {html.escape(json.dumps(slots, ensure_ascii=False))}; missing "
        f"{html.escape(', '.join(state.missing_slots) or 'none')}</p>"
    )
