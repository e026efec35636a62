"""What the workflow page draws: every step with its state and parents, or, for a large workflow, counts per layer.

Up to ``GRAPH_STEPS`` steps the picture is exact: each step, coloured by its
task's state, placed by its depth (the longest path of parents above it).
Beyond, drawing every node would be unreadable and costly to read, so the
picture is per layer: how many steps of that depth are done, failed, or
neither, from the workflow's own record (its done and failed sets and the
steps' list written at creation), with no task read. Past ``SUMMARY_MAX`` steps
there is no picture at all (the page's counts and table remain).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from django_redisq.ops.workflows import StepView, WorkflowView, describe
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.workflows import WorkflowStore

GRAPH_STEPS = 100
"""Workflows up to this many steps are drawn step by step."""
SUMMARY_MAX = 10_000
"""Workflows up to this many steps are drawn as counts per layer; larger ones are not drawn."""
DONE, FAILED, OTHER = "done", "failed", "not done"
"""The states a layer's counts use (a large workflow's steps are not read one by one)."""


@dataclass(frozen=True, slots=True)
class GraphStep:
    index: int
    task: str
    state: str  # the task's stored state, or "waiting"
    parents: list[int]
    depth: int
    task_id: str
    queue: str


@dataclass(frozen=True, slots=True)
class WorkflowGraph:
    """``steps`` when the workflow has at most ``GRAPH_STEPS`` steps, else ``layers`` (per depth: state -> count)."""

    total: int
    steps: list[GraphStep] = field(default_factory=list)
    layers: list[dict[str, int]] = field(default_factory=list)


def depths(parents: Sequence[Sequence[int]]) -> list[int]:
    """Each step's depth: 0 without parents, else one more than its deepest parent (a parent out of range counts 0)."""
    n = len(parents)
    depth: list[int | None] = [None] * n
    for start in range(n):
        stack = [start]
        while stack:  # iterative: a chain of thousands must not hit the recursion limit
            i = stack[-1]
            if depth[i] is not None:
                stack.pop()
                continue
            todo = [p for p in parents[i] if 0 <= p < n and p != i and depth[p] is None and p not in stack]
            if todo:
                stack.extend(todo)
                continue
            depth[i] = 1 + max((depth[p] or 0 for p in parents[i] if 0 <= p < n and p != i and depth[p] is not None), default=-1)
            stack.pop()
    return [d or 0 for d in depth]


def graph(view: WorkflowView) -> WorkflowGraph | None:
    """The picture of ``view``'s workflow (None past ``SUMMARY_MAX`` steps); a bounded read beyond the view's own."""
    if view.total <= GRAPH_STEPS:
        steps: list[StepView] = view.steps
        if view.offset != 0 or len(view.steps) < view.total:
            steps = describe(view.id, view.alias, offset=0, limit=GRAPH_STEPS).steps
        d = depths([s.parents for s in steps])
        return WorkflowGraph(view.total, steps=[GraphStep(s.index, s.task, s.state, list(s.parents), d[n], s.task_id, s.queue)
                                                 for n, s in enumerate(steps)])
    if view.total > SUMMARY_MAX:
        return None
    store = WorkflowStore(Broker(get_options(view.alias)))
    summary = store.summary(view.id)
    parents = [[p for p in s.get("p", []) if isinstance(p, int)] if isinstance(s, dict) else [] for s in summary]
    done = store.done_among(view.id, range(len(parents)))
    header = store.header(view.id)
    failed = header.failed if header else set()
    layers: list[dict[str, int]] = []
    for i, depth in enumerate(depths(parents)):
        while len(layers) <= depth:
            layers.append({DONE: 0, FAILED: 0, OTHER: 0})
        layers[depth][DONE if i in done else FAILED if i in failed else OTHER] += 1
    return WorkflowGraph(view.total, layers=layers)
