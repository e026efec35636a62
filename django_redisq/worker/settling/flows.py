"""The worker's part in workflows: record a settled step in its workflow, then release what waits for it.

Order, and why it survives a crash at any instant (invariant 13 (docs/explanation/architecture.md)):

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
from typing import Any

from django_redisq.store.steps.replies import Delivery
from django_redisq.store.workflows import Released
from django_redisq.worker.running.outcome import Outcome
from django_redisq.worker.settling.hooks import SettleHook
from django_redisq.worker.settling.steps import StepResult, StepRunner
from django_redisq.workflows.canvas import MARKER, markers, step_id
from django_redisq.workflows.engine import StepTooLarge, WorkflowEngine

logger = logging.getLogger("django_redisq")


class WorkflowHooks(SettleHook):
    """The settle hook of tasks that are workflow steps: recorded before the ack, their workflow failed before a burial."""

    def __init__(self, *, engine: WorkflowEngine, steps: StepRunner) -> None:
        """``steps``: runs each Redis step under the settle policy (``steps.py``)."""
        self.engine = engine
        self.store = engine.store
        self.broker = engine.broker
        self.steps = steps

    @staticmethod
    def concerns(d: Delivery) -> bool:
        """Whether ``d`` may be a workflow step: a substring test, so a plain task costs no call on the hot path."""
        return MARKER in d.raw or (bool(d.metadata) and MARKER in d.metadata)

    def before_ack(self, d: Delivery, o: Outcome) -> StepResult[Any]:
        """Record a successful step in its workflows and release its dependents; missed: not now (hold the ack);
        failed: the workflow's bookkeeping cannot be recorded (the settler dead-letters the step)."""
        if not self.concerns(d):
            return StepResult.ok()
        for wf, step in markers(d.raw, d.metadata):
            recorded = self.record_step(wf, step, o.result_json, o.trace_from)
            if not recorded.landed:
                return recorded
        return StepResult.ok()

    def record_step(self, wf: str, step: int, result_json: str, link: str = "") -> StepResult[Any]:
        """Step ``step`` of workflow ``wf`` succeeded: record it and queue the dependents it completes."""
        reply = self.steps.run(lambda: self.store.done(wf, step, result_json), f"recording step {step} of workflow {wf}")
        if not reply.landed or reply.value is None:
            return reply
        released = reply.value.released
        for r in released:
            queued = self.steps.run(partial(self.engine.release, wf, [r], link), f"releasing step {r.step} of workflow {wf}")
            if queued.failure is not None and isinstance(queued.failure.cause, StepTooLarge):
                queued = self._fail(wf, r.step, f"step {r.step} was not queued: {queued.failure.cause}", "")
                if queued.failed:
                    return queued
            elif not queued.landed:
                return queued
        if released:
            return self._stop_if_cancelled(wf, released)
        return reply

    def _stop_if_cancelled(self, wf: str, released: list[Released]) -> StepResult[Any]:
        """Cancelled while we released: wf_cancel.lua's caller may have read the steps before these were queued."""
        status = self.steps.run(partial(self.store.status, wf), f"reading the status of workflow {wf}")
        if status.failed or status.value != "cancelled":
            return status if status.failed else StepResult.ok()
        for r in released:
            cancelled = self.steps.run(partial(self.broker.operator.cancel, r.spec.queue, [step_id(wf, r.step)],
                                               "workflow cancelled"), f"cancelling step {r.step} of cancelled workflow {wf}")
            if cancelled.failed:
                return cancelled
        return StepResult.ok()

    def before_bury(self, d: Delivery, o: Outcome) -> None:
        """Fail the workflows of a step that failed for good; queue their ``on_error`` callbacks (once, by id)."""
        if not self.concerns(d):
            return
        for wf, step in markers(d.raw, d.metadata):
            error = o.error or {}
            text = f"step {step} ({d.task or '?'}, task {d.id}) failed: {error.get('exc', '')}: {error.get('msg', o.reason)}"
            failed = self._fail(wf, step, text, d.id, o.trace_from)
            if failed.failure is not None:  # one workflow's bookkeeping does not keep the others from failing
                logger.error("workflow %s of step %s could not be failed: %s", wf, d.id, failed.failure)

    def _fail(self, wf: str, step: int, text: str, task_id: str, link: str = "") -> StepResult[Any]:
        """Fail workflow ``wf`` for ``step`` and queue its ``on_error`` callback (its id is fixed: queued once)."""
        answer = self.steps.run(partial(self.store.fail, wf, step, text), f"failing workflow {wf}")
        if not answer.landed or answer.value is None:
            return answer
        _, on_error, _ = answer.value
        if not on_error:
            return answer
        return self.steps.run(partial(self.engine.queue_on_error, wf, on_error, task_id or step_id(wf, step), link),
                              f"queueing the on_error callback of workflow {wf}")
