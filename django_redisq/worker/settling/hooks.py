"""The settle hooks: what plugs into settling, at named points, called by the settler in one direction.

The settler (``settler.py``) owns the ack, the retry and the burial; everything
else that must happen around them is a ``SettleHook``, given to it as a list
and called in that order at each point:

- ``before_settle(batch)``: before any step of the batch (``MetadataHook``:
  the metadata a task changed is saved before its ack, retry or burial);
- ``before_ack(d, o)``: before a success is acked; its ``StepResult`` says
  ack (landed), hold the ack for now (lost, stopped: the task stays in the
  processing list and comes back) or dead-letter the task (failed)
  (``WorkflowHooks``, ``flows.py``: the step recorded, its dependents queued);
- ``before_bury(d, o)``: before a task is dead-lettered, whatever it answers
  (``WorkflowHooks``: the workflow failed, its ``on_error`` queued);
- ``after_step(event, d, o)``: once Redis took a retry or a burial, or refused a
  step because the lease was lost (``Observer``: signals, hence lifecycle
  events, and metrics);
- ``after_settle(batch)``: the batch is done with, however it ended
  (``Observer``: per-worker metrics).

A hook calls Redis only through the ``StepRunner`` it was built with, so its
steps follow the settle policy (``steps.py``); it never calls the settler back.
A hook subclasses ``SettleHook`` and overrides only the points it needs.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, Protocol

from django_redisq.store.broker import Broker
from django_redisq.store.steps.replies import Delivery
from django_redisq.worker.running.outcome import Outcome
from django_redisq.worker.settling.steps import LANDED, StepResult, StepRunner

logger = logging.getLogger("django_redisq")

Batch = list[tuple[Delivery, Outcome]]
"""Run tasks and their outcomes, settled together."""
RETRIED, DEAD_LETTERED, LEASE_LOST = "retried", "dead_lettered", "lease_lost"
"""The events ``after_step`` is told of."""


class SettleHook(Protocol):
    """The points of the settle path a hook may take part in; each does nothing unless overridden."""

    def before_settle(self, batch: Batch) -> None:
        """Before any settle step of ``batch``."""
        return None

    def before_ack(self, d: Delivery, o: Outcome) -> StepResult[Any]:
        """Before the success ``d`` is acked: landed to ack it, missed to hold the ack, failed to dead-letter it."""
        return LANDED

    def before_bury(self, d: Delivery, o: Outcome) -> None:
        """Before ``d`` is dead-lettered; it is dead-lettered whatever this does."""
        return None

    def after_step(self, event: str, d: Delivery, o: Outcome) -> None:
        """Redis took ``event`` (``RETRIED``, ``DEAD_LETTERED``) for ``d``, or refused it (``LEASE_LOST``)."""
        return None

    def after_settle(self, batch: Batch) -> None:
        """``batch`` is done with, whatever became of each task."""
        return None


class MetadataHook(SettleHook):
    """Saves the metadata the batch's tasks changed (core/metadata.py), before their ack, retry or burial.

    One round trip per queue, only for batches that hold such a task; a task
    whose lease was lost keeps the metadata of the copy that holds it now.
    A save that fails for good is logged: the task still settles, with the metadata it had.
    """

    def __init__(self, *, broker: Broker, worker_id: str, steps: StepRunner) -> None:
        self.broker = broker
        self.worker_id = worker_id
        self.steps = steps

    def before_settle(self, batch: Batch) -> None:
        changed: dict[str, list[tuple[str, str]]] = {}
        for d, o in batch:
            if o.metadata is not None:
                changed.setdefault(d.queue, []).append((d.id, o.metadata))
        for q, items in changed.items():
            saved = self.steps.run(partial(self.broker.save_metadata_held, q, self.worker_id, items),
                                   f"saving the metadata of {len(items)} task(s)")
            if saved.failure is not None:
                logger.error("the metadata of %d task(s) of queue %s was not saved: %s", len(items), q, saved.failure)
            for task_id in saved.value or ():
                logger.warning("the metadata of task %s was not saved: worker %s no longer held it", task_id, self.worker_id)
