"""Enqueueing workflows (``chain``, ``group``, ``chord``, ``depends_on``) and reading them back: ``WorkflowResult``.

Design, and why:

- Every step is an ordinary task (its own retries, time limit, priority,
  idempotency key and dead letter) with a task id fixed when the workflow is
  created (``<workflow>.<n>``, workflows/canvas.py), so ``.results`` can name every step
  before it runs and releasing a step twice is a no-op (enqueue.lua refuses an
  id that exists).
- The bookkeeping (which steps are done, their results for the steps waiting
  for them, which failed) lives in the workflow's own hash-tag slot
  (keys.py's ``WorkflowKeys``), one script per transition
  (store/scripts/wf_*.lua); steps may be on any queues, in any Cluster slots.
- The first steps are queued here; every other step is queued by the worker
  that settles its last parent (worker/flows.py), before that parent's ack.
- A replay from the dead letters puts a failed step back in its workflow:
  after the replay, ops/operations.py runs wf_resume.lua (the workflow runs
  again, its keys stop expiring). Status is read, not only stored, so a
  crash between the replay and that step changes nothing a reader sees: a
  failed workflow whose failed steps are no longer dead reads RUNNING, and
  wf_done.lua un-fails it when the replayed step succeeds.
- Traced (core/tracing.py), the workflow is created in one producer span whose
  context every step's spec carries (``_trace``), so each step's attempt is in
  the creator's trace, however late the worker queues it.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from typing import Any

from django_redisq.compat import TaskResult, TaskResultStatus
from django_redisq.core import tracing
from django_redisq.core.limits import task_limits
from django_redisq.core.message import encode_arguments
from django_redisq.exceptions import InvalidArguments
from django_redisq.store.steps.replies import NewTask
from django_redisq.task import RedisTask
from django_redisq.workflows.canvas import MARKER, Node, Signature, Step, compile_flow, parse_step_id, step_id
from django_redisq.workflows.engine import new_task
from django_redisq.workflows.limits import check_fan_in
from django_redisq.workflows.port import Backend
from django_redisq.workflows.result import WorkflowNotFound, WorkflowResult
from django_redisq.workflows.spec import StepSpec


def _spec(backend: Backend, sig: Signature, workflow_id: str, index: int, takes_input: bool, mode: str,
          parents: list[int], trailing: int = 0, trace: dict[str, str] | None = None) -> StepSpec:
    """A step as stored: everything the worker needs to queue it later, checked now (with ``trailing`` arguments added later);
    ``trace``: the creator's trace context, in its metadata (core/tracing.py; None when off: nothing is added)."""
    task = sig.task
    if not isinstance(task, RedisTask):
        raise InvalidArguments(f"{task!r} is not a django_redisq task: use @task from django_redisq (or this backend's).")
    if task.depends_on and not isinstance(sig, _Plain):
        raise InvalidArguments(f"{task.module_path}: depends_on applies to task.enqueue(); in a workflow, chain the steps instead.")
    if task.backend != backend.alias:
        raise InvalidArguments(f"all steps of a workflow must use one backend: {task.module_path} uses {task.backend!r}, "
                               f"the workflow {backend.alias!r}.")
    backend.validated(task)
    backend.bind(task, [None] * takes_input + list(sig.args) + [None] * trailing, dict(sig.kwargs))  # ``trailing``: added later
    args, kwargs, _ = encode_arguments(sig.args, sig.kwargs, backend.conf.max_message_bytes)
    metadata = dict(getattr(task, "metadata", None) or {})
    if index >= 0:
        metadata[MARKER] = [[workflow_id, index]]
    if trace:
        metadata[tracing.TRACE_KEY] = trace
    at = None
    if task.run_after is not None:
        at = int(task.run_after.timestamp() * 1000)
    return StepSpec(task=task.module_path, queue=task.queue_name, args=args, kwargs=kwargs, overrides=backend.overrides(task),
                    metadata=metadata, priority=int(task.priority), run_at=at, idempotency_key=task.key_for(args, kwargs),
                    limits=task_limits(task), mode=mode, parents=parents)


def enqueue_workflow(backend: Backend, node: Node, on_error: Signature | None = None) -> WorkflowResult:
    """Store the workflow in its slot, queue its first steps, then let it run (see the module docstring).

    A crash between the store and the queueing leaves keys with a provisional TTL
    (store/workflows/store.py) and no step: nothing runs, nothing stays.
    """
    steps = compile_flow(node)
    if not steps:
        raise InvalidArguments("a workflow needs at least one task signature.")
    workflow_id = _new_id()
    queues = [str(getattr(s.sig.task, "queue_name", "default")) for s in steps]
    with tracing.send_workflow(workflow_id, queues, len(steps)) as span:  # NOOP unless a tracer provider is configured
        return _create(backend, steps, workflow_id, on_error, span.carrier)


def _create(backend: Backend, steps: list[Step], workflow_id: str, on_error: Signature | None,
            trace: dict[str, str] | None) -> WorkflowResult:
    """``enqueue_workflow``'s work, inside its producer span (``trace``: that span's context, or None)."""
    specs = {s.index: _spec(backend, s.sig, workflow_id, s.index, s.mode != "none", s.mode, s.parents, trace=trace)
             for s in steps}
    check_fan_in(backend.conf, steps, specs)
    error_spec = None
    if on_error is not None:  # gets (workflow id, failed task id) too
        error_spec = _spec(backend, on_error, workflow_id, -1, False, "none", [], trailing=2, trace=trace)
    summary = [{"t": specs[s.index].task, "q": specs[s.index].queue, "p": s.parents} for s in steps]
    waiting = {s.index: specs[s.index] for s in steps if s.parents}
    engine = backend.workflows
    engine.store.create(workflow_id, summary, waiting, {s.index: s.children for s in steps}, error_spec)
    by_queue: dict[str, list[NewTask]] = {}
    now_ms = time.time() * 1000
    for s in steps:
        if not s.parents:
            spec = specs[s.index]
            args, kwargs, delay = spec.call([], now_ms)
            by_queue.setdefault(spec.queue, []).append(new_task(step_id(workflow_id, s.index), spec, args, kwargs, delay))
    for queue, items in by_queue.items():
        backend.broker.enqueue(queue, items)
    engine.store.start(workflow_id)
    # as enqueued, without a read: every step READY (refresh() reads them)
    as_enqueued = [(backend.result_class(task=s.sig.task, id=step_id(workflow_id, s.index), status=TaskResultStatus.READY,
                                         enqueued_at=None, started_at=None, last_attempted_at=None, finished_at=None,
                                         args=list(specs[s.index].args), kwargs=dict(specs[s.index].kwargs),
                                         backend=backend.alias, errors=[], worker_ids=[]),
                    "waiting" if s.parents else "pending") for s in steps]
    return WorkflowResult(backend.alias, workflow_id, as_enqueued=as_enqueued)


class _Plain(Signature):
    """The call of ``task.using(depends_on=[...]).enqueue(...)``: a step like any other."""


def enqueue_dependent(backend: Backend, task: RedisTask[Any, Any], args: Sequence[Any], kwargs: dict[str, Any],
                      trace: dict[str, str] | None = None) -> TaskResult:
    """``task.using(depends_on=[r1, r2]).enqueue(...)``: a workflow of the parents (tasks enqueued earlier) and this call.

    Each parent gets the workflow's marker in its saved metadata (wf_adopt.lua, in its own
    queue's slot), so the worker that settles it records it here; a parent that has finished
    already is recorded now, one that failed fails the workflow. A parent fetched by a worker
    before the marker was written cannot tell that worker; it is recorded by the next read of
    the workflow or of this task's result (``refresh``). Returns this call's ``TaskResult``
    (READY until the parents succeeded; FAILED, naming the parent, if one failed for good). ``trace``: the context
    of the enqueue's producer span (the backend's), stored in the call's spec for the worker's span.
    """
    parents = []
    for parent_id in task.depends_on:
        found = backend.broker.get_task(parent_id, sorted(backend.queues))
        if found is None or "msg" not in found[1]:
            raise InvalidArguments(f"depends_on names {parent_id!r}, which is no task of backend {backend.alias!r}.")
        parents.append((parent_id, found[0], found[1].get("task", "")))
    workflow_id = _new_id()
    k = len(parents)
    spec = _spec(backend, _Plain(task, tuple(args), dict(kwargs)), workflow_id, k, False, "none", list(range(k)), trace=trace)
    summary: list[dict[str, Any]] = [{"t": path, "q": queue, "p": [], "id": pid} for pid, queue, path in parents]
    summary.append({"t": spec.task, "q": spec.queue, "p": list(range(k))})
    engine = backend.workflows
    engine.store.create(workflow_id, summary, {k: spec}, {i: [k] for i in range(k)}, None)
    for i, (pid, queue, _) in enumerate(parents):
        found_state, result = engine.store.adopt(queue, pid, workflow_id, i)
        engine.settle_parent(workflow_id, i, pid, found_state, result)
    engine.store.start(workflow_id)
    wf = WorkflowResult(backend.alias, workflow_id)
    wf.repair()  # a parent fetched before its marker and settled since: recorded now (later: the waiter's repair)
    return wf.refresh().results[-1]


def fail_cancelled(backend: Backend, queue: str, task_id: str, who: str) -> None:
    """A workflow step cancelled by itself (``cancel(step id)``) fails its workflow, as a dead-lettered step does."""
    backend.workflows.fail_steps(queue, [task_id], f"cancelled by {who}")


def waiting_result(backend: Backend, task_id: str) -> TaskResult | None:
    """The result of a workflow step not queued yet (READY, or FAILED saying why), or None if ``task_id`` is none.

    Reads that step only (``WorkflowResult.step``): a round trip or two, whatever the workflow's size."""
    parsed = parse_step_id(task_id)
    if parsed is None or not 0 < len(parsed[0]) <= 48:
        return None
    try:
        return WorkflowResult(backend.alias, parsed[0]).step(parsed[1])
    except WorkflowNotFound:
        return None


def _new_id() -> str:
    return secrets.token_urlsafe(16).replace("-", "x")  # 22 characters; never starts with "-"


def get_workflow(workflow_id: str, *, backend: str = "default") -> WorkflowResult:
    """The workflow with this id, read now; ``WorkflowNotFound`` if there is none."""
    if not isinstance(workflow_id, str) or not 0 < len(workflow_id) <= 48:
        raise WorkflowNotFound(f"no workflow {workflow_id!r}")
    return WorkflowResult(backend, workflow_id).refresh()


__all__ = ["WorkflowNotFound", "WorkflowResult", "enqueue_workflow", "get_workflow"]
