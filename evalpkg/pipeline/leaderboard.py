"""Several scored runs side by side: model, agent design, test set and snapshot, accuracy and semantic
accuracy with their CIs, accuracy per task type, tool calls and latency; read from the scores each run
saved (no model is called, nothing is re-scored). A run on another test set or snapshot than the first
is marked, not mixed: its numbers answer other questions."""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from evalpkg.errors import DataError
from evalpkg.pipeline import store
from evalpkg.pipeline.metrics import breakdown
from evalpkg.pipeline.score import InstanceScore
from evalpkg.runconfig import RunConfig
from evalpkg.settings import Settings


@dataclass(frozen=True)
class Entry:
    run_id: str
    model: str
    design: str
    testset: str
    snapshot: str
    table: dict[str, dict[str, float]]
    comparable: bool  # same test set and snapshot as the first run

    @property
    def overall(self) -> dict[str, float]:
        return self.table["overall"]


def design(config: RunConfig) -> str:
    """The agent design in words: react with native tool calls, react with tool calls as text, or plan."""
    if config.agent != "openai":
        return config.agent
    if config.strategy == "plan":
        return "plan"
    return "react" if config.native_tools else "react (text)"


def entries(settings: Settings, run_ids: list[str]) -> list[Entry]:
    out: list[Entry] = []
    for run_id in run_ids:
        config, testset, snapshot, _ = store.load_run(settings, run_id)
        scores = [InstanceScore.model_validate(s) for s in store.saved_scores(settings, run_id)]
        if not scores:
            raise DataError(f"run {run_id} has no saved scores (`evalpkg score {run_id}` makes them)")
        first = out[0] if out else None
        comparable = first is None or (first.testset, first.snapshot) == (testset, snapshot)
        out.append(Entry(run_id, config.model, design(config), testset, snapshot, breakdown(scores), comparable))
    return out


def _rate(m: dict[str, float], key: str) -> str:
    if key not in m:
        return "-"
    ci = f" [{m[key + '_ci_low']:.1%},{m[key + '_ci_high']:.1%}]" if f"{key}_ci_low" in m else ""
    return f"{m[key]:.1%}{ci}"


def types_of(rows: list[Entry]) -> list[str]:
    return sorted({g.removeprefix("type.") for e in rows for g in e.table if g.startswith("type.")})


def cells(e: Entry, types: list[str]) -> list[str]:
    o = e.overall
    per_type = [_rate(e.table.get(f"type.{t}", {}), "accuracy").split(" ")[0] for t in types]
    return [
        e.run_id + ("" if e.comparable else " *"),
        e.model,
        e.design,
        f"{e.testset}/{e.snapshot}",
        _rate(o, "accuracy"),
        _rate(o, "semantic_accuracy"),
        *per_type,
        f"{o.get('avg_tool_calls', 0):.1f}",
        f"{o.get('latency_s_mean', 0):.1f}",
    ]


def headers(types: list[str]) -> list[str]:
    return ["run", "model", "design", "test set/snapshot", "accuracy", "semantic", *types, "calls", "latency s"]


def lines(rows: list[Entry]) -> list[str]:
    """The table as text, best accuracy first; a footnote where a run is not comparable."""
    types = types_of(rows)
    table = [headers(types), *(cells(e, types) for e in _ranked(rows))]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    if not all(e.comparable for e in rows):
        out.append("* another test set or snapshot than the first run: not comparable with the others")
    return out


def write_html(path: Path, rows: list[Entry]) -> Path:
    types = types_of(rows)
    head = "".join(f"<th>{html.escape(h.replace('_', ' '))}</th>" for h in headers(types))
    body = "".join(_row(e, types) for e in _ranked(rows))
    other = not all(e.comparable for e in rows)
    note = "<p>* another test set or snapshot than the first run: not comparable.</p>" if other else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'<!doctype html><html><head><meta charset="utf-8"><title>Leaderboard</title><style>{_STYLE}</style>'
        f"</head><body><h1>Leaderboard</h1><table><tr>{head}</tr>{body}</table>{note}</body></html>",
        encoding="utf-8",
    )
    return path


# one screen wide: headers, run ids, models and designs wrap, a CI goes under its number; a run that is
# not comparable is greyed
_STYLE = (
    "body{font:13px system-ui,sans-serif;margin:1em}table{border-collapse:collapse}"
    "th,td{border-bottom:1px solid #ddd;padding:3px 4px;text-align:right;vertical-align:top}"
    "th:nth-child(-n+4),td:nth-child(-n+4){text-align:left}td{white-space:nowrap}"
    "td:nth-child(-n+3){white-space:normal;overflow-wrap:anywhere;max-width:11em}small{color:#666;font-size:11px}"
    "td:first-child{min-width:9em}td:nth-child(3){min-width:7em}tr.other td{color:#888}"
)


def _row(e: Entry, types: list[str]) -> str:
    tds = "".join(
        f"<td>{_under(html.escape(c), SECOND_LINES.get(h))}</td>"
        for h, c in zip(headers(types), cells(e, types), strict=True)
    )
    return f'<tr class="{"" if e.comparable else "other"}">{tds}</tr>'


# Columns whose second part goes on a second, smaller line: where it starts, and what of the mark is kept
SECOND_LINES = {"test set/snapshot": ("/", ""), "accuracy": (" [", "["), "semantic": (" [", "[")}


def _under(text: str, split: tuple[str, str] | None) -> str:
    """A snapshot under its test set ("v9/eval-..."), a CI under its number ("45.8% [29.1%,66.7%]")."""
    if split is None or split[0] not in text:
        return text
    head, tail = text.split(split[0], 1)
    return f"{head}<br><small>{split[1]}{tail}</small>"


def _ranked(rows: list[Entry]) -> list[Entry]:
    """Comparable runs first, then by accuracy."""
    return sorted(rows, key=lambda e: (not e.comparable, -e.overall.get("accuracy", 0.0)))
