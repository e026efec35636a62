"""The worker: composes its components, runs the executor lanes, and shuts down in order.

- ``worker/held.py``: what the worker holds (fetched, unsettled, running), within
  a per-queue budget, the prefetch.
- ``worker/fetcher.py``: keeps the budget fetched; executors fetch for themselves
  under a backlog, a thread per queue blocks in BLMOVE once it is dry.
- ``worker/queue_order.py``: the queue order, strict (earlier queues first) or weighted.
- ``worker/handback.py``: hands back what the worker fetched and could not start
  soon (every slot took a long task), so a worker with a free slot runs it.
- ``worker/marks.py``: tells Redis which held tasks run now (``running`` apart from
  ``held`` in stats, the admin, metrics and health).
- ``worker/pausing.py``: reads which queues are paused, blocks them and hands back
  their fetched tasks; unblocks them on resume.
- executor lanes (here): take tasks in the queue order, each only within
  the heartbeat's lease, and hand them to the pool
  (``worker/pools/``: threads, processes or asyncio), which runs them with the
  runner (``worker/runner.py``) and reports each outcome (``worker/outcome.py``).
- ``worker/settler.py``: ack, retry or bury, in batches, within ``SETTLE_WITHIN``.
- ``worker/heartbeat.py``: keeps the worker registered and its guards leased, and
  fences it after it was reaped.
- ``worker/scheduler.py``: claims the due ticks of periodic schedules (its own thread;
  off with ``scheduler=False``, and by default in burst mode).
- ``worker/pump.py``: turns the events of the subscriptions of our queues into tasks,
  reclaims what dead workers left pending, trims the topics (its own threads).
- ``worker/upkeep.py`` (on the main thread): promote due tasks, reap dead workers,
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

from django.core.exceptions import ImproperlyConfigured
from django.utils.crypto import get_random_string

from django_redisq.core.options import NAME_RE, WORKER_NAME_MAX
from django_redisq.exceptions import RedisError
from django_redisq.store import server
from django_redisq.store.broker import Broker
from django_redisq.store.server import BLOCK_TIMEOUT
from django_redisq.store.steps.replies import CORRUPT, NOMSG, Delivery
from django_redisq.store.workflows import WorkflowStore
from django_redisq.worker.fetcher import Fetcher
from django_redisq.worker.flows import WorkflowHooks
from django_redisq.worker.handback import HandBack
from django_redisq.worker.heartbeat import Heartbeat
from django_redisq.worker.held import Held
from django_redisq.worker.marks import Marks
from django_redisq.worker.observer import Observer
from django_redisq.worker.outcome import DEAD, Outcome, error_dict
from django_redisq.worker.pausing import Pauses
from django_redisq.worker.pools import Pool, make_pool
from django_redisq.worker.pump import EventPump
from django_redisq.worker.queue_order import QueueOrder
from django_redisq.worker.runner import Runner
from django_redisq.worker.scheduler import Scheduler
from django_redisq.worker.settler import ACK_BATCH, SETTLE_WITHIN, Batch, Settler, Unsettled
from django_redisq.worker.tasklog import TaskLog
from django_redisq.worker.upkeep import Upkeep

logger = logging.getLogger("django_redisq")
"""One line per settled task (INFO; WARNING with the traceback for a failed attempt)."""

BAD_MESSAGE = "django_redisq.exceptions.BadMessage"
HOLD_SECONDS = 0.01
"""Automatic prefetch: hold about this much work per thread beyond the tasks running."""
START_SOON = 0.5
"""Beyond its free slots a worker holds only what its threads start within this share of HAND_BACK_AFTER, by the
average run time."""
AUTO_PREFETCH_MAX = 64


def default_name() -> str:
    host = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())[:60] or "host"
    return f"{host}.{os.getpid()}"


def worker_id(name: str) -> str:
    """The identity of this process: the name plus a per-process incarnation.

    Unique even when a supervisor restarts a worker under a fixed ``--name``:
    the new process never takes over, or undoes the claims of, the tasks its
    dead predecessor held (those count their delivery and come back through
    the reaper), and two live processes given one name do not share a list.
    """
    return f"{name}.{get_random_string(6)}"


class Worker:
    """Serves queues of one task backend until stopped (or drained, with ``burst``).

    ``queues`` in a list are served in strict order; as a mapping of queue
    name to weight (``{"emails": 6, "default": 3, "low": 1}``), in weighted order.
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
        from django_redisq.backend import RedisQueueBackend
        from django_redisq.compat import task_backends

        be = task_backends[backend]
        if not isinstance(be, RedisQueueBackend):
            raise ImproperlyConfigured(f"TASKS[{backend!r}] is not a django_redisq RedisQueueBackend.")
        self.options = be.conf
        self.queues = list(queues or self.options.queues)
        weights = None
        if isinstance(queues, Mapping) and queues:
            from django_redisq.settings.profiles import parse_weight

            weights = {q: parse_weight(w, q) for q, w in queues.items()}
        if len(set(self.queues)) != len(self.queues):
            raise ValueError(f"a queue is named twice in {self.queues}")
        for q in self.queues:
            if q not in self.options.queues:
                raise ImproperlyConfigured(f"queue {q!r} is not in TASKS[{backend!r}]['QUEUES'] {list(self.options.queues)}.")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.name = name or default_name()
        if not NAME_RE.match(self.name) or len(self.name) > WORKER_NAME_MAX:
            raise ValueError(f"worker name {self.name!r}: use 1-{WORKER_NAME_MAX} letters, digits, '_', '-' or '.'")
        self.id = worker_id(self.name)
        self.concurrency, self.burst, self.max_tasks = concurrency, burst, max_tasks
        self.fixed_prefetch = prefetch or self.options.prefetch or None
        self.avg_duration = 0.001  # seconds, moving average of task run time
        self.processed = 0
        self.started_at = time.time()
        self._stop = threading.Event()
        self._force = threading.Event()
        self._flush_stop = threading.Event()
        self._count_lock = threading.Lock()
        self.broker = Broker(self.options)
        self.runner = runner or Runner(self.options, backend)
        # a partitioned queue is served as its partitions, each a queue of its own below (core/partitions.py)
        self.logical_queues = list(self.queues)
        self.order = QueueOrder(self.queues, weights, {q: n for q in self.queues if (n := self.options.partitions(q)) > 1})
        self.queues = list(self.order.queues)
        caps = {q: c for q in self.queues if (c := self.options.for_queue(q).worker_concurrency)}
        self.held = held = Held(self.queues, self.prefetch, self.order, caps, slots=concurrency, ahead=self.ahead)
        if pool != "processes" and (max_tasks_per_child or max_memory_per_child):
            raise ValueError("max_tasks_per_child and max_memory_per_child apply to the process pool only (--pool processes)")
        self.pool: Pool = make_pool(pool, self.runner, self.id, concurrency, max_tasks_per_child=max_tasks_per_child,
                                    max_memory_per_child=max_memory_per_child)
        self.unsettled = [Unsettled() for _ in range(self.pool.lanes)]
        # each component gets what it needs here, in this order, and none of them knows the worker
        self.observer = Observer(RedisQueueBackend, self.options.alias, self.id, self.pool.name, self.queues, concurrency,
                                 self.options.worker_timeout, lambda: len(held.executing),  # worker/observer.py
                                 held.waiting)
        beats = Broker.for_heartbeat(self.options)
        unsettled: dict[str, str] = {}  # tasks that ran and could not be settled: the settler's, for the heartbeat's sweep
        self.heartbeat = Heartbeat(beats, self.options, self.id, self.queues, self.info, held.known, self._fenced,
                                   on_beat=self.observer.beat, presence=beats.presence.links(self.queues), unsettled=unsettled)
        idle = {q: threading.Event() for q in self.queues}  # set: the queue looked dry (or resumed), its thread fetches
        for event in idle.values():
            event.set()
        self.pauses = pauses = Pauses(self.broker, self.id, self.queues, held, self._stop, lambda q: idle[q].set())
        self.fetcher = Fetcher(self.broker, self.id, self.queues, held, self._stop, self.heartbeat.wake, idle,
                               lambda: pauses.paused, pauses.saw_paused, burst)
        self.handback = HandBack(self.broker, self.id, held, self._stop, self.options.hand_back_after)
        # stops with the settler, once nothing runs: the marks say so until then
        self.marks = Marks(self.broker, self.id, self.queues, held, self._flush_stop, self.options.worker_timeout,
                           self.options.heartbeat_interval)
        self.settler = Settler(self.broker, self.id, self._force, self._settled, on_event=self.observer.settle_event,
                               flows=WorkflowHooks(WorkflowStore(self.broker)), unsettled=unsettled)
        self.tasklog = TaskLog()
        self.upkeep = Upkeep(self.broker, self.id, self.queues, held, self.pool, self._stop, self.options.heartbeat_interval,
                             burst, self.observer.recovered, paused=self.fetcher.paused, tick=self.tasklog.tick,
                             by_connection=True)
        # periodic schedules: on unless burst (a draining worker would keep enqueuing); bad ones are logged and skipped
        self.scheduler = Scheduler(self.options, self.broker, self._stop) if (not burst if scheduler is None else scheduler) else None
        # events: subscriptions of our queues become tasks (worker/pump.py); off in burst mode unless asked for
        self.pump = EventPump(self.options, self.broker, self._stop, self.id, self.logical_queues) \
            if (not burst if events is None else events) else None

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
        """Tasks held unstarted beyond the free slots (no hoarding, worker/held.py): the prefetch's share beyond the
        threads, and only what they start within half of HAND_BACK_AFTER at the average run time, even with a fixed prefetch."""
        soon = int(self.concurrency * START_SOON * self.options.hand_back_after / max(self.avg_duration, 1e-6))
        return max(0, min(self.prefetch() - self.concurrency, soon))

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def request_stop(self) -> None:
        """Stop fetching; running tasks finish and are settled (warm shutdown)."""
        self._stop.set()

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
        self.observer.settled(batch)
        self.held.forget(d for d, _ in batch)
        self.upkeep.settled({d.id for d, _ in batch})
        with self._count_lock:
            self.processed += len(batch)
            done = self.processed
        for _, o in batch:
            self.avg_duration += 0.05 * (o.duration - self.avg_duration)
        self.tasklog.settled(batch)  # failures at WARNING now, successes summed up at INFO (worker/tasklog.py)
        if self.max_tasks and done >= self.max_tasks:
            self.request_stop()

    def _shutdown(self, fetchers: list[threading.Thread], executors: list[threading.Thread], last: list[threading.Thread]) -> None:
        self._stop.set()
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
        self.heartbeat.close()
        if not clean:
            logger.warning("worker %s stopped with %d task(s) unfinished; they go back to pending once this process exits "
                           "(or after WORKER_TIMEOUT)", self.id, len(self.held))
        else:
            logger.log(logging.DEBUG if self.burst else logging.INFO, "worker %s stopped after %d task(s)", self.id, self.processed)
