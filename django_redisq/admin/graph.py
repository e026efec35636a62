"""The workflow page's picture, drawn here as inline SVG: no JavaScript, no file, nothing to load.

Steps are boxes in rows by depth (a step's parents are all in rows above it),
at most ``PER_ROW`` to a row (a wide layer wraps onto more rows), joined to
their parents by lines and coloured by state; the SVG scales down to the
width it is given (``viewBox``), so it fits a narrow window. A large
workflow (ops/graph.py) is drawn as one bar per layer, split by state, with
its counts.
"""

from __future__ import annotations

from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from django_redisq.ops.graph import DONE, FAILED, OTHER, WorkflowGraph

PER_ROW = 10
NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 60, 22, 12, 26, 10
COLOURS = {  # state -> fill; text is white on each
    "finished": "#2e7d32", "succeeded": "#2e7d32", DONE: "#2e7d32",
    "dead": "#ba2121", "failed": "#ba2121", FAILED: "#ba2121", "cancelled": "#6d4c41",
    "running": "#1565c0", "pending": "#8a6d00", "scheduled": "#8a6d00", "held": "#1565c0",
    "waiting": "#757575", OTHER: "#757575",
}
LEGEND = (("finished", "done"), ("running", "running"), ("pending", "pending or scheduled"), ("dead", "dead (failed)"),
          ("waiting", "waiting for its parents"))


def colour(state: str) -> str:
    return COLOURS.get(state, "#757575")


def svg(g: WorkflowGraph, alias: str) -> SafeString:
    """The picture of ``g``: its steps and edges, or its layers' counts."""
    return _steps(g, alias) if g.steps else _layers(g)


def _steps(g: WorkflowGraph, alias: str) -> SafeString:
    rows: list[list[int]] = []  # row -> step indexes; a layer of more than PER_ROW steps takes several rows
    where: dict[int, tuple[float, float]] = {}
    for depth in range(max(s.depth for s in g.steps) + 1):
        layer = [s.index for s in g.steps if s.depth == depth]
        rows += [layer[i:i + PER_ROW] for i in range(0, len(layer), PER_ROW)]
    width = PAD * 2 + PER_ROW * NODE_W + (PER_ROW - 1) * GAP_X
    for r, row in enumerate(rows):
        left = PAD + (width - 2 * PAD - (len(row) * NODE_W + (len(row) - 1) * GAP_X)) / 2  # each row centred
        for c, index in enumerate(row):
            where[index] = (left + c * (NODE_W + GAP_X), PAD + r * (NODE_H + GAP_Y))
    height = PAD * 2 + len(rows) * NODE_H + (len(rows) - 1) * GAP_Y
    out = [_open(width, height, f"{len(g.steps)} steps by depth, coloured by state")]
    for s in g.steps:
        x, y = where[s.index]
        for p in s.parents:
            if p in where:
                px, py = where[p]
                out.append(f'<line class="redisq-edge" x1="{px + NODE_W / 2:.1f}" y1="{py + NODE_H:.1f}" '
                           f'x2="{x + NODE_W / 2:.1f}" y2="{y:.1f}" stroke="#9e9e9e" stroke-width="1"/>')
    for s in g.steps:
        x, y = where[s.index]
        label = f"#{s.index} {s.task} ({s.state})"
        node = (f'<g class="redisq-node redisq-node-{escape(s.state)}" data-index="{s.index}"><title>{escape(label)}</title>'
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{NODE_W}" height="{NODE_H}" rx="4" fill="{colour(s.state)}"/>'
                f'<text x="{x + NODE_W / 2:.1f}" y="{y + 15:.1f}" text-anchor="middle" font-size="12" fill="#fff">{s.index}</text></g>')
        if s.state != "waiting" and s.queue:
            href = reverse("admin:django_redisq_deadletter_detail", args=[alias, s.queue, s.task_id])
            node = f'<a href="{escape(href)}">{node}</a>'
        out.append(node)
    out.append("</svg>")
    return mark_safe("".join(out))


def _layers(g: WorkflowGraph) -> SafeString:
    bar_w, label_w, row_h = 480, 150, 26
    width = PAD * 2 + label_w + bar_w
    height = PAD * 2 + len(g.layers) * row_h
    out = [_open(width, height, f"{g.total} steps in {len(g.layers)} layers: counts by state")]
    for d, counts in enumerate(g.layers):
        total = sum(counts.values()) or 1
        y = PAD + d * row_h
        out.append(f'<text x="{PAD}" y="{y + 15}" font-size="12" class="redisq-layer-label">depth {d}: {total:,} steps</text>')
        x = float(PAD + label_w)
        for state in (DONE, FAILED, OTHER):
            n = counts.get(state, 0)
            if not n:
                continue
            w = bar_w * n / total
            out.append(f'<rect class="redisq-layer redisq-layer-{state.replace(" ", "-")}" x="{x:.1f}" y="{y}" width="{w:.1f}" '
                       f'height="{row_h - 6}" fill="{colour(state)}"><title>depth {d}: {n:,} {state}</title></rect>')
            if w > 40:
                out.append(f'<text x="{x + 4:.1f}" y="{y + 14}" font-size="11" fill="#fff">{n:,}</text>')
            x += w
    out.append("</svg>")
    return mark_safe("".join(out))


def _open(width: float, height: float, title: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" id="redisq-workflow-graph" role="img" viewBox="0 0 {width:.0f} {height:.0f}" '
            f'width="{width:.0f}"><title>{escape(title)}</title>')
