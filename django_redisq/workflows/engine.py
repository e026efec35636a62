"""The workflow engine: release a workflow's steps into their queues, and fail workflows, over the store's steps.

The store (store/workflows.py) records transitions, one script each, and
decides nothing; what a released step's task is (its arguments from its
parents' results, its message, its trace links, its size check) is decided
here, from its ``StepSpec`` (workflows/spec.py). The worker's settle hook
(worker/flows.py), ``WorkflowResult.repair`` and the operators' cancel run
these steps; each is idempotent by the steps' fixed task ids, so a crash
between two of them repeats a step and never releases one twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django_redisq.core import tracing
from django_redisq.core.message import encode
from django_redisq.store.broker import Broker
from django_redisq.store.steps.replies import NewTask
from django_redisq.store.workflows import Released, WorkflowStore
from django_redisq.workflows.canvas import error_id, step_id
from django_redisq.workflows.spec import StepSpec


class StepTooLarge(ValueError):
    """A step's message over its queue's ``MAX_MESSAGE_BYTES``: a chord's callback gets every member's result, which
    no check at creation can bound. Queueing it would put a message in Redis no worker should take (or one Redis
    refuses past ``proto-max-bulk-len``), so the worker fails the workflow instead (worker/flows.py)."""

    def __init__(self, task_id: str, queue: str, size: int, limit: int) -> None:
        super().__init__(f"its message ({task_id}, with its parents' results) is {size} bytes, over MAX_MESSAGE_BYTES "
                         f"{limit} of queue {queue!r}; return smaller results (store large ones elsewhere and return "
                         "their ids), or raise MAX_MESSAGE_BYTES for that queue")
        self.size, self.limit = size, limit


def new_task(task_id: str, spec: StepSpec, args: list[Any], kwargs: dict[str, Any], delay: int,
             link: str = "", max_bytes: int | None = None) -> NewTask:
    """The task (what ``Broker.enqueue`` takes) of a step or an ``on_error`` callback built from its spec.

    The spec's metadata carries the workflow creator's trace context (``_trace``) as stored; ``link`` adds the
    attempt that released the step (``tracing.LINK_KEY``): given only when that attempt was traced, so its
    attempt is traced too, as a root span if its creator's was not. ``StepTooLarge`` past ``max_bytes``."""
    metadata = spec.metadata or None
    if link:
        metadata = {**(metadata or {}), tracing.LINK_KEY: link}
    msg = encode(args, kwargs, spec.overrides or None, metadata)
    if max_bytes is not None and len(msg) > max_bytes // 4 and (size := len(msg.encode("utf-8", "surrogatepass"))) > max_bytes:
        raise StepTooLarge(task_id, spec.queue, size, max_bytes)
    return NewTask(task_id, msg, spec.task, delay, spec.idempotency_key, spec.priority, spec.limits)


class WorkflowEngine:
    """Releases and fails the workflows of one backend, on its workflow store and broker."""

    def __init__(self, store: WorkflowStore) -> None:
        self.store = store
        self.broker: Broker = store.broker

    def release(self, workflow_id: str, released: Sequence[Released], link: str = "") -> int:
        """Queue each released step by its fixed id, in its own queue (an id already stored is left alone); how many
        were new. ``link``: the traceparent of the attempt that released them (core/tracing.py), when traced."""
        new = 0
        for r in released:
            args, kwargs, delay = r.spec.call(r.inputs)
            new += self.enqueue_step(step_id(workflow_id, r.step), r.spec, args, kwargs, delay, link)
        return new

    def enqueue_step(self, task_id: str, spec: StepSpec, args: list[Any], kwargs: dict[str, Any], delay: int,
                     link: str = "") -> bool:
        """Queue one step (or an on_error callback) from its spec; False: the id was stored already (idempotent).
        ``StepTooLarge`` if its message exceeds its queue's ``MAX_MESSAGE_BYTES``."""
        limit = self.broker.options.for_queue(spec.queue).max_message_bytes
        item = new_task(task_id, spec, args, kwargs, delay, link, limit)
        return not self.broker.enqueue(spec.queue, [item])[0].duplicate_of

    def queue_on_error(self, workflow_id: str, on_error: StepSpec, failed_task_id: str, link: str = "") -> bool:
        """Queue the workflow's ``on_error`` callback with (workflow id, failed task id) after its own arguments;
        its id is fixed, so it is queued once whoever calls."""
        args = [*on_error.args, workflow_id, failed_task_id]
        return self.enqueue_step(error_id(workflow_id), on_error, args, dict(on_error.kwargs), 0, link)

    def fail_steps(self, queue: str, ids: Sequence[str], why: str) -> None:
        """Fail the workflows of those ``ids`` that are dead workflow steps (dead-lettered outside a worker's settle:
        a cancel of the step itself), and queue their ``on_error`` callbacks (once, by id)."""
        for wf, step, task_id in self.store.replayed_steps(queue, ids, dead=True):
            _, on_error, _ = self.store.fail(wf, step, f"step {step} (task {task_id}) {why}")
            if on_error:
                self.queue_on_error(wf, on_error, task_id)

    def settle_parent(self, workflow_id: str, step: int, task_id: str, state: str, result: str) -> None:
        """Record a depends_on parent found finished (and release what waits), or fail the workflow for one found
        dead or gone."""
        if state == "finished":
            reply = self.store.done(workflow_id, step, result)
            self.release(workflow_id, reply.released)
        elif state in ("dead", "missing"):
            why = "failed" if state == "dead" else "expired"
            self.store.fail(workflow_id, step, f"step {step} (task {task_id}) {why} before its dependents ran")
