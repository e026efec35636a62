"""The worker: composes its components, runs the executor lanes, and shuts down in order.

``worker/parts.py`` builds the components, each with its collaborators by keyword:

- ``worker/fetching/held.py``: what the worker holds (fetched, unsettled, running), within
  a per-queue budget, the prefetch.
- ``worker/fetching/fetcher.py``: keeps the budget fetched; executors fetch for themselves
  under a backlog, a thread per queue blocks in BLMOVE once it is dry.
- ``worker/fetching/queue_order.py``: the queue order, strict (earlier queues first) or weighted.
- ``worker/fetching/handback.py``: hands back what the worker fetched and could not start
  soon (every slot took a long task), so a worker with a free slot runs it.
- ``worker/fetching/marks.py``: tells Redis which held tasks run now (``running`` apart from
  ``held`` in stats, the admin, metrics and health).
- ``worker/fetching/pausing.py``: reads which queues are paused, blocks them and hands back
  their fetched tasks; unblocks them on resume.
- executor lanes (here): take tasks in the queue order, each only within
  the heartbeat's lease, and hand them to the pool
  (``worker/pools/``: threads, processes or asyncio), which runs them with the
  runner (``worker/running/runner.py``) and reports each outcome (``worker/running/outcome.py``).
- ``worker/settling/settler.py``: ack, retry or bury, in batches, within ``SETTLE_WITHIN``,
  calling its settle hooks (saved metadata, workflow steps, the observer) on the way.
- ``worker/background/heartbeat.py``: keeps the worker registered and its guards leased, and
  fences it after it was reaped.
- ``worker/background/scheduler.py``: claims the due ticks of periodic schedules (its own thread;
  off with ``scheduler=False``, and by default in burst mode).
- ``worker/background/pump.py``: turns the events of the subscriptions of our queues into tasks,
  reclaims what dead workers left pending, trims the topics (its own threads).
- ``worker/background/upkeep.py`` (on the main thread): promote due tasks, reap dead workers,
  tell the pool of cancelled tasks it runs.

Signals belong to the management command, not here.

No exception, from any task or any task data, ends an executor thread: a task
that cannot even be run is dead-lettered with the reason.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from django_redisq.exceptions import RedisError
from django_redisq.store import server
from django_redisq.store.server import BLOCK_TIMEOUT
from django_redisq.store.steps.replies import CORRUPT, NOMSG, Delivery
from django_redisq.worker import stopping
from django_redisq.worker.parts import Controls, Parts, WorkerSpec, build_parts, default_name, worker_id
from django_redisq.worker.running.outcome import DEAD, Outcome, error_dict
from django_redisq.worker.running.runner import Runner
from django_redisq.worker.settling.settler import ACK_BATCH, SETTLE_WITHIN, Batch, Unsettled

__all__ = ["Worker", "default_name", "worker_id"]

logger = logging.getLogger("django_redisq")
"""One line per settled task (INFO; WARNING with the traceback for a failed attempt)."""

BAD_MESSAGE = "django_redisq.exceptions.BadMessage"
HOLD_SECONDS = 0.01
"""Automatic prefetch: hold about this much work per thread beyond the tasks running."""
START_SOON = 0.5
"""Beyond its free slots a worker holds only what its threads start within this share of HAND_BACK_AFTER, by the
average run time."""
AUTO_PREFETCH_MAX = 64


class Worker:
    """Serves queues of one task backend until stopped (or drained, with ``burst``).

    ``queues`` in a list are served in strict order; as a mapping of queue
    name to weight (``{"emails": 6, "default": 3, "low": 1}``), in weighted order.
    Its components are built by ``build_parts`` (``worker/parts.py``) and kept
    in ``parts``; each is also an attribute of the worker (``worker.settler``).
    """

    def __init__(
        self,
        queues: Sequence[str] | Mapping[str, int] | None = None,
        *,
        backend: str = "default",
        concurrency: int = 1,
        name: str | None = None,
        burst: bool = False,
        max_tasks: int | None = None,
        prefetch: int | None = None,
        runner: Runner | None = None,
        scheduler: bool | None = None,
        pool: str = "threads",
        max_tasks_per_child: int | None = None,
        max_memory_per_child: int | None = None,
        events: bool | None = None,
    ) -> None:
        self.spec = spec = WorkerSpec.of(
            queues, backend=backend, concurrency=concurrency, name=name, burst=burst, max_tasks=max_tasks,
            prefetch=prefetch, pool=pool, max_tasks_per_child=max_tasks_per_child,
            max_memory_per_child=max_memory_per_child, scheduler=scheduler, events=events)
        self.options, self.name, self.id = spec.options, spec.name, spec.id
        self.concurrency, self.burst, self.max_tasks, self.fixed_prefetch = concurrency, burst, spec.max_tasks, spec.prefetch
        self.logical_queues = list(spec.queues)
        self.avg_duration = 0.001  # seconds, moving average of task run time
        self.processed = 0
        self.started_at = time.time()
        self._stop, self._force, self._flush_stop = threading.Event(), threading.Event(), threading.Event()
        self._stop_why = ""
        self._count_lock = threading.Lock()
        self.parts = parts = build_parts(spec, Controls(
            stop=self._stop, force=self._force, flush_stop=self._flush_stop, prefetch=self.prefetch, ahead=self.ahead,
            info=self.info, fenced=self._fenced, settled=self._settled), runner=runner)
        self._take(parts)
        self.queues = list(self.order.queues)  # a partitioned queue is served as its partitions (core/partitions.py)
        self.unsettled = [Unsettled() for _ in range(self.pool.lanes)]

    def _take(self, p: Parts) -> None:
        """Each part as an attribute of its own: the run loop's names, and the paths tests and runworker use."""
        self.outage, self.broker, self.runner, self.order, self.held, self.pool = p.outage, p.broker, p.runner, p.order, p.held, p.pool
        self.observer, self.heartbeat, self.pauses, self.fetcher = p.observer, p.heartbeat, p.pauses, p.fetcher
        self.handback, self.marks, self.settler, self.tasklog = p.handback, p.marks, p.settler, p.tasklog
        self.upkeep, self.scheduler, self.pump = p.upkeep, p.scheduler, p.pump

    # -- the server ------------------------------------------------------

    @property
    def where(self) -> str:
        """Where this worker's Redis is, safe to log: never a password."""
        return server.describe(self.options)

    def check_server(self) -> None:
        """``RedisUnavailable`` with a one-line reason unless every primary answers and is new enough."""
        server.check_server(self.options)

    def durability_warnings(self) -> list[str]:
        """The server settings under which Redis can lose tasks (an evicting memory policy, no persistence)."""
        return server.durability_warnings(self.options)

    # -- control ---------------------------------------------------------

    def prefetch(self) -> int:
        """Tasks held per queue: fixed if configured, else about HOLD_SECONDS of work per thread.

        Fast tasks are fetched and acked in large batches; slow ones one per
        free thread, so a busy worker does not sit on tasks an idle one could run.
        """
        if self.fixed_prefetch:
            return self.fixed_prefetch
        extra = int(self.concurrency * HOLD_SECONDS / max(self.avg_duration, 1e-6))
        return max(1, min(max(AUTO_PREFETCH_MAX, 2 * self.concurrency), self.concurrency + extra))

    def ahead(self) -> int:
        """Tasks held unstarted beyond the free slots (no hoarding, worker/fetching/held.py): the prefetch's share beyond the
        threads, and only what they start within half of HAND_BACK_AFTER at the average run time, even with a fixed prefetch."""
        soon = int(self.concurrency * START_SOON * self.options.hand_back_after / max(self.avg_duration, 1e-6))
        return max(0, min(self.prefetch() - self.concurrency, soon))

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def request_stop(self, why: str = "") -> None:
        """Stop fetching; running tasks finish and are settled (warm shutdown). ``why`` (a signal's name): the
        shutdown says what it waits for (``stop_line``), from the worker's own thread: a signal handler must not
        take the locks the interrupted thread may hold."""
        self._stop_why = self._stop_why or why
        self._stop.set()

    def stop_line(self, why: str) -> str:
        """What a stop waits for, said when it begins (worker/stopping.py)."""
        return stopping.stop_line(self.held.executing_deliveries(), self.options.shutdown_grace, why)

    def hand_back_running(self) -> int:
        """The tasks still running, back to pending with their delivery counted (worker/stopping.py)."""
        return stopping.hand_back(self.broker, self.id, self.held.executing_by_queue(), ran=True)

    def hand_back_now(self) -> int:
        """Everything held back to pending (a stop that exits now): the unstarted as they were, the running counted."""
        return stopping.hand_back(self.broker, self.id, self.held.unstarted()) + self.hand_back_running()

    def request_force_stop(self) -> None:
        """Stop waiting for running tasks; they stay in processing for the reaper."""
        self._stop.set()
        self._force.set()

    def run(self) -> int:
        """Serve until stopped (or drained, with ``burst``); returns tasks settled."""
        self.pool.start()  # children set up before the worker registers and fetches
        self.prove_presence()
        self.heartbeat.beat()  # registered before the first fetch
        heartbeat = threading.Thread(target=self.heartbeat.loop, name="redisq-heartbeat", daemon=True)
        flusher = threading.Thread(target=self.settler.flush_loop, args=(self.unsettled, self._flush_stop), name="redisq-settle", daemon=True)
        fetchers = [threading.Thread(target=self.fetcher.loop, args=(q,), name=f"redisq-fetch-{q}", daemon=True) for q in self.queues]
        executors = [threading.Thread(target=self._execute_loop, args=(i, u), name=f"redisq-exec-{i}", daemon=True)
                     for i, u in enumerate(self.unsettled)]
        extra = [threading.Thread(target=self.pauses.loop, name="redisq-pauses", daemon=True),
                 threading.Thread(target=self.handback.loop, name="redisq-handback", daemon=True)]
        marks = threading.Thread(target=self.marks.loop, name="redisq-marks", daemon=True)
        if self.pump is not None:
            extra += self.pump.threads()
        if self.scheduler is not None and self.scheduler.schedules:
            extra.append(threading.Thread(target=self.scheduler.loop, name="redisq-scheduler", daemon=True))
        for t in [heartbeat, flusher, marks, *fetchers, *executors, *extra]:
            t.start()
        # runworker's banner is the start line people read; this one is for workers built in code
        logger.debug("worker %s serving %s with %s", self.id, self.order.describe(), self.describe_pool())
        try:
            self.upkeep.loop()
        finally:
            self._shutdown([*fetchers, *extra], executors, [heartbeat, flusher, marks])
            self.tasklog.tick(force=True)
        return self.processed

    def prove_presence(self) -> None:
        """Open the presence links (store/steps/presence.py): this worker's death is then seen within a second, and it
        reaps dead workers as soon. Refused by an ACL, both fall back to WORKER_TIMEOUT, and the log says so."""
        presence = self.heartbeat.presence
        why = presence.open() if presence is not None else "no presence links"
        if why:
            self.heartbeat.presence = None
            self.upkeep.by_connection = False
            logger.warning("worker %s cannot prove its presence by its connection (%s): a dead worker's tasks are "
                           "recovered after WORKER_TIMEOUT (%gs), not within a second; grant CLIENT ID, CLIENT LIST "
                           "and INFO to recover sooner", self.id, why, self.options.worker_timeout)

    def describe_pool(self) -> str:
        kind = {"threads": "thread(s)", "processes": "child process(es)", "asyncio": "task(s) at once on an event loop"}
        return f"{self.concurrency} {kind.get(self.pool.name, self.pool.name)}"

    def info(self) -> dict[str, Any]:
        return {
            "id": self.id, "name": self.name, "host": socket.gethostname(), "pid": os.getpid(), "queues": self.logical_queues,
            "concurrency": self.concurrency, "pool": self.pool.name, "started_at": int(self.started_at * 1000),
            "processed": self.processed, "current": self.held.current(),
        }

    def _fenced(self, q: str) -> None:
        """We were reaped on ``q``: drop, unstarted, every task of it we hold (it is pending again)."""
        dropped = self.held.drop(q)
        logger.warning(
            "worker %s was reaped on queue %s (paused or cut off past WORKER_TIMEOUT): %d fetched task(s) dropped unstarted, "
            "they run elsewhere; serving again", self.id, q, dropped,
        )

    # -- running ---------------------------------------------------------

    def _execute_loop(self, lane: int, unsettled: Unsettled) -> None:
        reserved = False  # room in the pool for the next task (always, except in a full asyncio pool)
        while True:
            try:
                if not reserved and not (reserved := self.pool.reserve(0.2)):
                    self.settler.settle(unsettled.take())
                    if self._stop.is_set():
                        break
                    continue
                going, used = self._execute_one(lane, unsettled)
                reserved = reserved and not used
                if not going:
                    break
            except BaseException:  # nothing may end an executor lane
                logger.exception("executor error; going on")
                time.sleep(0.05)
        if reserved:
            self.pool.unreserve()
        self.settler.settle(unsettled.take())

    def _execute_one(self, lane: int, unsettled: Unsettled) -> tuple[bool, bool]:
        """Hand the next task to the pool (or fetch): (False once the worker stops, whether the pool took a task)."""
        d = self.held.next() if not self.order.weighted else self.fetcher.take_weighted(partial(self._settle_own, unsettled))
        if d is None:
            if len(unsettled):  # idle: settle what has run before anything else
                self.settler.settle(unsettled.take())
                return True, False
            if self._stop.is_set():
                return False, False
            if self.fetcher.fetch_now():
                return True, False
            d = self.held.next(timeout=0.2)
            if d is None:
                return True, False
        if self._stop.is_set():  # stopping: unstarted tasks are handed back in _shutdown
            self.held.put_back(d)
            return False, False
        started = self.held.begin(d, self.heartbeat.may_start)
        if started is False:
            return True, False  # dropped by a fence: it is pending again, maybe run elsewhere
        if started is None:  # past our lease (we were paused?): wait for the heartbeat to tell whether we were reaped
            self.held.put_back(d)
            self.heartbeat.wake()
            time.sleep(0.02)
            return True, False
        used = d.code not in (NOMSG, CORRUPT)
        try:
            if used:
                self.pool.submit(lane, d, partial(self._done, partial(self._reported, unsettled) if self.pool.deferred else unsettled.add))
            else:
                self._done(unsettled.add, d, self._unrunnable(d))
        except BaseException as exc:  # a task that breaks the pool is dead-lettered, the lane goes on
            logger.exception("running task %s failed inside the worker", d.id)
            self._done(unsettled.add, d, Outcome(DEAD, error=error_dict(exc), reason="worker_error"))
        # under a backlog, settle in batches of half the prefetch, so fetching refills while the other
        # half runs; a slow task is settled at once, and the flusher settles what waits SETTLE_WITHIN
        if len(unsettled) >= min(ACK_BATCH, max(1, self.prefetch() // 2)) or unsettled.slow \
                or unsettled.age() >= SETTLE_WITHIN:
            self.settler.settle(unsettled.take())
        return True, used

    def _done(self, then: Callable[[Delivery, Outcome], None], d: Delivery, outcome: Outcome) -> None:
        """``d`` has run: its slot is free (held.finished), then its outcome goes to be settled."""
        self.held.finished(d)
        then(d, outcome)

    def _settle_own(self, unsettled: Unsettled) -> None:
        if len(unsettled):
            self.settler.settle(unsettled.take())

    def _reported(self, unsettled: Unsettled, d: Delivery, outcome: Outcome) -> None:
        """An outcome a deferred pool reports after its lane moved on: the flusher settles it, at once if nothing waits for a batch."""
        unsettled.add(d, outcome)
        if unsettled.slow or len(unsettled) >= min(ACK_BATCH, max(1, self.prefetch() // 2)) or self.pool.in_flight() <= 1:
            self.settler.wake.set()

    @staticmethod
    def _unrunnable(d: Delivery) -> Outcome:
        if d.code == NOMSG:
            return Outcome(DEAD, error=error_dict(None, f"no task data for id {d.id!r}", BAD_MESSAGE), reason="missing_task")
        detail = d.problem or "wrong key type or counters"
        return Outcome(DEAD, error=error_dict(None, f"task data of id {d.id!r} is corrupt: {detail}", BAD_MESSAGE), reason="corrupt_task")

    def _settled(self, batch: Batch) -> None:
        self.held.forget(d for d, _ in batch)
        self.upkeep.settled({d.id for d, _ in batch})
        with self._count_lock:
            self.processed += len(batch)
            done = self.processed
        for _, o in batch:
            self.avg_duration += 0.05 * (o.duration - self.avg_duration)
        self.tasklog.settled(batch)  # failures at WARNING now, successes summed up at INFO (worker/observability/tasklog.py)
        if self.max_tasks and done >= self.max_tasks:
            self.request_stop()

    def _shutdown(self, fetchers: list[threading.Thread], executors: list[threading.Thread], last: list[threading.Thread]) -> None:
        self._stop.set()
        if self._stop_why:
            logger.warning("%s", self.stop_line(self._stop_why))
        self.fetcher.wake()  # the threads waiting on their own events leave now, not at their next look
        self.pauses.wake()
        for t in fetchers:
            t.join(BLOCK_TIMEOUT + 5)
        deadline = time.monotonic() + self.options.shutdown_grace
        for t in executors:
            while t.is_alive() and not self._force.is_set() and time.monotonic() < deadline:
                t.join(0.1)
        clean = not any(t.is_alive() for t in executors) and self.pool.wait_idle(deadline)
        if clean:  # outcomes the pool reported after its lanes ended (the asyncio pool's)
            for u in self.unsettled:
                self.settler.settle(u.take())
        self.pool.stop(force=not clean)
        unstarted = self.held.unstarted()
        # heartbeat and flusher stop last: only once no task of ours is running
        self._flush_stop.set()
        self.heartbeat.stop()
        for t in last:
            t.join(5)
        try:
            for q, ids in unstarted.items():
                self.broker.release(q, self.id, ids)
            if clean:  # hand back anything left and leave the heartbeat set
                for q in self.queues:
                    self.broker.release(q, self.id)
        except RedisError as exc:
            clean = False
            logger.warning("could not hand back tasks at shutdown (%s); the reaper will", exc)
        if not clean:
            running = self.held.executing_deliveries()
            try:
                handed = self.hand_back_running()
            except RedisError as exc:
                logger.warning("worker %s stopped with %d task(s) still running, and could not hand them back (%s): "
                               "they go back to pending once another worker reaps this one", self.id, len(running), exc)
            else:
                logger.warning("worker %s stopped at the end of SHUTDOWN_GRACE (%g s) with %d task(s) still running, "
                               "handed back to pending, their attempt counted: %s", self.id, self.options.shutdown_grace,
                               handed, stopping.named(running, shown=None))
        self.heartbeat.close()
        if clean:
            logger.log(logging.DEBUG if self.burst else logging.INFO, "worker %s stopped after %d task(s)", self.id, self.processed)
