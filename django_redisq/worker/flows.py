"""The worker's part in workflows: record a settled step in its workflow, then release what waits for it.

Order, and why it survives a crash at any instant (DESIGN invariant 13):

1. a step succeeded: ``wf_done.lua`` records it in the workflow's set of done
   steps and answers every waiting step whose parents are all done;
2. each of those is queued by its deterministic task id (a second enqueue of
   an id is a no-op, enqueue.lua's ``'!'``);
3. only then the step is acked (the settler's ack, after ``record``).

A crash before 3 leaves the step in the worker's processing list: it is
redelivered and runs again (at-least-once: its guard says ``success`` only
from the ack on), and this hook runs again after it, which repeats 1 (the set
ignores the second add) and 2 (queued already: nothing). If 1 or 2 cannot be done now
(Redis away), the settler retries until it can. If it never can (bookkeeping
``wf_done.lua`` cannot read, a bug), the step is dead-lettered with reason
``settle_failed`` and its workflow failed: running it again would loop.

A released step whose message would exceed its queue's ``MAX_MESSAGE_BYTES``
(a chord's callback gets every member's result) is not queued: its workflow
fails with an error that gives the sizes, and ``on_error`` is queued once.

A step that failed for good fails its workflow before its burial
(``wf_fail.lua``) and queues the workflow's ``on_error`` callback once (its id
is fixed too).
"""

from __future__ import annotations

import logging
from functools import partial

from django_redisq.store.steps.replies import Delivery
from django_redisq.store.workflows import StepTooLarge, WorkflowStore
from django_redisq.worker.outcome import Missed, Outcome, Retrying, SettleFailed
from django_redisq.workflows.canvas import MARKER, error_id, markers, step_id

logger = logging.getLogger("django_redisq")

class WorkflowHooks:
    """Called by the settler around the settle steps of tasks that are workflow steps."""

    def __init__(self, store: WorkflowStore) -> None:
        self.store = store
        self.broker = store.broker

    @staticmethod
    def concerns(d: Delivery) -> bool:
        """Whether ``d`` may be a workflow step: a substring test, so a plain task costs no call on the hot path."""
        return MARKER in d.raw or (bool(d.metadata) and MARKER in d.metadata)

    def record(self, d: Delivery, o: Outcome, retrying: Retrying) -> bool:
        """Record a successful step in its workflows and release its dependents; False: not now (hold the ack).

        Raises ``SettleFailed`` when the workflow's bookkeeping cannot be recorded (the settler dead-letters the step).
        """
        return all(self._done(wf, step, o.result_json, retrying, o.trace_from) for wf, step in markers(d.raw, d.metadata))

    def _done(self, wf: str, step: int, result_json: str, retrying: Retrying, link: str = "") -> bool:
        reply = retrying(lambda: self.store.done(wf, step, result_json), f"recording step {step} of workflow {wf}")
        if isinstance(reply, Missed):
            return False
        for r in reply.released:
            try:
                if isinstance(retrying(partial(self.store.release, wf, [r], link), f"releasing step {r.step} of workflow {wf}"), Missed):
                    return False
            except SettleFailed as exc:
                if not isinstance(exc.cause, StepTooLarge):
                    raise
                self._fail(wf, r.step, f"step {r.step} was not queued: {exc.cause}", "", retrying)
        if not reply.released:
            return True
        # cancelled while we released: wf_cancel.lua's caller may have read the steps before these were queued
        if retrying(partial(self.store.status, wf), f"reading the status of workflow {wf}") == "cancelled":
            for r in reply.released:
                retrying(partial(self.broker.operator.cancel, r.spec.get("q", "default"), [step_id(wf, r.step)], "workflow cancelled"),
                         f"cancelling step {r.step} of cancelled workflow {wf}")
        return True

    def before_bury(self, d: Delivery, o: Outcome, retrying: Retrying) -> None:
        """Fail the workflows of a step that failed for good; queue their ``on_error`` callbacks (once, by id)."""
        for wf, step in markers(d.raw, d.metadata):
            error = o.error or {}
            text = f"step {step} ({d.task or '?'}, task {d.id}) failed: {error.get('exc', '')}: {error.get('msg', o.reason)}"
            try:
                self._fail(wf, step, text, d.id, retrying, o.trace_from)
            except SettleFailed as exc:  # one workflow's bookkeeping does not keep the others from failing
                logger.error("workflow %s of step %s could not be failed: %s", wf, d.id, exc)

    def _fail(self, wf: str, step: int, text: str, task_id: str, retrying: Retrying, link: str = "") -> None:
        """Fail workflow ``wf`` for ``step`` and queue its ``on_error`` callback (its id is fixed: queued once)."""
        answer = retrying(partial(self.store.fail, wf, step, text), f"failing workflow {wf}")
        if isinstance(answer, Missed):
            return
        _, on_error, _ = answer
        if on_error:
            args = [*(on_error.get("a") or []), wf, task_id or step_id(wf, step)]
            retrying(partial(self.store.enqueue_step, error_id(wf), on_error, args, dict(on_error.get("k") or {}), 0, link),
                     f"queueing the on_error callback of workflow {wf}")
