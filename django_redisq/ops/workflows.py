"""What operators read of one workflow: each step's state, timing, attempts and where to find it.

The admin's workflow page and ``manage.py redisq workflow`` show the same
``WorkflowView``; both go through here, never to the store.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django_redisq.core.clock import ms_to_datetime
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.workflows import INDEX_KEPT, WorkflowStore
from django_redisq.workflows.canvas import parse_step_id
from django_redisq.workflows.result import PAGE, WorkflowNotFound, WorkflowResult
from django_redisq.workflows.steps import UNREGISTERED, is_unregistered

MAX_PAGE = 1000
"""Most steps one page of ``describe`` shows."""
AFTER_SHOWN = 10
"""Parents a step's row names before it abbreviates them."""

__all__ = ["MAX_PAGE", "PAGE", "StepView", "WorkflowList", "WorkflowNotFound", "WorkflowRow", "WorkflowView", "describe",
           "families", "newest", "repair", "resume_replayed", "totals", "workflow_of"]


def previous_page(offset: int, limit: int) -> int | None:
    """The offset of the page before the one at ``offset`` (pages of ``limit``), None on the first."""
    return max(0, offset - limit) if offset > 0 else None


def next_page(offset: int, limit: int, total: int) -> int | None:
    """The offset of the page after the one at ``offset``, None on the last of ``total`` rows."""
    return offset + limit if offset + limit < total else None


@dataclass(frozen=True, slots=True)
class StepView:
    index: int
    task_id: str
    task: str
    queue: str
    state: str  # the task's stored state; "waiting" until its parents are done (or for good, once the workflow failed)
    status: str  # Django's status of the step's result
    parents: list[int]
    enqueued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    attempts: int
    error: str
    unregistered: bool = False  # its task path is no longer registered (renamed or removed by a deploy)

    @property
    def dead(self) -> bool:
        return self.state == "dead"

    @property
    def after(self) -> str:
        return self.after_text()

    def after_text(self, sep: str = ", ") -> str:
        """Its parents, the first few and the last when there are many (a chord's callback has one per member)."""
        p = self.parents
        shown = sep.join(map(str, p if len(p) <= AFTER_SHOWN else p[:AFTER_SHOWN - 1]))
        return shown if len(p) <= AFTER_SHOWN else f"{shown}{sep}…{p[-1]} ({len(p):,} steps)"


@dataclass(frozen=True, slots=True)
class WorkflowView:
    id: str
    alias: str
    status: str
    stored_status: str  # running, succeeded, failed, cancelled (the workflow's own record)
    error: str
    created_at: datetime | None
    finished_at: datetime | None
    steps: list[StepView] = field(default_factory=list)
    total: int = 0
    done: int = 0  # steps done (the store's count), and failed ones: no step's data is read for either
    failed: int = 0
    offset: int = 0  # the page shown: steps[offset:offset + limit]
    limit: int = PAGE

    @property
    def last_index(self) -> int:
        return self.offset + len(self.steps) - 1

    @property
    def previous_offset(self) -> int | None:
        return previous_page(self.offset, self.limit)

    @property
    def next_offset(self) -> int | None:
        return next_page(self.offset, self.limit, self.total)

    def as_json(self) -> dict[str, Any]:
        def when(d: datetime | None) -> str | None:
            return d.isoformat() if d else None

        return {"id": self.id, "backend": self.alias, "status": self.status, "stored_status": self.stored_status, "error": self.error,
                "created_at": when(self.created_at), "finished_at": when(self.finished_at),
                "total": self.total, "done": self.done, "failed": self.failed, "offset": self.offset, "limit": self.limit,
                "steps": [{"index": s.index, "task_id": s.task_id, "task": s.task, "queue": s.queue, "state": s.state,
                           "status": s.status, "parents": s.parents, "enqueued_at": when(s.enqueued_at),
                           "started_at": when(s.started_at), "finished_at": when(s.finished_at), "attempts": s.attempts,
                           "error": s.error, "unregistered": s.unregistered} for s in self.steps]}


def describe(workflow_id: str, alias: str = "default", offset: int = 0, limit: int = PAGE) -> WorkflowView:
    """The workflow read now, with steps ``offset`` to ``offset + limit``; ``WorkflowNotFound`` if there is none.

    A bounded read that writes nothing: the status and counts, then one page of steps (``WorkflowResult.page``)."""
    if not isinstance(workflow_id, str) or not 0 < len(workflow_id) <= 48:
        raise WorkflowNotFound(f"no workflow {workflow_id!r}")
    wf = WorkflowResult(alias, workflow_id).refresh()
    header = wf.header
    meta = header.meta if header else {}
    offset, limit = max(0, offset), max(1, min(limit, MAX_PAGE))
    steps = []
    for i, (res, st, info) in enumerate(wf.page(offset, limit), start=offset):
        error = ""
        if res.errors:
            last = res.errors[-1]
            error = (last.traceback or "").strip().splitlines()[-1] if last.traceback else last.exception_class_path
        gone = is_unregistered(res)
        steps.append(StepView(i, res.id, UNREGISTERED + res.task.module_path if gone else info.get("t", res.task.module_path),
                              info.get("q", ""), st, str(res.status), list(info.get("p", [])), res.enqueued_at, res.started_at,
                              res.finished_at, len(res.worker_ids), error, gone))
    return WorkflowView(wf.id, alias, str(wf.status), meta.get("status", ""), wf.error,
                        ms_to_datetime(meta.get("created_at")), ms_to_datetime(meta.get("finished_at")), steps,
                        total=wf.total, done=header.done if header else 0, failed=len(header.failed) if header else 0,
                        offset=offset, limit=limit)


@dataclass(frozen=True, slots=True)
class WorkflowRow:
    """One workflow of the list: what its own record says, no step read (``status`` "expired": its keys are gone)."""

    id: str
    status: str  # running, succeeded, failed, cancelled; or expired
    total: int
    done: int
    failed: int
    created_at: datetime | None
    finished_at: datetime | None
    error: str


@dataclass(frozen=True, slots=True)
class WorkflowList:
    """One page of the newest workflows: ``rows`` from the ``offset``-th newest, of ``total`` listed."""

    rows: list[WorkflowRow]
    total: int
    offset: int
    limit: int
    kept: int = INDEX_KEPT  # the most the list holds: the newest

    @property
    def last(self) -> int:
        """The 1-based position of the last row shown."""
        return self.offset + len(self.rows)

    @property
    def previous_offset(self) -> int | None:
        return previous_page(self.offset, self.limit)

    @property
    def next_offset(self) -> int | None:
        return next_page(self.offset, self.limit, self.total)


def newest(alias: str = "default", offset: int = 0, limit: int = PAGE) -> WorkflowList:
    """The newest workflows of a backend, ``limit`` from ``offset`` (store ``newest``: a bounded read, no step read)."""
    offset, limit = max(0, offset), max(1, min(limit, MAX_PAGE))
    total, found = WorkflowStore(Broker(get_options(alias))).newest(offset, limit)
    rows = []
    for workflow_id, h in found:
        if h is None:
            rows.append(WorkflowRow(workflow_id, "expired", 0, 0, 0, None, None, ""))
            continue
        m = h.meta
        rows.append(WorkflowRow(workflow_id, m.get("status", ""), h.total, h.done, len(h.failed), ms_to_datetime(m.get("created_at")),
                                ms_to_datetime(m.get("finished_at")), m.get("error", "")))
    return WorkflowList(rows, total, offset, limit)


def repair(workflow_id: str, alias: str = "default") -> int:
    """The one write of the workflow pages (``WorkflowResult.repair``): how many steps it recorded or failed."""
    if not isinstance(workflow_id, str) or not 0 < len(workflow_id) <= 48:
        raise WorkflowNotFound(f"no workflow {workflow_id!r}")
    return WorkflowResult(alias, workflow_id).repair()


def resume_replayed(broker: Broker, queue: str, ids: Sequence[str]) -> int:
    """After a replay (or an edit-then-replay) of ``ids`` into ``queue``: put the workflow steps among them back in
    their workflows (store ``resume``): a failed workflow runs again once none of its steps is dead. How many resumed."""
    store = WorkflowStore(broker)
    return sum(store.resume(wf, step) == "resumed" for wf, step, _ in store.replayed_steps(queue, ids))


def totals(alias: str = "default") -> dict[str, int]:
    """The fleet-wide workflow counts of a backend (store/workflows/store.py ``totals``): one HGETALL."""
    return WorkflowStore(Broker(get_options(alias))).totals()


def families(by_alias: dict[str, dict[str, int]]) -> Iterator[Any]:
    """Prometheus families: workflows running now, and the totals that succeeded, failed, were cancelled."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # optional: only a metrics scrape calls this

    running = GaugeMetricFamily("redisq_workflows_running", "Workflows started and not ended (failed ones replayed count again).",
                                labels=["backend"])
    names = {"enqueued": "created", "succeeded": "succeeded", "failed": "failed", "cancelled": "cancelled"}
    ended = {name: CounterMetricFamily(f"redisq_workflows_{name}", f"Workflows {name}.", labels=["backend"]) for name in names}
    for alias, t in by_alias.items():
        running.add_metric([alias], float(t["running"]))
        for name, family in ended.items():
            family.add_metric([alias], float(t[names[name]]))
    yield running
    yield from ended.values()


def workflow_of(task_id: str, metadata: dict[str, Any] | None = None) -> str:
    """The workflow a task belongs to, from its id (``<workflow>.<n>``) or its metadata's marker; '' for none."""
    found = (metadata or {}).get("_workflow")
    if isinstance(found, list) and found and isinstance(found[0], list) and found[0] and isinstance(found[0][0], str):
        return found[0][0]
    parsed = parse_step_id(task_id)
    return parsed[0] if parsed and len(parsed[0]) == 22 else ""
