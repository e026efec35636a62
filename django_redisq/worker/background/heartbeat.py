"""The heartbeat: keeps a worker registered, its guards leased, and tells it when it was reaped.

Each beat (every HEARTBEAT_INTERVAL, on its own connection whose timeout fits
the beat's budget) refreshes the worker's score on every queue, renews the
idempotency guards of what it holds, and returns the queues on which the
worker was no longer registered: it was reaped there while paused (SIGSTOP, a
long GC pause, C code holding the GIL) or cut off from Redis. Then the worker
drops, unstarted, every task of that queue it still holds locally: those went
back to pending and may already have run elsewhere (the fence, invariant 8 of
docs/explanation/architecture.md).

The beat also grants the worker a lease: executors start a task only while
``may_start()``, that is within WORKER_TIMEOUT less one interval of the last
beat Redis answered. No other worker can have reaped it before that, so after
a pause the executors wait for the next beat, which fences them if needed,
and only tasks already running when the pause began can run twice.

With a ``Presence`` (store/steps/presence.py), the heartbeat also holds the worker's
presence links: between beats it looks at them every ``CHECK_EVERY`` (no round
trip), and when one was dropped (an operator's CLIENT KILL, a reset) it opens
a new one and beats at once to register it, long before a reaper could judge
the worker dead by its connection; until then ``may_start()`` is false.

The sweep hands back ids in the worker's processing list that the worker never
heard of (a fetch whose reply was lost), once seen twice in a row.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django_redisq.core.options import Options
from django_redisq.exceptions import RedisError
from django_redisq.store.broker import Broker
from django_redisq.store.steps.presence import CHECK_EVERY, Presence
from django_redisq.worker.observability.outage import Outage

logger = logging.getLogger("django_redisq")


class Heartbeat:
    def __init__(
        self,
        *,
        broker: Broker,
        options: Options,
        worker_id: str,
        queues: Sequence[str],
        info: Callable[[], dict[str, Any]],
        known: Callable[[], set[str]],
        on_fenced: Callable[[str], None],
        on_beat: Callable[[bool], None] | None = None,
        presence: Presence | None = None,
        unsettled: dict[str, str] | None = None,
        outage: Outage | None = None,
    ) -> None:
        """``broker``: one on the heartbeat's own connections (``Broker.for_heartbeat``), whose short timeouts keep a
        beat's round trip within the lease; ``on_beat`` is told of each beat's success (health file, metrics);
        ``presence``: the worker's presence links (opened), which this thread owns from then on; ``unsettled``: the
        settler's tasks that ran and could not be settled (id -> queue), which the sweep hands back counted;
        ``outage``: the worker's account of Redis out of reach (a beat that lands ends one)."""
        self.options, self.worker_id, self.queues = options, worker_id, list(queues)
        self.info, self.known, self.on_fenced = info, known, on_fenced
        self.broker = broker
        self.lease_until = 0.0  # monotonic: executors may start tasks before this
        self.on_beat = on_beat
        self.presence = presence
        self.unsettled = unsettled if unsettled is not None else {}
        self.outage = outage or Outage(worker_id)
        self._registered = False
        self._suspects: dict[str, set[str]] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()

    def may_start(self) -> bool:
        """Whether no other worker can have reaped this one yet: not by the clock, nor by its connection."""
        now = time.monotonic()
        return now < self.lease_until and (self.presence is None or self.presence.fresh(now))

    def beat(self) -> None:
        """One heartbeat on every queue; fences the queues on which the worker had been reaped."""
        sent = time.monotonic()
        records = None
        if self.presence is not None:
            self.presence.verify()
            records = self.presence.records()
        gone = self.broker.heartbeat(self.queues, self.worker_id, self.info(), records)
        if self.presence is not None:
            self.presence.registered()
        if self._registered:
            for q in gone:
                self.on_fenced(q)
        self._registered = True
        # Redis scored this beat no earlier than `sent`; nobody reaps before that plus WORKER_TIMEOUT
        self.lease_until = sent + self.options.worker_timeout - self.options.heartbeat_interval
        self._told(True)

    def _told(self, ok: bool) -> None:
        if self.on_beat is not None:
            try:
                self.on_beat(ok)
            except Exception:
                logger.exception("a heartbeat listener failed")

    def wake(self) -> None:
        """Beat now (a fetch found the worker fenced)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def loop(self) -> None:
        failed = False
        while True:
            # after a failed beat, try again soon, but a failing Redis is not hammered by wake-ups
            self._between_beats(min(0.25, self.options.heartbeat_interval) if failed else self.options.heartbeat_interval,
                                wakeable=not failed)
            self._wake.clear()
            if self._stop.is_set():
                return
            failed = False
            try:
                self.beat()
            except Exception as exc:  # the heartbeat must never stop while tasks run
                failed = True
                self._told(False)
                if isinstance(exc, RedisError):
                    self.outage.failed("heartbeat", exc, "heartbeat of worker %s failed (%s: %s)", self.worker_id,
                                       type(exc).__name__, exc)
                else:
                    logger.exception("heartbeat of worker %s failed", self.worker_id)
                continue
            self.outage.answered()
            for q in self.queues:  # each queue on its own: one bad list does not stop the others
                try:
                    self.sweep(q)
                except Exception as exc:  # noqa: BLE001 - logged; the next beat sweeps again
                    self.outage.failed("sweep", exc, "sweep of queue %s failed (%s: %s)", q, type(exc).__name__, exc)

    def _between_beats(self, seconds: float, wakeable: bool = True) -> None:
        """Wait ``seconds``, or less: woken (if ``wakeable``), or a presence link was dropped (then beat now, to
        register a new one)."""
        event = self._wake if wakeable else self._stop
        if self.presence is None:
            event.wait(seconds)
            return
        deadline = time.monotonic() + seconds
        while not event.wait(max(0.0, min(CHECK_EVERY, deadline - time.monotonic()))):
            try:
                if (not self.presence.check() and wakeable) or time.monotonic() >= deadline:
                    return
            except Exception:  # a link we cannot look at is reopened at the next beat, which is not hurried
                logger.debug("presence check failed", exc_info=True)
                event.wait(max(0.0, deadline - time.monotonic()))
                return

    def close(self) -> None:
        """Close the presence links (the worker has left: nothing to prove any more)."""
        if self.presence is not None:
            self.presence.close()

    def sweep(self, q: str) -> None:
        """Hand back ids in our processing list that we do not know: a fetch reply lost (the claim undone, as if never
        fetched), or a task that ran and could not be settled (its delivery stays counted: never an endless loop)."""
        ids = self.broker.processing_ids(q, self.worker_id)
        known = self.known()
        orphans = {i for i in ids if i not in known}
        confirmed = orphans & self._suspects.get(q, set())
        ran = sorted(i for i in confirmed if self.unsettled.get(i) == q)
        lost = sorted(confirmed.difference(ran))
        if lost:
            logger.warning("handing back %d task(s) of queue %s whose fetch reply was lost", len(lost), q)
            self.broker.release(q, self.worker_id, lost)
        if ran:
            logger.warning("handing back %d task(s) of queue %s that ran and could not be settled", len(ran), q)
            self.broker.release(q, self.worker_id, ran, ran=True)
        present = set(ids)
        for i in [i for i, queue in list(self.unsettled.items()) if queue == q and (i in ran or i not in present)]:
            self.unsettled.pop(i, None)
        self._suspects[q] = orphans - confirmed
