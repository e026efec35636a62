"""Settling: what becomes of a task that has run (ack, retry or bury), promptly and never lost.

Under a backlog an executor acks the tasks it ran in batches (one round trip
for many), but a finished task never waits long for its batch: the executor
settles at once after a task slower than ``SETTLE_WITHIN``, and a flusher
thread settles whatever has waited that long while its executor is busy with
the next task. So ``get_result`` tells the truth within tens of milliseconds,
and a crash re-runs only what had not finished (DESIGN invariant 9).

A settle step that Redis cannot take now (connection lost, memory full, a
failover, a busy script) is retried with backoff until it lands. One that
would fail again (a result Redis refuses, bookkeeping a script cannot read, a
bug) ends its task in the dead letters with reason ``settle_failed`` and the
exception: handing it back would run it again, for ever. Never lost, never a loop.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from django_redisq.exceptions import LeaseLost, RedisError
from django_redisq.store.broker import Broker
from django_redisq.store.server import is_transient
from django_redisq.store.steps.replies import Delivery
from django_redisq.worker.flows import WorkflowHooks
from django_redisq.worker.outcome import DEAD, RETRY, SUCCESS, Missed, Outcome, SettleFailed, error_dict

logger = logging.getLogger("django_redisq")

ACK_BATCH = 64
"""Most finished tasks an executor acks in one round trip (only while more work is waiting)."""
SETTLE_WITHIN = 0.05
"""Seconds a finished task may wait for the rest of its batch before it is settled anyway."""

Batch = list[tuple[Delivery, Outcome]]
RETRIED, DEAD_LETTERED, LEASE_LOST = "retried", "dead_lettered", "lease_lost"
"""What ``Settler.on_event`` is told once Redis has taken a step (signals and metrics listen)."""
SETTLE_TRIES = 3
"""Tries of a settle step that fails with anything but a transient Redis error, before its task is dead-lettered."""
SETTLE_FAILED = "settle_failed"
"""The dead-letter reason of a task that ran but whose settle step failed for good (``SettleFailed``)."""


class Unsettled:
    """Tasks one executor lane has run and not yet settled, oldest first."""

    __slots__ = ("_lock", "items", "since", "slow")

    def __init__(self) -> None:
        self.items: Batch = []
        self.since = 0.0  # monotonic time the oldest item finished
        self.slow = False  # one of them ran for SETTLE_WITHIN or longer: settle without waiting for a batch
        self._lock = threading.Lock()

    def add(self, d: Delivery, outcome: Outcome) -> None:
        with self._lock:
            if not self.items:
                self.since = time.monotonic()
            self.items.append((d, outcome))
            if outcome.duration >= SETTLE_WITHIN:
                self.slow = True

    def __len__(self) -> int:
        return len(self.items)

    def age(self) -> float:
        return time.monotonic() - self.since if self.items else 0.0

    def take(self, older_than: float = 0.0) -> Batch:
        """Everything held, if the oldest has waited at least ``older_than`` seconds."""
        with self._lock:
            if not self.items or (older_than and time.monotonic() - self.since < older_than):
                return []
            batch, self.items, self.slow = self.items, [], False
            return batch


class Settler:
    """Acks, retries and buries batches of run tasks for one worker id.

    Every task of a batch ends in one of three ways here: settled (acked, retried or dead-lettered), handed to another
    worker (its lease was lost), or, when a settle step fails for good, dead-lettered with reason ``settle_failed``.
    One task's failure never holds the rest of its batch. Only if that burial fails too is the task left in the
    processing list, and then ``unsettled`` tells the sweep it ran: it goes back with its delivery counted, so a task
    that can never be settled ends as ``too_many_deliveries`` instead of running for ever (DESIGN invariant 4).
    """

    def __init__(self, broker: Broker, worker_id: str, force: threading.Event, on_settled: Callable[[Batch], None],
                 on_event: Callable[[str, Delivery, Outcome], None] | None = None, flows: WorkflowHooks | None = None,
                 unsettled: dict[str, str] | None = None) -> None:
        """``unsettled``: shared with the heartbeat's sweep: id -> queue of each task that ran and could not be settled."""
        self.broker = broker
        self.flows = flows  # workflow steps: recorded and their dependents released before the ack (worker/flows.py)
        self.worker_id = worker_id
        self.force = force
        self.on_settled = on_settled
        self.on_event = on_event
        self.unsettled = unsettled if unsettled is not None else {}
        self.wake = threading.Event()

    def settle(self, batch: Batch) -> None:
        """Ack, retry or bury each task; acks of one queue share a round trip."""
        if not batch:
            return
        try:
            self._save_metadata(batch)
            broken: dict[tuple[str, str], SettleFailed] = {}
            hold = self._record_steps(batch, broken)
            self._ack(batch, hold | broken.keys(), broken)
            for d, o in batch:
                if o.kind == SUCCESS or (d.queue, d.id) in broken:
                    continue
                try:
                    if o.kind == RETRY:
                        self._retry(d, o)
                    else:
                        self._bury(d, o)
                except SettleFailed as exc:
                    broken[(d.queue, d.id)] = exc
            for i, (d, o) in enumerate(batch):
                if (failure := broken.get((d.queue, d.id))) is not None:
                    batch[i] = (d, self._bury_unsettled(d, o, failure))
        finally:  # whatever happened above, the worker forgets these tasks (what Redis still holds, the sweep hands back)
            self.on_settled(batch)

    def _record_steps(self, batch: Batch, broken: dict[tuple[str, str], SettleFailed]) -> set[tuple[str, str]]:
        """Record the batch's successful workflow steps (worker/flows.py); the ``(queue, id)`` not to ack now."""
        hold: set[tuple[str, str]] = set()
        if self.flows is None:
            return hold
        for d, o in batch:
            if o.kind != SUCCESS or not self.flows.concerns(d):
                continue
            try:
                if not self._guarded(partial(self.flows.record, d, o, self.with_retries), f"recording workflow step {d.id}"):
                    hold.add((d.queue, d.id))
            except SettleFailed as exc:
                broken[(d.queue, d.id)] = exc
        return hold

    def _ack(self, batch: Batch, skip: set[tuple[str, str]], broken: dict[tuple[str, str], SettleFailed]) -> None:
        """Ack the successes, a round trip per queue; if a batch's ack fails for good, each task alone (one bad
        task's ack never holds the rest)."""
        acks: dict[str, list[tuple[Delivery, Outcome]]] = {}
        for d, o in batch:
            if o.kind == SUCCESS and (d.queue, d.id) not in skip:
                acks.setdefault(d.queue, []).append((d, o))
        for q, items in acks.items():
            try:
                self._ack_some(q, items, batch)
            except SettleFailed as exc:
                if len(items) == 1:
                    broken[(q, items[0][0].id)] = exc
                    continue
                logger.warning("acking %d task(s) of queue %s failed (%s); acking each alone", len(items), q, exc)
                for item in items:
                    try:
                        self._ack_some(q, [item], batch)
                    except SettleFailed as alone:
                        broken[(q, item[0].id)] = alone

    def _ack_some(self, q: str, items: list[tuple[Delivery, Outcome]], batch: Batch) -> None:
        results = [(d.id, o.result_json) for d, o in items]
        runs = [(o.task_name or d.task, o.duration) for d, o in items]  # run times, written by the same call (store/reads/durations.py)
        lost = self.with_retries(partial(self.broker.ack_many, q, self.worker_id, results, runs), f"acking {len(results)} task(s)")
        for task_id in lost if isinstance(lost, list) else ():
            logger.warning("task %s was no longer held by worker %s at ack; another worker has it now", task_id, self.worker_id)
            self._tell(LEASE_LOST, next((d, o) for d, o in batch if d.id == task_id and d.queue == q))

    def _retry(self, d: Delivery, o: Outcome) -> None:
        done = self.with_retries(partial(self.broker.retry, d.queue, self.worker_id, d.id, o.delay_ms, o.error), f"retrying {d.id}")
        # False: dead-lettered instead (a cancel request came while it ran)
        self._tell(LEASE_LOST if done is Missed.LOST else RETRIED if done else DEAD_LETTERED, (d, o), done is Missed.STOPPED)

    def _bury(self, d: Delivery, o: Outcome) -> None:
        if self.flows is not None:
            try:  # the step is dead-lettered whatever becomes of its workflow's bookkeeping
                self._guarded(partial(self.flows.before_bury, d, o, self.with_retries), f"failing the workflow of {d.id}")
            except SettleFailed as exc:
                logger.error("task %s: %s; it is dead-lettered all the same", d.id, exc)
        done = self.with_retries(partial(self.broker.bury, d.queue, self.worker_id, d.id, o.error, o.reason, o.failed),
                                 f"burying {d.id}")
        self._tell(LEASE_LOST if done is Missed.LOST else DEAD_LETTERED, (d, o), done is Missed.STOPPED)

    def _bury_unsettled(self, d: Delivery, o: Outcome, failure: SettleFailed) -> Outcome:
        """Dead-letter a task whose settle step failed for good (reason ``settle_failed``); the outcome it ends with."""
        error = error_dict(failure.cause)
        error["msg"] = str(failure)[:2000]
        dead = Outcome(DEAD, error=error, reason=SETTLE_FAILED, failed=o.failed, task_name=o.task_name, duration=o.duration,
                       trace_from=o.trace_from)
        logger.error("task %s of queue %s ran, but %s; it is dead-lettered (reason %s)", d.id, d.queue, failure, SETTLE_FAILED)
        try:
            self._bury(d, dead)
        except SettleFailed as again:  # the sweep hands it back with its delivery counted (heartbeat.py)
            logger.error("task %s could not be dead-lettered either (%s); it is handed back and ends as "
                         "too_many_deliveries if this repeats", d.id, again)
            self.unsettled[d.id] = d.queue
        return dead

    def _save_metadata(self, batch: Batch) -> None:
        """Save the metadata the batch's tasks changed (core/metadata.py), before their ack, retry or burial.

        One round trip per queue, only for batches that hold such a task; a task
        whose lease was lost keeps the metadata of the copy that holds it now.
        A save that fails for good is logged: the task still settles, with the metadata it had.
        """
        changed: dict[str, list[tuple[str, str]]] = {}
        for d, o in batch:
            if o.metadata is not None:
                changed.setdefault(d.queue, []).append((d.id, o.metadata))
        for q, items in changed.items():
            try:
                lost = self.with_retries(partial(self.broker.save_metadata_held, q, self.worker_id, items),
                                         f"saving the metadata of {len(items)} task(s)")
            except SettleFailed as exc:
                logger.error("the metadata of %d task(s) of queue %s was not saved: %s", len(items), q, exc)
                continue
            for task_id in lost if isinstance(lost, list) else ():
                logger.warning("the metadata of task %s was not saved: worker %s no longer held it", task_id, self.worker_id)

    def _tell(self, event: str, item: tuple[Delivery, Outcome], failed: bool = False) -> None:
        """Tell ``on_event`` of a step Redis took; a listener's error never stops settling."""
        if self.on_event is None or failed:
            return
        try:
            self.on_event(event, *item)
        except Exception:
            logger.exception("a listener of %s failed", event)

    @staticmethod
    def _guarded(step: Callable[[], Any], what: str) -> Any:
        """``step()``, any exception but ``SettleFailed`` raised as one (a workflow marker that cannot be decoded)."""
        try:
            return step()
        except SettleFailed:
            raise
        except Exception as exc:
            raise SettleFailed(what, exc) from exc

    def with_retries(self, step: Callable[[], Any], what: str) -> Any:
        """Run one settle step, retrying while Redis says "not now", until it lands (its answer) or is ``Missed``.

        Raises ``SettleFailed`` for a failure that repeats (a non-transient Redis error, any other exception) after
        ``SETTLE_TRIES`` tries.
        """
        failures = 0
        for attempt in itertools.count():
            try:
                return step()
            except LeaseLost as exc:
                logger.warning("%s; another worker has it now", exc)
                return Missed.LOST
            except Exception as exc:
                if not (isinstance(exc, RedisError) and is_transient(exc)):
                    # an answer that would repeat (a script bug, a value Redis refuses, bad data): tried a few times
                    # only, in case it was a passing one, then the task ends in the dead letters
                    failures += 1
                    if failures >= SETTLE_TRIES:
                        raise SettleFailed(what, exc) from exc
                    logger.warning("%s failed (%s: %s); trying again", what, type(exc).__name__, exc)
                elif self.force.is_set():
                    return Missed.STOPPED
                else:
                    logger.warning("%s failed (%s: %s); retrying", what, type(exc).__name__, exc)
                    step = getattr(exc, "again", None) or step  # NotDurable: the step is on the master; only its WAIT is repeated
                time.sleep(min(2.0, 0.02 * 2**attempt))
        return Missed.STOPPED

    def flush_loop(self, held: list[Unsettled], stop: threading.Event) -> None:
        """Settle what executors busy with a long task have held for ``SETTLE_WITHIN``, and all of it when woken.

        ``wake`` is set by a pool that reports outcomes after its lane moved on
        (asyncio) once nothing else is in flight, a batch is full or a task was
        slow: nobody else would settle them before ``SETTLE_WITHIN``.
        """
        while not stop.is_set():
            woken = self.wake.wait(SETTLE_WITHIN / 2)
            self.wake.clear()
            for unsettled in held:
                try:
                    self.settle(unsettled.take(older_than=0.0 if woken else SETTLE_WITHIN))
                except Exception:  # the flusher must outlive any failure
                    logger.exception("settling held tasks failed")
