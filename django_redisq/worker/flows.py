"""The worker's part in workflows: record a settled step in its workflow, then release what waits for it.

Order, and why it survives a crash at any instant (DESIGN invariant 13):

1. a step succeeded: ``wf_done.lua`` records it in the workflow's set of done
   steps and answers every waiting step whose parents are all done;
2. each of those is queued by its deterministic task id (a second enqueue of
   an id is a no-op, enqueue.lua's ``'!'``);
3. only then the step is acked (the settler's ack, after ``before_ack``).

A crash before 3 leaves the step in the worker's processing list: it is
redelivered and runs again (at-least-once: its guard says ``success`` only
from the ack on), and this hook runs again after it, which repeats 1 (the set
ignores the second add) and 2 (queued already: nothing). If 1 or 2 cannot be done now
(a Redis error that is not transient), the step is not acked at all: the
sweep hands it back and the whole sequence is repeated later, never skipped.

A step that failed for good fails its workflow before its burial
(``wf_fail.lua``) and queues the workflow's ``on_error`` callback once (its id
is fixed too).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

from django_redisq.flow import error_id, markers, step_id
from django_redisq.store.replies import Delivery
from django_redisq.store.workflows import WorkflowStore
from django_redisq.worker.outcome import SUCCESS, Outcome

logger = logging.getLogger("django_redisq")

Retrying = Callable[[Callable[[], Any], str], Any]
"""The settler's ``with_retries``: runs a step until it lands; None if it cannot."""


class WorkflowHooks:
    """Called by the settler around the settle steps of tasks that are workflow steps."""

    def __init__(self, store: WorkflowStore) -> None:
        self.store = store
        self.broker = store.broker

    def before_ack(self, batch: list[tuple[Delivery, Outcome]], retrying: Retrying) -> set[tuple[str, str]]:
        """Record the batch's successful steps and release their dependents; the ``(queue, id)`` not to ack now."""
        hold: set[tuple[str, str]] = set()
        for d, o in batch:
            if o.kind != SUCCESS:
                continue
            for wf, step in markers(d.raw, d.metadata):
                if not self._done(wf, step, o.result_json, retrying, o.trace_from):
                    hold.add((d.queue, d.id))
        return hold

    def _done(self, wf: str, step: int, result_json: str, retrying: Retrying, link: str = "") -> bool:
        reply = retrying(lambda: self.store.done(wf, step, result_json), f"recording step {step} of workflow {wf}")
        if reply is None:
            return False
        if not reply.released:
            return True
        if retrying(partial(self.store.release, wf, reply.released, link), f"releasing the next steps of workflow {wf}") is None:
            return False
        # cancelled while we released: wf_cancel.lua's caller may have read the steps before these were queued
        if retrying(partial(self.store.status, wf), f"reading the status of workflow {wf}") == "cancelled":
            for r in reply.released:
                retrying(partial(self.broker.cancel, r.spec.get("q", "default"), [step_id(wf, r.step)], "workflow cancelled"),
                         f"cancelling step {r.step} of cancelled workflow {wf}")
        return True

    def before_bury(self, d: Delivery, o: Outcome, retrying: Retrying) -> None:
        """Fail the workflows of a step that failed for good; queue their ``on_error`` callbacks (once, by id)."""
        for wf, step in markers(d.raw, d.metadata):
            error = o.error or {}
            text = f"step {step} ({d.task or '?'}, task {d.id}) failed: {error.get('exc', '')}: {error.get('msg', o.reason)}"
            answer = retrying(partial(self.store.fail, wf, step, text), f"failing workflow {wf}")
            if answer is None:
                continue
            _, on_error, _ = answer
            if on_error:
                args = [*(on_error.get("a") or []), wf, d.id]
                retrying(partial(self.store.enqueue_step, error_id(wf), on_error, args, dict(on_error.get("k") or {}), 0, o.trace_from),
                         f"queueing the on_error callback of workflow {wf}")
