"""Bounded, pipelined reads of a backend's queues: their figures, their workers, their limits, schedule markers.

What ``Inspector`` (ops/inspector.py) shows: ``stats`` for the admin and
``redisq stats``, ``figures`` for metrics scrapes and health probes, each two
pipelined round trips whatever the backlog. The tasks in the queues are read by
``TaskReads`` (task_reads.py), of which ``QueueReads`` is made. Nothing here
changes Redis.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis

from django_redisq.compat import UTC
from django_redisq.core.clock import ms_to_datetime
from django_redisq.core.limits import parse_rate
from django_redisq.store.keys import QueueKeys
from django_redisq.store.reads.durations import TaskTimes, slowest
from django_redisq.store.reads.partitions import merged_figures, merged_stats
from django_redisq.store.reads.priority import TAIL, list_length, next_in_list
from django_redisq.store.reads.records import TOTALS, LimitState, QueueFigures, QueueStats, WorkerInfo, pause_state
from django_redisq.store.reads.tasks import TaskReads
from django_redisq.store.server import describe
from django_redisq.store.steps.running import marked

MINUTES = 60
"""The per-minute series ``stats`` reads: the last hour."""




_ASKED = 5
"""Replies ``_ask`` adds to a pipeline."""
TOP_KEYS = 10
"""Per-key limits (``limit_key``) shown one by one, the busiest first; the rest are summed in one row."""
KEYLOAD_READ = 1000
"""The most keys of P:keyload one read sums: the read stays bounded however many keys are busy."""


def _ask(pipe: Any, k: QueueKeys) -> None:
    """Add the queue's limit reads to the first of two pipelined round trips (see ``_limit_states``); a FAIR queue's
    ready tasks (P:fairn) are read with them, as they are counted with the tasks waiting for a slot."""
    pipe.hgetall(k.limits)
    pipe.zcard(k.slots)
    pipe.llen(k.blocked)
    pipe.zrevrange(k.keyload, 0, KEYLOAD_READ - 1, withscores=True)
    pipe.get(k.fairn)


def _names(asked: list[Any]) -> dict[str, str]:
    """The limits to read one by one: each task's that P:limits names, and the busiest keys' (``<path>#<key>``)."""
    named = dict(asked[0])
    for lpath, _ in asked[3][:TOP_KEYS]:
        named[lpath] = named.get(lpath.split("#", 1)[0], "0")
    return named


def _ask_named(pipe: Any, k: QueueKeys, asked: list[Any]) -> None:
    """Add, to the second round trip, the reads of the limits ``_names`` gives (2 replies each)."""
    for name in sorted(_names(asked)):
        pipe.zcard(k.task_slots(name))
        pipe.llen(k.task_blocked(name))


def _named_replies(asked: list[Any]) -> int:
    """How many replies ``_ask_named`` added."""
    return 2 * len(_names(asked))


def _limit_states(queue_max: int, asked: list[Any], named_replies: list[Any]) -> tuple[int, list[LimitState]]:
    """The tasks waiting for a slot or in a FAIR queue's ring (counted as pending) and the queue's limits, from the
    replies of both round trips.

    The task limits are those P:limits names (a task's ``max_running``, recorded
    when a worker first took a slot for it), then the busiest keys of the tasks with a
    ``limit_key`` (top ``TOP_KEYS``), then one row ``<n> more keys`` summing the
    running and waiting of the rest that one bounded read saw; the queue's own is its options'.
    """
    queue_running, queue_waiting, load, fair = asked[1:5]
    named = _names(asked)
    out = [LimitState("", queue_max, int(queue_running), int(queue_waiting))] if queue_max or queue_running or queue_waiting else []
    for i, name in enumerate(sorted(named)):
        limit = int(named[name]) if str(named[name]).isdigit() else 0
        out.append(LimitState(name, limit, int(named_replies[2 * i]), int(named_replies[2 * i + 1])))
    rest = load[TOP_KEYS:]
    if rest:  # running and waiting summed: a key's score is both
        out.append(LimitState(f"{len(rest)} more keys (running + waiting)", 0, int(sum(score for _, score in rest)), 0,
                              summed=len(rest)))
    waiting = sum(s.waiting for s in out) + (int(fair) if str(fair or "").isdigit() else 0)
    return waiting, out


def ready_now(queued: int, paused: bool, queue_running: Any, max_running: int, rate_limit: str) -> int:
    """The tasks a worker could start now: a scaling signal (``redisq_queue_tasks{state="ready"}``), from figures read anyway.

    ``queued``: the plain and prioritized pending lists, not the tasks waiting for a limit's slot (blocked lists), nor
    the delayed ones (scheduled: a future run_after, a retry's backoff, a rate limit's reserved start). None while
    the queue is paused; at most the slots its MAX_RUNNING leaves free (``queue_running``: the slots taken), and at
    most the starts its RATE_LIMIT allows in one period. A task over its own ``max_running`` counts until a worker
    first takes it (then it waits in its blocked list): telling it apart would mean reading every pending task.
    """
    if paused:
        return 0
    ready = queued
    if max_running:
        ready = min(ready, max(0, max_running - int(queue_running)))
    if rate_limit:
        ready = min(ready, parse_rate(rate_limit)[0])
    return max(0, ready)


def _ask_first(pipe: Any, k: QueueKeys, minutes: range) -> None:
    """A queue's part of ``stats``' first round trip: ``FIRST_HEAD`` replies, then one minute hash per minute."""
    pipe.llen(k.pending)
    pipe.zcard(k.scheduled)
    pipe.zcard(k.dead)
    pipe.lrange(k.pending, TAIL, -1)  # the next to run, markers skipped (store/reads/priority.py)
    pipe.zrange(k.workers, 0, -1, withscores=True)
    pipe.zcard(k.prioritized)
    pipe.zrange(k.prioritized, 0, 0)
    _ask(pipe, k)
    for name in ("processed", "failed", "dead_count"):
        pipe.execute_command("MGET", *[k.counter(name, m) for m in minutes])  # not pipe.mget: a cluster pipeline refuses it (the keys share a slot)
    for m in minutes:  # bounded: at most (MAX_NAMES + 1) x BUCKETS fields each (store/reads/durations.py)
        pipe.hgetall(k.durations(m))


FIRST_HEAD = 10 + _ASKED
"""Replies of ``_ask_first`` before the minute hashes."""


@dataclass(slots=True)
class _First:
    """What ``stats``' first round trip found of one queue."""

    pending: int  # plain and prioritized (the tasks waiting for a limit's slot are added from the second)
    scheduled: int
    dead: int
    next_id: str | None  # the next task to run, whose age is read in the second round trip
    workers: list[tuple[str, float]]
    asked: list[Any]  # _ask's replies
    counters: list[list[Any]]  # processed, failed, dead_count per minute
    durations: list[Any]  # the minute hashes of run times
    times: list[TaskTimes]

    @classmethod
    def of(cls, replies: list[Any]) -> _First:
        length, scheduled, dead, oldest, workers, ranked, head = replies[:7]
        durations = replies[FIRST_HEAD:]
        next_id = next_in_list(oldest) or (head[0] if head else None)
        return cls(list_length(length, oldest) + int(ranked), scheduled, dead, next_id, workers,
                   replies[7:7 + _ASKED], replies[7 + _ASKED:FIRST_HEAD], durations, slowest(durations))


def _ask_figures(pipe: Any, k: QueueKeys) -> None:
    """A queue's part of ``figures``' first round trip: 8 replies, then ``_ask``'s."""
    pipe.llen(k.pending)
    pipe.zcard(k.scheduled)
    pipe.zcard(k.dead)
    pipe.lrange(k.pending, TAIL, -1)  # the oldest, markers skipped: a bounded read from the tail
    pipe.zrange(k.workers, 0, -1, withscores=True)
    pipe.execute_command("MGET", *[k.counter(name) for name in TOTALS])  # not pipe.mget: a cluster pipeline refuses it (the keys share a slot)
    pipe.zcard(k.prioritized)
    pipe.zrange(k.prioritized, 0, 0)  # with no plain task pending, the next prioritized one is the oldest shown
    _ask(pipe, k)


class QueueReads(TaskReads):
    """The bounded reads of one backend alias's queues: their figures here, the tasks in them in ``TaskReads``."""

    @property
    def where(self) -> str:
        """Where these queues live, safe to show: never a password."""
        return describe(self.options)

    def now_ms(self) -> int:
        return self.scripts.now_ms()

    # -- queue figures ---------------------------------------------------

    def stats(self) -> list[QueueStats]:
        """Figures for every configured queue in two round trips, the hour's slowest task names included."""
        qs = self.physical_queues
        now = self.now_ms()
        minutes = range(now // 60000 - MINUTES + 1, now // 60000 + 1)
        pipe = self.client.pipeline(transaction=False)
        for q in qs:
            _ask_first(pipe, self.keys(q), minutes)
        self._pipe_paused(pipe, qs)
        replies = pipe.execute(raise_on_error=False)
        pauses = self._paused_from(replies, qs)
        stride = FIRST_HEAD + MINUTES
        firsts = [_First.of(replies[i * stride : (i + 1) * stride]) for i in range(len(qs))]
        pipe = self.client.pipeline(transaction=False)
        for q, first in zip(qs, firsts, strict=True):
            self._ask_second(pipe, self.keys(q), first)
        second = iter(pipe.execute())
        out = [self._queue_stats(q, first, second, now, minutes, pauses[q]) for q, first in zip(qs, firsts, strict=True)]
        return out if len(out) == len(self.queues) else merged_stats(self.queues, out, {q: f.durations for q, f in
                                                                                        zip(qs, firsts, strict=True)})

    def _ask_second(self, pipe: Any, k: QueueKeys, first: _First) -> None:
        """A queue's part of ``stats``' second round trip: the next task's age, its workers, its task limits."""
        if first.next_id:
            pipe.hget(k.task(first.next_id), "enqueued_at")
        else:
            pipe.execute_command("ECHO", "")
        for w, _ in first.workers:
            pipe.llen(k.processing(w))
            pipe.get(k.worker_info(w))
            pipe.get(k.running(w))
        _ask_named(pipe, k, first.asked)

    def _queue_stats(self, q: str, first: _First, second: Any, now: int, minutes: range, pause: dict[str, Any]) -> QueueStats:
        """One queue's ``QueueStats`` from its first replies and its part of the second round trip (``second``, consumed)."""
        enq = next(second)
        processed, failed, died = ([int(v or 0) for v in c] for c in first.counters)
        infos = [self._worker(name, score, next(second), next(second), now, next(second)) for name, score in first.workers]
        waiting, limited = _limit_states(self.options.for_queue(q).max_running, first.asked,
                                         [next(second) for _ in range(_named_replies(first.asked))])
        fraction = (now % 60000) / 60000
        limits = self.options.for_queue(q)
        ready = ready_now(first.pending, bool(pause["paused"]), first.asked[1], limits.max_running, limits.rate_limit)
        return QueueStats(
            alias=self.options.alias, queue=q, pending=first.pending + waiting, scheduled=first.scheduled, dead=first.dead,
            running=sum(w.running for w in infos), held=sum(w.held for w in infos),
            # never below 0: a plain enqueue stamps its time from the Redis clock carried by the producer's (plain.py)
            oldest_pending_age=max(0.0, (now - int(enq)) / 1000) if enq else None,
            # a sliding last-60-seconds estimate from the current and previous minute buckets
            processed_minute=round(processed[-1] + processed[-2] * (1 - fraction)),
            failed_minute=round(failed[-1] + died[-1] + (failed[-2] + died[-2]) * (1 - fraction)),
            processed_hour=sum(processed), failed_hour=sum(failed) + sum(died), dead_hour=sum(died),
            series=[(ms_to_datetime(m * 60000) or datetime.now(UTC), p, f, d)
                    for m, p, f, d in zip(minutes, processed, failed, died, strict=True)],
            workers=infos, slowest=first.times, limits=limited, rate_limit=limits.rate_limit, ready=ready, **pause,
        )

    def _pipe_paused(self, pipe: Any, qs: Sequence[str]) -> None:
        """Queue a GET of the pause key of every queue of ``qs`` at the end of ``pipe`` (read back by ``_paused_from``)."""
        for q in qs:
            pipe.get(self.keys(q).paused)

    def _paused_from(self, replies: list[Any], qs: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The pause fields of each queue from the last replies of a pipeline ``_pipe_paused`` ended; raises the others' errors."""
        n = len(qs)
        head, tail = replies[: len(replies) - n], replies[len(replies) - n :]
        for reply in head:
            if isinstance(reply, Exception):
                raise reply
        out = {}
        for q, value in zip(qs, tail, strict=True):
            if isinstance(value, redis.ResponseError):  # another type: fetch.lua sees it exist, so paused
                value = "0|"
            elif isinstance(value, Exception):
                raise value
            paused, since, who = pause_state(value)
            out[q] = {"paused": paused, "paused_at": since, "paused_by": who}
        del replies[len(replies) - n :]
        return out

    def figures(self) -> list[QueueFigures]:
        """Gauges and totals of every queue in two pipelined round trips, O(queues + workers) whatever the backlog.

        For metrics scrapes and health probes, which run every few seconds:
        unlike ``stats`` no per-minute series and no worker details are read.
        """
        qs = self.physical_queues
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("TIME")  # not pipe.time() nor pipe.echo(): a cluster pipeline refuses those methods
        for q in qs:
            _ask_figures(pipe, self.keys(q))
        self._pipe_paused(pipe, qs)
        first = pipe.execute(raise_on_error=False)
        pauses = self._paused_from(first, qs)
        stride = 8 + _ASKED
        sec, usec = first[0]
        now = int(sec) * 1000 + int(usec) // 1000
        pipe = self.client.pipeline(transaction=False)
        for i, q in enumerate(qs):
            k = self.keys(q)
            row = first[1 + i * stride : 1 + (i + 1) * stride]
            oldest, workers, head = row[3], row[4], row[7]
            oldest = next_in_list(oldest) or (head[0] if head else None)
            pipe.hget(k.task(oldest), "enqueued_at") if oldest else pipe.execute_command("ECHO", "")
            for w, _ in workers:
                pipe.llen(k.processing(w))
                pipe.get(k.running(w))
            _ask_named(pipe, k, row[8:8 + _ASKED])
        second = iter(pipe.execute())
        out = []
        for i, q in enumerate(qs):
            row = first[1 + i * stride : 1 + (i + 1) * stride]
            length, scheduled, dead, tail, workers, totals, ranked, _ = row[:8]
            enq = next(second)
            holding = running = 0
            for _ in workers:
                n, mark = int(next(second)), next(second)
                holding += n
                running += min(n, len(marked(mark)))
            asked, limits = row[8:8 + _ASKED], self.options.for_queue(q)
            waiting, limit_rows = _limit_states(limits.max_running, asked, [next(second) for _ in range(_named_replies(asked))])
            queued = list_length(length, tail) + int(ranked)
            pending = queued + waiting
            age = (now - int(enq)) / 1000 if enq and str(enq).isdigit() else 0.0
            out.append(QueueFigures(
                alias=self.options.alias, queue=q, pending=int(pending), scheduled=int(scheduled), running=running, dead=int(dead),
                held=holding - running, ready=ready_now(queued, bool(pauses[q]["paused"]), row[9], limits.max_running, limits.rate_limit),
                oldest_pending_age=max(0.0, age), workers=sum(1 for _, score in workers if now - score <= self.options.worker_timeout * 1000),
                totals={name: int(v) if v and str(v).isdigit() else 0 for name, v in zip(TOTALS, totals, strict=True)},
                limits=limit_rows, **pauses[q],
            ))
        return out if len(out) == len(self.queues) else merged_figures(self.queues, out)

    def _worker(self, name: str, score: float, holding: int, info_json: str | None, now: int, mark: str | None = None) -> WorkerInfo:
        ago = max(0.0, (now - score) / 1000)
        w = WorkerInfo(name=name, last_seen=ms_to_datetime(score), seen_ago=ago,
                       alive=ago <= self.options.worker_timeout, holding=int(holding), running=min(int(holding), len(marked(mark))))
        try:
            info = json.loads(info_json) if info_json else {}
        except (ValueError, RecursionError):
            info = {}
        if isinstance(info, dict):
            w.host, w.pid = str(info.get("host", "")), info.get("pid")
            w.queues, w.concurrency = list(info.get("queues") or []), info.get("concurrency")
            w.pool = str(info.get("pool") or "threads")
            w.processed, w.current = info.get("processed"), [str(i) for i in info.get("current") or []]
            w.started_at = ms_to_datetime(info.get("started_at"))
        return w

    # -- periodic schedules ----------------------------------------------

    def schedule_markers(self, where: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        """The marker hash of each ``(queue, schedule name)`` (store/scripts/fire.lua writes them), in one round trip."""
        if not where:
            return []
        pipe = self.client.pipeline(transaction=False)
        for queue, name in where:
            pipe.hgetall(self.keys(queue).schedule(name))
        return list(pipe.execute())

    def task_states(self, where: Sequence[tuple[str, str]]) -> list[str | None]:
        """The state of each ``(queue, task id)`` (``None`` for an empty id or an expired task), in one round trip."""
        if not where:
            return []
        pipe = self.client.pipeline(transaction=False)
        for queue, task_id in where:
            if task_id:
                pipe.hget(self.keys(queue).task(task_id), "state")
            else:
                pipe.execute_command("ECHO", "")
        return [state or None for state in pipe.execute()]
