"""Upkeep: what a worker does for the fleet besides running tasks, on its main thread.

- promote: move due delayed and retried tasks from ``scheduled`` to ``pending``,
  waking when the next one is due (at most every half second);
- reap: hand back the tasks of workers silent past ``WORKER_TIMEOUT`` (every
  ``HEARTBEAT_INTERVAL``; reap.lua decides who may reap whom), and, sooner, of
  workers whose process is known dead by its connection (``Presence``, every
  ``POLL_EVERY`` while this worker holds the queue's poll lease, store/steps/presence.py);
- cancel: tell the pool of running tasks someone cancelled (one look per
  queue with tasks running here, each round, so within about a second);
- in burst mode, notice when the queues are drained; and before leaving, wait (bounded) to reap the
  tasks that workers which look dead still hold (a ``kill -9``'d worker's), so a burst worker
  runs them as any other would (``Upkeep.leave_now``).

A failed round is logged and tried again; it never ends the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django_redisq.exceptions import RedisError
from django_redisq.store.broker import Broker
from django_redisq.store.steps.presence import CONFIRM, POLL_EVERY, refusal
from django_redisq.worker.fetching.held import Held
from django_redisq.worker.observability.outage import Outage
from django_redisq.worker.pools import Pool

logger = logging.getLogger("django_redisq")

ROUND = 0.5
"""Seconds between upkeep rounds, at most."""


class Upkeep:
    def __init__(self, *, broker: Broker, worker_id: str, queues: Sequence[str], held: Held, pool: Pool,
                 stop: threading.Event, reap_every: float, burst: bool,
                 on_recovered: Callable[[Any], None] | None = None, paused: Callable[[], frozenset[str]] | None = None,
                 tick: Callable[[], None] | None = None, by_connection: bool = False, outage: Outage | None = None) -> None:
        """``paused``: the pause watch's view (a burst worker does not wait for a paused queue); ``tick``: called every
        round (the task log's summary line is written even when no more tasks come); ``by_connection``: also reap
        workers whose presence connection is gone (off when an ACL refuses this worker ``CLIENT``); ``outage``: the
        worker's account of Redis out of reach (one line a part)."""
        self.broker, self.worker_id, self.queues = broker, worker_id, list(queues)
        self.held, self.pool, self.stop = held, pool, stop
        self.reap_every, self.burst = reap_every, burst
        self.told: set[str] = set()  # running tasks the pool was told to cancel (until they are settled)
        self.on_recovered = on_recovered  # told what each reap handed back (the task_recovered signal)
        self.paused = paused
        self.tick: Callable[[], None] = tick or (lambda: None)
        self.by_connection = by_connection
        self.outage = outage or Outage(worker_id)
        self._poll_at = dict.fromkeys(self.queues, 0.0)  # monotonic: when to poll each queue's presence next
        self._gone_since: dict[tuple[str, str, str], float] = {}  # (queue, worker, entry) -> first seen gone
        self._polled = dict.fromkeys(self.queues, 0.0)  # monotonic: the last poll of each queue that Redis answered
        self._orphans_until = 0.0  # burst: monotonic end of the wait for dead-looking holders (0: not waiting)

    def loop(self) -> None:
        """Rounds until stopped, or, with ``burst``, until the queues are drained."""
        quiet_rounds, last_reap, promote_at = 0, 0.0, 0.0
        while not self.stop.is_set():
            wait, moved, now = ROUND, 0, time.monotonic()
            try:
                if self.by_connection:
                    wait = min(wait, self.reap_by_connection(now))
                if now >= promote_at or self.burst:
                    nearest = ROUND
                    for q in self.queues:
                        n, nxt = self.broker.promote(q)
                        moved += n
                        if nxt >= 0:
                            nearest = min(nearest, nxt / 1000)
                    promote_at = now + nearest
                wait = min(wait, promote_at - now)
                if now - last_reap >= self.reap_every:
                    last_reap = now
                    self.reap()
                self.cancel_running()
                self.tick()
                if self.burst:
                    quiet_rounds = quiet_rounds + 1 if moved == 0 and self.drained() else 0
                    if quiet_rounds >= 2:
                        if self.leave_now(now):
                            return
                        quiet_rounds, wait = 0, ROUND  # reapable soon: its tasks become pending, and run here
                    wait = min(wait, 0.05)
            except RedisError as exc:
                self.outage.failed("upkeep", exc, "worker upkeep failed (%s); retrying", exc)
                wait = 1.0
            except Exception:
                logger.exception("worker upkeep failed; retrying")
                wait = 1.0
            self.stop.wait(max(0.005, wait))

    def cancel_running(self) -> None:
        for q, ids in self.held.running_by_queue().items():
            requested = self.broker.operator.cancel_requests(q)
            for task_id in ids & requested.keys() - self.told:
                self.told.add(task_id)
                if self.pool.cancel(task_id, requested[task_id]):
                    logger.warning("task id=%s cancelled by %s while running: stopping it", task_id, requested[task_id] or "?")

    def settled(self, ids: set[str]) -> None:
        if self.told:
            self.told -= ids

    def reap(self) -> None:
        for q in self.queues:
            try:
                tasks, workers, recovered = self.broker.reap_detail(q, self.worker_id)
            except RedisError as exc:
                self.outage.failed("reaping", exc, "reaping queue %s failed (%s: %s)", q, type(exc).__name__, exc)
                continue
            self._reaped(q, tasks, workers, recovered, how="silent past WORKER_TIMEOUT")

    def reap_by_connection(self, now: float) -> float:
        """Poll the presence of the queues whose poll lease this worker holds (or can take); reap the workers whose
        connection stayed gone for ``CONFIRM``. Returns seconds until the next poll is due."""
        for q in self.queues:
            if now < self._poll_at[q]:
                continue
            try:
                records, wait = self.broker.presence.lease(q, self.worker_id)
                if records is None:  # another worker polls this queue; take over if its lease lapses
                    self._poll_at[q] = now + max(wait, POLL_EVERY)
                    continue
                self._poll_at[q] = now + POLL_EVERY
                if now - self._polled[q] > 3 * POLL_EVERY + 0.2:  # a gap (Redis or we were away): judge afresh
                    self._forget(q)
                self._polled[q] = now
                records.pop(self.worker_id, None)
                gone = self.broker.presence.connections_gone(q, records) if records else {}
                due = self._confirmed(q, gone, now)
                if due:
                    self._reaped(q, *self.broker.presence.reap_gone(q, self.worker_id, due), how="their connection closed")
            except RedisError as exc:
                if refusal(exc):  # an ACL refuses CLIENT LIST to us: leave it to the timeout
                    logger.warning("reaping by connection is off for worker %s (%s); dead workers are reaped after "
                                   "WORKER_TIMEOUT", self.worker_id, exc)
                    self.by_connection = False
                    return ROUND
                self.outage.failed("presence poll", exc, "presence poll of queue %s failed (%s: %s)", q, type(exc).__name__, exc)
                self._poll_at[q] = now + ROUND
        return max(0.0, min(self._poll_at.values()) - now)

    def _forget(self, q: str) -> None:
        """Start over for ``q``: a worker seen gone before a gap in our polls may have had no chance to come back."""
        for key in [k for k in self._gone_since if k[0] == q]:
            del self._gone_since[key]

    def _confirmed(self, q: str, gone: dict[str, str], now: float) -> dict[str, str]:
        """Of the workers seen gone now, those seen gone (with the same entry) for ``CONFIRM``."""
        seen = {(q, w, rec) for w, rec in gone.items()}
        for key in [k for k in self._gone_since if k[0] == q and k not in seen]:
            del self._gone_since[key]  # back, or reaped: forget
        due = {}
        for key in seen:
            first = self._gone_since.setdefault(key, now)
            if now - first >= CONFIRM:
                due[key[1]] = key[2]
        return due

    def _reaped(self, q: str, tasks: int, workers: list[str], recovered: Any, how: str) -> None:
        if self.on_recovered is not None and recovered:
            self.on_recovered(recovered)
        if workers:
            logger.warning("reaped worker(s) %s (%s): %d task(s) of queue %s back to pending", ", ".join(workers), how, tasks, q)

    def leave_now(self, now: float) -> bool:
        """Burst, drained: whether to leave, or to wait for the tasks of workers that look dead to be reaped.

        A holder looks dead when its connection is gone (reaped by connection within ``CONFIRM``) or its heartbeat
        has been silent for more than 1.5 intervals (reaped by the clock, once this worker's own heartbeats have
        been unbroken for WORKER_TIMEOUT: reap.lua's guard). A busy live holder is not waited for. The wait is
        bounded by twice WORKER_TIMEOUT and a bit; past it, the worker leaves and says what it left."""
        dead = self.dead_looking_holders()
        if not dead:
            self._orphans_until = 0.0
            return True
        if not self._orphans_until:
            self._orphans_until = now + 2 * self.broker.options.worker_timeout + 2 * self.reap_every
            logger.info("burst: worker(s) %s look dead and hold tasks; waiting up to %.0f s to reap and run them",
                        ", ".join(sorted(dead)), self._orphans_until - now)
            return False
        if now < self._orphans_until:
            return False
        logger.warning("burst: gave up waiting to reap worker(s) %s; a worker that is not in burst mode will",
                       ", ".join(sorted(dead)))
        return True

    def dead_looking_holders(self) -> set[str]:
        """The other workers holding tasks of our queues whose connection is gone or whose heartbeat is overdue."""
        overdue_ms = 1500 * self.reap_every
        dead: set[str] = set()
        for q in self.queues:
            holders = self.broker.presence.holders(q, self.worker_id)
            dead |= {h.worker for h in holders if h.silent_ms > overdue_ms}
            records = {h.worker: h.entry for h in holders if h.entry and h.worker not in dead}
            if records and self.by_connection:
                dead |= set(self.broker.presence.connections_gone(q, records))
        return dead

    def drained(self) -> bool:
        """Nothing held, nothing pending (a paused queue's tasks wait for its resume, not for a burst worker)."""
        if len(self.held):
            return False
        paused = self.paused() if self.paused is not None else frozenset()
        return self.broker.nothing_left(self.queues, self.worker_id, skip_waiting=paused)
