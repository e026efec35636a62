"""The scheduler: one job, compute the due ticks of periodic schedules and claim them.

Every worker runs one (``runworker --no-scheduler`` opts out). Each wake asks
Redis for its time, pops the schedules whose next tick has come from a heap
(so a wake costs O(schedules due)), and claims their ticks with
``store/scripts/fire.lua``, which enqueues the tasks in the same atomic step: the
one scheduler whose compare-and-set of the schedule's marker wins enqueues,
the others learn they lost. Ticks come from the Redis clock only; the local
clock is never read for a tick boundary. It sleeps until the next tick, at
most ``MAX_SLEEP`` so a paused process notices soon.

The catch-up policy (``schedules/registry.py`` has the constants) decides what runs
when the last claimed tick is older than the newest due one: ``latest`` runs
the newest if it is younger than its period (at most an hour), ``skip`` only
if it is on time (within 10 s or its period), ``all`` the newest 100. Ticks
not run are counted ``missed`` in the marker; ticks not run because the
previous tick's task is unfinished (``allow_overlap=False``) ``skipped``.

A paused schedule (``store/scripts/schedule_pause.lua``) is still claimed tick by
tick, so its marker keeps up with the clock, but fire.lua enqueues nothing
and counts the tick ``paused_ticks``: the pause is read inside every claim,
so it holds for every worker at once, and a tick that passes while paused is
never run later, not even after a resume.
"""

from __future__ import annotations

import heapq
import logging
import threading

from django_redisq.core.message import encode_arguments
from django_redisq.core.options import Options
from django_redisq.exceptions import RedisError
from django_redisq.schedules.registry import ALL_MAX, LATEST_WINDOW_MS, ON_TIME_MS, Schedule, load
from django_redisq.schedules.ticks import MARKER_TTL_MS, id_base, own_limits, task_priority, tick_message, wants_tick
from django_redisq.store.broker import Broker
from django_redisq.store.steps.schedules import Claim, Fired

logger = logging.getLogger("django_redisq")

MAX_SLEEP = 1.0
"""Seconds a scheduler sleeps at most between two looks at the Redis clock."""
FAILED_FIRST, FAILED_MAX = 0.05, 0.25
"""Seconds before the next look after Redis failed: the first, doubled by each failure in a row up to the
second. A short blip (a restart, a failover) must not cost a tick: with a one-second schedule, a retry a
whole second later finds the tick past its on-time window, and ``skip`` and ``latest`` give it up. A look
at a server that is down costs one refused connection (the client's own retries included, ~0.35 s)."""
CLAIM_TRIES = 3


class Scheduler:
    """Claims the due ticks of a backend's schedules; ``loop`` runs it until ``stop`` is set."""

    def __init__(self, options: Options, broker: Broker, stop: threading.Event) -> None:
        self.options, self.broker, self.stop = options, broker, stop
        loaded, bad = load(options.alias, options.queues, options.schedules)
        for name, problems in bad.items():
            logger.error("schedule %s is not run: %s", name, " ".join(f"[{p.id}] {p.msg}" for p in problems))
        self.schedules: list[Schedule] = []
        self._wants_tick: dict[str, bool] = {}
        for s in loaded:
            try:
                encode_arguments(s.args, s.kwargs, options.max_message_bytes)
                wants = wants_tick(s)
            except Exception as exc:  # noqa: BLE001 - a bad schedule is logged and skipped, never a crash
                logger.error("schedule %s is not run: %s", s.name, exc)
                continue
            self.schedules.append(s)
            self._wants_tick[s.name] = wants
        self._heap: list[tuple[int, int, Schedule]] = [(0, i, s) for i, s in enumerate(self.schedules)]

    def loop(self) -> None:
        failed = 0.0  # the wait after the last failure in a row; 0 after a look that worked
        while not self.stop.is_set():
            try:
                wait = self.run_once()
                failed = 0.0
            except RedisError as exc:
                level = logging.DEBUG if failed else logging.WARNING  # one line per outage, not per look
                failed = min(FAILED_MAX, failed * 2 or FAILED_FIRST)
                logger.log(level, "scheduler: Redis failed (%s: %s); retrying in %.2f s", type(exc).__name__, exc, failed)
                wait = failed
            except Exception:
                logger.exception("scheduler failed; retrying")
                wait = MAX_SLEEP
            self.stop.wait(wait)

    def run_once(self) -> float:
        """Claim what is due now on the Redis clock; seconds until the next look."""
        if not self._heap:
            return MAX_SLEEP
        now = self.broker.server_time_ms()
        due: list[tuple[int, Schedule]] = []
        while self._heap and self._heap[0][0] <= now:
            _, i, s = heapq.heappop(self._heap)
            due.append((i, s))
        if due:
            try:
                self._claim([s for _, s in due], now)
            except BaseException:  # Redis failed: due again at once, the loop's backoff paces the next look
                for i, s in due:
                    heapq.heappush(self._heap, (now, i, s))
                raise
            for i, s in due:
                heapq.heappush(self._heap, (s.next_after(now), i, s))
        return min(MAX_SLEEP, max(0.005, (self._heap[0][0] - now) / 1000))

    # -- claiming --------------------------------------------------------

    def _claim(self, due: list[Schedule], now: int) -> None:
        markers = self.broker.schedules.markers([(s.queue, s.name) for s in due])
        for s, marker in zip(due, markers, strict=True):
            last = marker.get("last", "")
            for _ in range(CLAIM_TRIES):
                claim = self.plan(s, last, now)
                if claim is None:
                    break
                fired = self.broker.schedules.fire(s.queue, s.name, claim)
                if fired.code != -1:
                    self._log(s, fired)
                    break
                last = fired.last  # another scheduler moved the marker: plan again from its value

    def plan(self, s: Schedule, last: str, now: int) -> Claim | None:
        """What to claim for ``s`` at Redis time ``now``, the marker holding ``last`` ('' = none); None = nothing due."""
        latest = s.latest_at(now)
        if latest is None:
            return None
        known = int(last) if last.isdigit() else None
        if known is not None and known >= latest:
            return None
        period = s.period_at(latest)
        on_time = min(period, ON_TIME_MS)
        if known is None:  # a new schedule (or one whose marker expired): nothing to catch up, run it if on time
            if now - latest > on_time:
                return None
            ticks, missed, max_late = [latest], 0, on_time
        elif s.catch_up == "all":
            ticks, total = s.due(known, now, ALL_MAX)
            missed, max_late = total - len(ticks), now - ticks[0] + LATEST_WINDOW_MS
        else:
            _, total = s.due(known, now, 1)
            ticks, missed = [latest], total - 1
            max_late = min(period, LATEST_WINDOW_MS) if s.catch_up == "latest" else on_time
        return Claim(
            expected=last if known is not None else "", upto=latest, missed=missed, max_late_ms=max_late,
            allow_overlap=s.allow_overlap, ttl_ms=max(MARKER_TTL_MS, 3 * period), task=s.task, id_base=self.id_base(s),
            ticks=[(t, self.message(s, t)) for t in ticks], priority=task_priority(s),
            limits=own_limits(s),
        )

    def message(self, s: Schedule, tick: int) -> str:
        return tick_message(s, tick, self._wants_tick.get(s.name, False))

    @staticmethod
    def id_base(s: Schedule) -> str:
        return id_base(s)

    def _log(self, s: Schedule, fired: Fired) -> None:
        if fired.code != 1:
            return
        if fired.ids:
            logger.info("schedule %s: enqueued %s on queue %s", s.name, ", ".join(fired.ids), s.queue)
        if fired.missed:
            logger.warning("schedule %s: %d tick(s) missed (no worker ran at the time; catch_up=%s)", s.name, fired.missed, s.catch_up)
        if fired.skipped:
            logger.info("schedule %s: %d tick(s) skipped, the previous run is unfinished (allow_overlap=False)", s.name, fired.skipped)
        if fired.paused:
            logger.debug("schedule %s: %d tick(s) not run, the schedule is paused", s.name, fired.paused)
