"""Settling: what becomes of a task that has run (ack, retry or bury), promptly and never lost.

Under a backlog an executor acks the tasks it ran in batches (one round trip
for many), but a finished task never waits long for its batch: the executor
settles at once after a task slower than ``SETTLE_WITHIN``, and a flusher
thread settles whatever has waited that long while its executor is busy with
the next task. So ``get_result`` tells the truth within tens of milliseconds,
and a crash re-runs only what had not finished (DESIGN invariant 9).

A settle step that Redis cannot take now (connection lost, memory full, a
failover, a busy script) is retried with backoff until it lands; one that
would fail again (a script bug) is logged and left in the worker's processing
list, where the sweep or the reaper hands it back: never lost.
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
from django_redisq.store.replies import Delivery
from django_redisq.store.server import is_transient
from django_redisq.worker.flows import WorkflowHooks
from django_redisq.worker.outcome import DEAD, RETRY, SUCCESS, Outcome

logger = logging.getLogger("django_redisq")

ACK_BATCH = 64
"""Most finished tasks an executor acks in one round trip (only while more work is waiting)."""
SETTLE_WITHIN = 0.05
"""Seconds a finished task may wait for the rest of its batch before it is settled anyway."""

Batch = list[tuple[Delivery, Outcome]]
RETRIED, DEAD_LETTERED, LEASE_LOST = "retried", "dead_lettered", "lease_lost"
"""What ``Settler.on_event`` is told once Redis has taken a step (signals and metrics listen)."""
_LOST = object()


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
    """Acks, retries and buries batches of run tasks for one worker id."""

    def __init__(self, broker: Broker, worker_id: str, force: threading.Event, on_settled: Callable[[Batch], None],
                 on_event: Callable[[str, Delivery, Outcome], None] | None = None, flows: WorkflowHooks | None = None) -> None:
        self.broker = broker
        self.flows = flows  # workflow steps: recorded and their dependents released before the ack (worker/flows.py)
        self.worker_id = worker_id
        self.force = force
        self.on_settled = on_settled
        self.on_event = on_event
        self.wake = threading.Event()

    def settle(self, batch: Batch) -> None:
        """Ack, retry or bury each task; acks of one queue share a round trip."""
        if not batch:
            return
        try:
            self._save_metadata(batch)
            acks: dict[str, list[tuple[str, str]]] = {}
            runs: dict[str, list[tuple[str, float]]] = {}  # run times, written by the same call (store/durations.py)
            hold = self.flows.before_ack(batch, self.with_retries) if self.flows else set()
            for d, o in batch:
                if o.kind == SUCCESS and (d.queue, d.id) not in hold:
                    acks.setdefault(d.queue, []).append((d.id, o.result_json))
                    runs.setdefault(d.queue, []).append((o.task_name or d.task, o.duration))
            for q, results in acks.items():
                lost = self.with_retries(partial(self.broker.ack_many, q, self.worker_id, results, runs[q]), f"acking {len(results)} task(s)")
                for task_id in lost if isinstance(lost, list) else ():
                    logger.warning("task %s was no longer held by worker %s at ack; another worker has it now", task_id, self.worker_id)
                    self._tell(LEASE_LOST, next((d, o) for d, o in batch if d.id == task_id and d.queue == q))
            for d, o in batch:
                if o.kind == RETRY:
                    done = self.with_retries(partial(self.broker.retry, d.queue, self.worker_id, d.id, o.delay_ms, o.error), f"retrying {d.id}")
                    # False: dead-lettered instead (a cancel request came while it ran)
                    self._tell(LEASE_LOST if done is _LOST else RETRIED if done else DEAD_LETTERED, (d, o), done is None)
                elif o.kind == DEAD:
                    if self.flows:
                        self.flows.before_bury(d, o, self.with_retries)
                    done = self.with_retries(partial(self.broker.bury, d.queue, self.worker_id, d.id, o.error, o.reason, o.failed), f"burying {d.id}")
                    self._tell(LEASE_LOST if done is _LOST else DEAD_LETTERED, (d, o), done is None)
        finally:  # whatever happened above, the worker forgets these tasks (what Redis still holds, the sweep hands back)
            self.on_settled(batch)

    def _save_metadata(self, batch: Batch) -> None:
        """Save the metadata the batch's tasks changed (metadata.py), before their ack, retry or burial.

        One round trip per queue, only for batches that hold such a task; a task
        whose lease was lost keeps the metadata of the copy that holds it now.
        """
        changed: dict[str, list[tuple[str, str]]] = {}
        for d, o in batch:
            if o.metadata is not None:
                changed.setdefault(d.queue, []).append((d.id, o.metadata))
        for q, items in changed.items():
            lost = self.with_retries(partial(self.broker.save_metadata_held, q, self.worker_id, items), f"saving the metadata of {len(items)} task(s)")
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

    def with_retries(self, step: Callable[[], Any], what: str) -> Any:
        """Run one settle step, retrying while Redis says "not now", until it lands (its answer) or a force stop (None)."""
        for attempt in itertools.count():
            try:
                return step()
            except LeaseLost as exc:
                logger.warning("%s; another worker has it now", exc)
                return _LOST
            except RedisError as exc:
                if not is_transient(exc):  # an answer that would repeat (a script bug): the sweep hands the task back
                    logger.exception("%s failed; the task is handed back by the sweep", what)
                    return None
                if self.force.is_set():
                    return None
                logger.warning("%s failed (%s: %s); retrying", what, type(exc).__name__, exc)
                step = getattr(exc, "again", None) or step  # NotDurable: the step is on the master; only its WAIT is repeated
                time.sleep(min(2.0, 0.02 * 2**attempt))
            except Exception:  # not retryable: the task stays in our list and is handed back by the sweep
                logger.exception("%s failed", what)
                return None
        return None

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
