"""The report's plots, each a PNG embedded in the page as data (nothing fetched from elsewhere)."""

from __future__ import annotations

import base64
import io
from collections import Counter
from typing import Any

from evalpkg.pipeline.cluster import Cluster
from evalpkg.pipeline.score import InstanceScore
from evalpkg.testset.models import Difficulty, TaskType


def png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return f'<img alt="plot" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def plots(scores: list[InstanceScore], clusters: list[Cluster]) -> list[str]:
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
    out.append(png(fig))
    plt.close(fig)
    for title, values, bins in (
        ("tool calls per instance", [s.tool_calls for s in scores], 15),
        ("latency per instance (s)", [s.latency_s for s in scores], 30),
    ):
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.hist(values, bins=bins, color="#4a78b0")
        ax.set_title(title)
        out.append(png(fig))
        plt.close(fig)
    names = Counter(n for s in scores for n in s.tool_names)
    if names:
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.barh(list(names), list(names.values()), color="#7a5fa8")
        ax.set_title("tool calls by tool")
        out.append(png(fig))
        plt.close(fig)
    if clusters:
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.barh([c.name[:40] for c in clusters], [c.size for c in clusters], color="#b0604a")
        ax.set_title("error clusters")
        out.append(png(fig))
        plt.close(fig)
    return out
