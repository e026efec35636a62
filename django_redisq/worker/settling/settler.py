"""Settling: what becomes of a task that has run (ack, retry or bury), promptly and never lost.

Under a backlog an executor acks the tasks it ran in batches (one round trip
for many), but a finished task never waits long for its batch: the executor
settles at once after a task slower than ``SETTLE_WITHIN``, and a flusher
thread settles whatever has waited that long while its executor is busy with
the next task. So ``get_result`` tells the truth within tens of milliseconds,
and a crash re-runs only what had not finished (invariant 9 (docs/explanation/architecture.md)).

A settle step that Redis cannot take now (connection lost, memory full, a
failover, a busy script) is retried with backoff until it lands. One that
would fail again (a result Redis refuses, bookkeeping a script cannot read, a
bug) ends its task in the dead letters with reason ``settle_failed`` and the
exception: handing it back would run it again, for ever. Never lost, never a loop.
That policy is ``steps.py``'s, and every step's answer one ``StepResult``.

The path runs one way: the settler calls its hooks (``hooks.py``: saved
metadata, workflows, what the observer tells the world) at named points, and
reads what each answers; no hook calls the settler back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from django_redisq.store.broker import Broker
from django_redisq.store.steps.replies import Delivery
from django_redisq.worker.running.outcome import DEAD, RETRY, SUCCESS, SUSPEND, Outcome, error_dict
from django_redisq.worker.settling.hooks import DEAD_LETTERED, LEASE_LOST, RETRIED, Batch, SettleHook
from django_redisq.worker.settling.steps import SETTLE_TRIES, Landing, SettleFailed, StepResult, StepRunner

logger = logging.getLogger("django_redisq")

ACK_BATCH = 64
"""Most finished tasks an executor acks in one round trip (only while more work is waiting)."""
SETTLE_WITHIN = 0.05
"""Seconds a finished task may wait for the rest of its batch before it is settled anyway."""

__all__ = ["ACK_BATCH", "DEAD_LETTERED", "LEASE_LOST", "RETRIED", "SETTLE_FAILED", "SETTLE_TRIES", "SETTLE_WITHIN", "Batch",
           "Settler", "Unsettled"]

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


Broken = dict[tuple[str, str], SettleFailed]
"""``(queue, id)`` of the batch's tasks whose settle step failed for good, and why: they are dead-lettered."""


class Settler:
    """Acks, retries and buries batches of run tasks for one worker id, calling its hooks on the way.

    Every task of a batch ends in one of three ways here: settled (acked, retried or dead-lettered), handed to another
    worker (its lease was lost), or, when a settle step fails for good, dead-lettered with reason ``settle_failed``.
    One task's failure never holds the rest of its batch. Only if that burial fails too is the task left in the
    processing list, and then ``unsettled`` tells the sweep it ran: it goes back with its delivery counted, so a task
    that can never be settled ends as ``too_many_deliveries`` instead of running for ever (invariant 4 (docs/explanation/architecture.md)).
    """

    def __init__(self, *, broker: Broker, worker_id: str, steps: StepRunner, hooks: Sequence[SettleHook] = (),
                 on_settled: Callable[[Batch], None] = lambda batch: None, unsettled: dict[str, str] | None = None) -> None:
        """``steps``: the settle policy every Redis step goes through; ``hooks``: called in order at each point;
        ``on_settled``: the worker's own bookkeeping, last; ``unsettled``: shared with the heartbeat's sweep, id ->
        queue of each task that ran and could not be settled."""
        self.broker = broker
        self.worker_id = worker_id
        self.steps = steps
        self.hooks = list(hooks)
        self.on_settled = on_settled
        self.unsettled = unsettled if unsettled is not None else {}
        self.wake = threading.Event()

    def settle(self, batch: Batch) -> None:
        """Ack, retry or bury each task; acks of one queue share a round trip."""
        if not batch:
            return
        try:
            self._before_settle(batch)
            broken: Broken = {}
            hold = self._before_acks(batch, broken)
            self._ack(batch, hold | broken.keys(), broken)
            for d, o in batch:
                if o.kind != SUCCESS and (d.queue, d.id) not in broken:
                    failed = self._retry(d, o) if o.kind == RETRY else self._suspend(d, o) if o.kind == SUSPEND else self._bury(d, o)
                    if failed is not None:
                        broken[(d.queue, d.id)] = failed
            for i, (d, o) in enumerate(batch):
                if (failure := broken.get((d.queue, d.id))) is not None:
                    batch[i] = (d, self._bury_unsettled(d, o, failure))
        finally:  # whatever happened above, the worker forgets these tasks (what Redis still holds, the sweep hands back)
            self._after_settle(batch)

    # -- the hooks' points, each guarded: a hook's error is a failed step at most, never a lost batch

    def _before_settle(self, batch: Batch) -> None:
        for hook in self.hooks:
            try:
                hook.before_settle(batch)
            except Exception:
                logger.exception("settle hook %s failed before settling; settling goes on", type(hook).__name__)

    def _before_acks(self, batch: Batch, broken: Broken) -> set[tuple[str, str]]:
        """Ask the hooks about each success; the ``(queue, id)`` not to ack now (``broken``: not to ack at all)."""
        hold: set[tuple[str, str]] = set()
        for d, o in batch:
            if o.kind != SUCCESS:
                continue
            answer = self._before_ack(d, o)
            if answer.failure is not None:
                broken[(d.queue, d.id)] = answer.failure
            elif not answer.landed:
                hold.add((d.queue, d.id))
        return hold

    def _before_ack(self, d: Delivery, o: Outcome) -> StepResult[Any]:
        for hook in self.hooks:
            try:
                answer = hook.before_ack(d, o)
            except Exception as exc:  # noqa: BLE001 - kept as the dead letter's error (a marker that cannot be decoded)
                return StepResult.broken(f"{type(hook).__name__} before acking {d.id}", exc)
            if not answer.landed:
                return answer
        return StepResult.ok()

    def _before_bury(self, d: Delivery, o: Outcome) -> None:
        for hook in self.hooks:
            try:
                hook.before_bury(d, o)
            except Exception:  # the step is dead-lettered whatever becomes of its workflow's bookkeeping
                logger.exception("task %s: %s before its burial failed; it is dead-lettered all the same", d.id,
                                 type(hook).__name__)

    def _after_step(self, event: str, d: Delivery, o: Outcome) -> None:
        for hook in self.hooks:
            try:
                hook.after_step(event, d, o)
            except Exception:
                logger.exception("a listener of %s failed", event)

    def _after_settle(self, batch: Batch) -> None:
        for hook in self.hooks:
            try:
                hook.after_settle(batch)
            except Exception:
                logger.exception("settle hook %s failed after settling", type(hook).__name__)
        self.on_settled(batch)

    # -- the steps

    def _ack(self, batch: Batch, skip: set[tuple[str, str]], broken: Broken) -> None:
        """Ack the successes, a round trip per queue; if a batch's ack fails for good, each task alone (one bad
        task's ack never holds the rest)."""
        acks: dict[str, Batch] = {}
        for d, o in batch:
            if o.kind == SUCCESS and (d.queue, d.id) not in skip:
                acks.setdefault(d.queue, []).append((d, o))
        for q, items in acks.items():
            failure = self._ack_some(q, items)
            if failure is None:
                continue
            if len(items) == 1:
                broken[(q, items[0][0].id)] = failure
                continue
            logger.warning("acking %d task(s) of queue %s failed (%s); acking each alone", len(items), q, failure)
            for item in items:
                if (alone := self._ack_some(q, [item])) is not None:
                    broken[(q, item[0].id)] = alone

    def _ack_some(self, q: str, items: Batch) -> SettleFailed | None:
        results = [(d.id, o.result_json) for d, o in items]
        runs = [(o.task_name or d.task, o.duration) for d, o in items]  # run times, written by the same call (store/reads/durations.py)
        plain = {d.id for d, _ in items if d.plain}  # their hash is written without a read (fetch.lua said so)
        acked = self.steps.run(partial(self.broker.ack_many, q, self.worker_id, results, runs, plain), f"acking {len(results)} task(s)")
        for task_id in acked.value or ():
            logger.warning("task %s was no longer held by worker %s at ack; another worker has it now", task_id, self.worker_id)
            self._after_step(LEASE_LOST, *next((d, o) for d, o in items if d.id == task_id))
        return acked.failure

    def _retry(self, d: Delivery, o: Outcome) -> SettleFailed | None:
        done = self.steps.run(partial(self.broker.retry, d.queue, self.worker_id, d.id, o.delay_ms, o.error), f"retrying {d.id}")
        # False: dead-lettered instead (a cancel request came while it ran)
        self._tell(done, RETRIED if done.value else DEAD_LETTERED, d, o)
        return done.failure

    def _suspend(self, d: Delivery, o: Outcome) -> SettleFailed | None:
        """A durable task's sleep or wait: scheduled at its step's due time, holding nothing (suspend.lua)."""
        aside = int(self.broker.options.for_queue(d.queue).dead_letter_ttl * 1000)
        done = self.steps.run(partial(self.broker.durable.suspend, d.queue, self.worker_id, d.id, o.step, aside),
                              f"suspending {d.id}")
        if done.landing is Landing.LOST:
            self._after_step(LEASE_LOST, d, o)
        return done.failure

    def _bury(self, d: Delivery, o: Outcome) -> SettleFailed | None:
        self._before_bury(d, o)
        done = self.steps.run(partial(self.broker.bury, d.queue, self.worker_id, d.id, o.error, o.reason, o.failed),
                              f"burying {d.id}")
        self._tell(done, DEAD_LETTERED, d, o)
        return done.failure

    def _tell(self, done: StepResult[Any], event: str, d: Delivery, o: Outcome) -> None:
        """Tell the hooks what Redis did with a retry or a burial: ``event`` if it landed, ``LEASE_LOST`` if not ours."""
        if done.landed:
            self._after_step(event, d, o)
        elif done.landing is Landing.LOST:
            self._after_step(LEASE_LOST, d, o)

    def _bury_unsettled(self, d: Delivery, o: Outcome, failure: SettleFailed) -> Outcome:
        """Dead-letter a task whose settle step failed for good (reason ``settle_failed``); the outcome it ends with."""
        error = error_dict(failure.cause)
        error["msg"] = str(failure)[:2000]
        dead = Outcome(DEAD, error=error, reason=SETTLE_FAILED, failed=o.failed, task_name=o.task_name, duration=o.duration,
                       trace_from=o.trace_from)
        logger.error("task %s of queue %s ran, but %s; it is dead-lettered (reason %s)", d.id, d.queue, failure, SETTLE_FAILED)
        again = self._bury(d, dead)
        if again is not None:  # the sweep hands it back with its delivery counted (background/heartbeat.py)
            logger.error("task %s could not be dead-lettered either (%s); it is handed back and ends as "
                         "too_many_deliveries if this repeats", d.id, again)
            self.unsettled[d.id] = d.queue
        return dead

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
