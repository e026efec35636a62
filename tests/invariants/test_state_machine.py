"""A stateful model of the broker, checked against a real redis-server.

Hypothesis drives random sequences of broker operations -- enqueue (now,
delayed, with an idempotency key, a retried enqueue of an existing id, at
priorities -100..100: mostly the default 0, some others, the extremes),
BLMOVE (of an id or of a wake-up marker) + fetch, a claim after a BLMOVE
that never reaches Redis, ack, retry, bury, release, heartbeat (and its
sweep), worker death, worker restarts under the same name (and a task that
crash-loops its worker), reaping by an operator and by a worker, promote, replay, purge, time passing
on the Redis side while some workers heartbeat, a Redis outage longer than
WORKER_TIMEOUT, pausing and resuming a queue (``P:paused``), and write steps
tried while Redis answers OOM -- and after every step compares Redis with a
plain-Python model:

* every task id is in exactly one of pending / scheduled / processing:<w> /
  dead / finished (or deleted for good by purge or dead-letter trimming), and
  the lists hold exactly the ids the model expects, in the model's order;
* pending is the ready structure of lib/ready.lua: the LIST of priority 0 and
  the ``prioritized`` ZSET of the others (exact members and scores ``(100 - p)
  * 2^44 + n``, the ``prioseq`` counter), so the exact order fetch takes them
  is checked, and every fetch takes exactly the ids the model says, in order;
  the LIST holds ids or wake-up markers (exactly as many as the model counts),
  never both;
* while a queue is paused, fetch raises ``QueuePaused`` and claims nothing (a
  BLMOVEd id goes back to be taken next, a BLMOVEd marker is dropped), and
  enqueue, promote, reap, release and replay go on as usual;
* the task hash's ``state``, ``deliveries`` and ``failures`` fields, the
  idempotency guard and the ``processed`` / ``failed`` / ``dead_count``
  counters agree with the model;
* the ``workers`` ZSET (last heartbeat) and the ``alive`` HASH (start of each
  worker's unbroken run of heartbeats) hold exactly the model's values.

Worker ids are ``<name>.<incarnation>``: a restart under the same name makes a
new id; the old incarnation never acts again, and its tasks come back only
through reap, their deliveries still counted. A worker that is not registered
(reaped, released everything, or never heartbeated) is fenced: its fetch
raises ``Fenced`` and hands back what a late BLMOVE put in its list.

Worker death is simulated by rewinding the worker's heartbeat score in the
``workers`` ZSET relative to Redis ``TIME``; time passing by rewriting the
scores of ``scheduled`` and ``workers`` and the values of ``alive`` and
shortening the guards' PX TTLs (a Redis outage is the same, by more than
WORKER_TIMEOUT at once). Workers keep acting after they were reaped (a paused
process that wakes up): their late ack/retry/bury must be refused or
absorbed, never lose a task.
"""

from __future__ import annotations

import copy
import os
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import hypothesis.strategies as st
import pytest
import redis
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from django_redisq.core.message import encode
from django_redisq.exceptions import Fenced, LeaseLost, QueuePaused
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.reads.priority import MARKER, MARKERS_MAX, ready_page
from django_redisq.store.server import is_transient
from django_redisq.store.steps.replies import BUSY, DONE, NOMSG, RUN, NewTask
from tests.helpers import ack, reap

QUEUES = ("default", "emails")
NAMES = ("w1", "w2", "w3")  # the operator's --name of each worker; its id is "<name>.<incarnation>"
TIMEOUT_MS = 10_000  # WORKER_TIMEOUT (also the guard lease)
INTERVAL_MS = 2_000  # HEARTBEAT_INTERVAL (the heartbeat gap, Broker.heartbeat_gap_ms, lies between the two)
DEAD_MAX = 3  # small, so dead-letter trimming happens
TASK_PATH = "tests.testapp.tasks.noop"
EXAMPLES = int(os.environ.get("REDISQ_SM_EXAMPLES", "40"))  # 40 x 60 steps: 35-75 s here; more when asked
PRIORITIES = st.sampled_from([0, 0, 0, 0, 0, 0, 0, 1, 7, 7, -1, -7, 100, -100])
"""Mostly the default, a few others (two of the same, so FIFO within one priority shows), the extremes."""
BAND = 2**44  # lib/ready.lua: a prioritized task's score is (100 - priority) * BAND + n
DEFAULT_SCORE = 100 * BAND  # scores below it are priorities above 0: they run before the LIST

OOM_MAY_COMPLETE = frozenset({"ack", "retry", "bury", "release", "promote", "replay", "reap", "worker_reaps"})
"""Steps that may run to the end while Redis answers OOM. Redis refuses a script only at its
first write that may grow memory (a "denyoom" command), and only if it has written nothing
yet; these scripts' first write is LREM / LTRIM / RPOP / ZREM (ack: the owned ids leave the
processing list first, when the batch carries no run times; reap: when the first dead worker's
list is empty), so they may complete, atomically. A fetch may too when its first write is one of
those (BrokerMachine.fetch_may_complete). Every other write step must be refused, having
changed nothing."""

MODEL = ("n", "tasks", "pending", "ranked", "markers", "seq", "paused", "scheduled", "processing", "dead", "idem_keys",
         "counters", "holds", "moved", "hb", "alive", "current", "born", "finished_by_guard", "left_dead")
"""The machine's model attributes: saved before a step tried under OOM, restored when Redis refused it."""


def _msg(n: int, queue: str) -> str:
    return encode([n], {})


def incarnation(name: str, k: int) -> str:
    return f"{name}.{chr(ord('a') + k)}" if k < 26 else f"{name}.z{k}"


class Task:
    __slots__ = ("deliveries", "failures", "guard", "has_msg", "id", "idem", "loc", "moved", "prio", "queue")

    def __init__(self, task_id: str, queue: str, loc: str, idem: str = "", has_msg: bool = True, prio: int = 0) -> None:
        self.id, self.queue, self.loc, self.idem, self.has_msg = task_id, queue, loc, idem, has_msg
        self.prio = prio  # the task hash's 'prio' (absent for 0; an id with no task data counts as 0)
        self.deliveries = self.failures = 0
        self.guard: str | None = None  # None, "running:<w>" or "success"
        self.moved = False  # in a processing list by BLMOVE, not claimed (its state is still 'pending')


class BrokerMachine(RuleBasedStateMachine):
    def __init__(self, client: redis.Redis, broker: Broker) -> None:
        super().__init__()
        self.r, self.b = client, broker
        self.gap = broker.heartbeat_gap_ms()
        assert broker.options.worker_timeout * 1000 == TIMEOUT_MS and INTERVAL_MS < self.gap < TIMEOUT_MS
        self.r.flushall()
        self.n = 0
        self.tasks: dict[str, Task] = {}
        # ready to run (lib/ready.lua): priority 0 in the pending LIST, index 0 = left (LPUSH end), fetch
        # pops the right; the others in the prioritized ZSET, id -> score (100 - p) * BAND + n, where n
        # is the prioseq counter's value, or 0 for an id handed back (the front of its priority). Ids
        # handed back to the front of one priority tie on their score and the ZSET orders them by
        # member (bytewise; our ids are ASCII, so str order): modelled exactly, not as a set.
        self.pending: dict[str, list[str]] = {q: [] for q in QUEUES}
        self.ranked: dict[str, dict[str, int]] = {q: {} for q in QUEUES}
        self.seq = dict.fromkeys(QUEUES, 0)  # P:prioseq
        self.markers = dict.fromkeys(QUEUES, 0)  # wake-ups in the LIST (only while it holds no id)
        self.paused = dict.fromkeys(QUEUES, False)  # P:paused exists
        self.oom_may_complete = False  # set by a fetch whose first write frees memory (tried under OOM)
        self.scheduled: dict[str, set[str]] = {q: set() for q in QUEUES}
        self.processing: defaultdict[tuple[str, str], list[str]] = defaultdict(list)  # (queue, worker id) -> list, index 0 = left
        self.dead: dict[str, dict[str, float]] = {q: {} for q in QUEUES}  # id -> died at (from Redis)
        self.idem_keys: dict[tuple[str, str], str] = {}  # (queue, key) -> holder id
        self.counters = {q: {"processed": 0, "failed": 0, "dead_count": 0} for q in QUEUES}
        self.current = {name: incarnation(name, 0) for name in NAMES}  # name -> id of the live process
        self.born = dict.fromkeys(NAMES, 0)
        # what each live process believes it holds: id -> "run" (claimed) or "nomsg" (to bury)
        self.holds: dict[str, dict[str, str]] = {w: {} for w in self.current.values()}
        # the id each fetcher (queue, worker id) BLMOVEd and has not claimed yet, as it believes
        # (a reap may have handed it back meanwhile): one at a time, as the fetch loop runs
        self.moved: dict[tuple[str, str], str] = {}
        self.hb: dict[tuple[str, str], int] = {}  # (queue, worker id) -> last heartbeat (the workers ZSET)
        self.alive: dict[tuple[str, str], int] = {}  # (queue, worker id) -> start of its unbroken run (the alive HASH)
        self.finished_by_guard = 0  # fetched, found 'success' (a late ack), finished without running
        self.left_dead = {q: 0 for q in QUEUES}  # dead letters replayed, purged or trimmed
        for w in self.current.values():  # Worker.run heartbeats before its first fetch
            self._beat(w)

    # -- helpers ---------------------------------------------------------

    def now_ms(self) -> int:
        sec, usec = self.r.time()
        return int(sec) * 1000 + int(usec) // 1000

    def live(self) -> list[Task]:
        return [t for t in self.tasks.values() if t.loc != "gone"]

    def new_id(self) -> str:
        self.n += 1
        return f"t{self.n}"

    def idem_holder(self, q: str, key: str) -> str | None:
        holder = self.idem_keys.get((q, key))
        if holder is not None and holder in self.tasks and self.tasks[holder].loc != "gone":
            return holder
        return None

    def remove_from_processing(self, t: Task) -> None:
        w = t.loc.split(":", 1)[1]
        self.processing[(t.queue, w)].remove(t.id)
        t.moved = False

    def make_ready(self, tid: str, front: bool) -> None:
        """lib/ready.lua's ready(): at the back of its priority (enqueue, promote, replay), or at the
        front (``front``: handed back by reap, release, a fenced or paused fetch: it runs next)."""
        t = self.tasks[tid]
        q = t.queue
        t.loc, t.moved = "pending", False
        if t.prio:
            n = 0
            if not front:
                self.seq[q] += 1
                n = self.seq[q]
            elif (100 - t.prio) * BAND in self.ranked[q].values():
                event("ids handed back to the front of one priority tie (ordered by id)")
            self.ranked[q][tid] = (100 - t.prio) * BAND + n
            if not self.pending[q] and self.markers[q] < MARKERS_MAX:  # no id in the LIST: a marker wakes one blocked BLMOVE
                self.markers[q] += 1
            return
        self.markers[q] = 0  # an id wakes anyone: the markers go
        if front:
            self.pending[q].append(tid)
        else:
            self.pending[q].insert(0, tid)

    def back_to_pending(self, tid: str) -> None:
        """To the front of its priority (it runs next): reap, release, a fenced fetch's hand-back."""
        self.make_ready(tid, front=True)

    def _best(self, q: str) -> tuple[str, int] | None:
        """The prioritized id fetch would consider first, and its score."""
        if not self.ranked[q]:
            return None
        return min(self.ranked[q].items(), key=lambda kv: (kv[1], kv[0]))

    def _best_high(self, q: str) -> str | None:
        """The best prioritized id if its priority is above 0 (it runs before the LIST)."""
        best = self._best(q)
        return best[0] if best is not None and best[1] < DEFAULT_SCORE else None

    def ready_order(self, q: str) -> list[str]:
        """The ready ids in the order fetch takes them: priorities above 0, the LIST, those below 0."""
        ranked = sorted(self.ranked[q].items(), key=lambda kv: (kv[1], kv[0]))
        return ([i for i, s in ranked if s < DEFAULT_SCORE] + self.pending[q][::-1]
                + [i for i, s in ranked if s >= DEFAULT_SCORE])

    def _take_next(self, q: str) -> str | None:
        """One step of fetch.lua's loop: the best above priority 0, else the LIST's next id (the
        markers it meets are dropped), else the best below 0."""
        high = self._best_high(q)
        if high is not None:
            del self.ranked[q][high]
            return high
        if self.pending[q]:
            return self.pending[q].pop()
        self.markers[q] = 0
        best = self._best(q)
        if best is None:
            return None
        del self.ranked[q][best[0]]
        return best[0]

    def registered(self, q: str) -> dict[str, int]:
        return {w: s for (qq, w), s in self.hb.items() if qq == q}

    def move_to_dead(self, t: Task, w: str, failed: bool, trimmed: int) -> None:
        q = t.queue
        self.remove_from_processing(t)
        t.loc = "dead"
        if failed:
            t.failures += 1
        if t.guard == f"running:{w}":
            t.guard = None
        # a dead letter keeps its idempotency key (a replay runs it under the key again);
        # purging or trimming it frees the key (idem_holder: a gone task holds nothing)
        self.counters[q]["dead_count"] += 1
        actual = dict(self.r.zrange(self.b.keys(q).dead, 0, -1, withscores=True))
        if t.id in actual:
            self.dead[q][t.id] = actual[t.id]
        popped = (set(self.dead[q]) | {t.id}) - set(actual)
        assert len(popped) == trimmed, (popped, trimmed)
        if trimmed:
            event("dead letters trimmed")
        assert len(actual) == min(len(self.dead[q]) + (t.id not in self.dead[q]), DEAD_MAX)
        for old in popped:  # trimmed: the oldest (score, id) go first
            if old in self.dead[q]:
                assert all((self.dead[q][old], old) <= (s, i) for i, s in actual.items()), (old, actual)
                del self.dead[q][old]
            self.tasks[old].loc = "gone"
            self.left_dead[q] += 1

    # -- producing -------------------------------------------------------

    @rule(q=st.sampled_from(QUEUES), delay=st.sampled_from([0, 0, 0, 0, 1, 5000, 60_000]),
          idem=st.sampled_from(["", "", "", "k1", "k2"]), prios=st.lists(PRIORITIES, min_size=1, max_size=4))
    def enqueue(self, q: str, delay: int, idem: str, prios: list[int]) -> None:
        """A batch, one task per priority drawn (priority 0 left to its default: every other one of those)."""
        items: list[NewTask] = []
        for p in prios:
            tid = self.new_id()
            item = NewTask(tid, _msg(self.n, q), TASK_PATH, delay, idem, p)
            items.append(item if p or self.n % 2 else NewTask(*item[:5]))
        out = self.b.enqueue(q, items)
        assert [e.id for e in out] == [i[0] for i in items]
        for (tid, *_), p, e in zip(items, prios, out, strict=True):
            holder = self.idem_holder(q, idem) if idem else None
            assert e.duplicate_of == holder, (tid, idem, e, holder)
            if holder is not None:
                continue
            if idem:
                self.idem_keys[(q, idem)] = tid
            if delay > 0:
                self.tasks[tid] = Task(tid, q, "scheduled", idem, prio=p)
                self.scheduled[q].add(tid)
            else:
                self.tasks[tid] = Task(tid, q, "pending", idem, prio=p)
                self.make_ready(tid, front=False)
            if self.paused[q]:
                event("enqueue on a paused queue")

    def stored(self) -> list[Task]:
        return sorted((t for t in self.live() if t.has_msg), key=lambda t: t.id)

    @rule(data=st.data(), q=st.sampled_from(QUEUES), raw=st.sampled_from(["ghost-1", "a b", "x" * 300]))
    def odd_enqueue(self, data: st.DataObject, q: str, raw: str) -> None:
        """A retried enqueue of a stored id (its first reply was lost) must neither store nor move
        the task again; an id pushed by hand with no task data must be buried as missing."""
        if self.stored() and data.draw(st.sampled_from([True, True, False])):
            t = data.draw(st.sampled_from(self.stored()))
            p = data.draw(PRIORITIES)  # of any priority: the retry must not queue it (again) anywhere
            out = self.b.enqueue(t.queue, [NewTask(t.id, _msg(0, t.queue), TASK_PATH, 0, "", p)])
            assert out[0].duplicate_of is None
            return
        tid = f"{raw}#{self.new_id()}"
        self.tasks[tid] = Task(tid, q, "pending", has_msg=False)
        if self.markers[q]:  # an id pushed by hand onto markers would mix them: its task data vanishes instead
            self.b.enqueue(q, [NewTask(tid, _msg(0, q), TASK_PATH, 0, "")])
            assert self.r.delete(self.b.keys(q).task(tid)) == 1
            event("a queued id lost its task data")
        else:
            self.r.lpush(self.b.keys(q).pending, tid)
        self.make_ready(tid, front=False)

    # -- consuming -------------------------------------------------------

    def _apply_fetch(self, q: str, w: str, ids: list[str], got: list[Any]) -> None:
        assert [d.id for d in got] == ids, (ids, got)
        for d in got:
            t = self.tasks[d.id]
            t.moved = False
            if not t.has_msg:
                assert d.code == NOMSG, d
                self.holds[w][t.id] = "nomsg"
                continue
            if t.guard is None:
                expected = RUN
            elif t.guard == "success":
                expected = DONE
            else:
                expected = BUSY
            assert d.code == expected, (d, t.loc, t.guard)
            event(f"fetch code {expected}")
            if expected == RUN:
                t.deliveries += 1
                t.guard = f"running:{w}"
                assert (d.deliveries, d.failures) == (t.deliveries, t.failures), (d, t.deliveries, t.failures)
                assert d.raw.startswith('{"v":1,')
                self.holds[w][t.id] = "run"
                if t.deliveries >= 3:
                    event("a task delivered 3+ times (crash loop: reaps never undo deliveries)")
            elif expected == DONE:
                self.remove_from_processing(t)
                t.loc = "finished"
                self.finished_by_guard += 1
            else:
                self.remove_from_processing(t)
                t.loc = "scheduled"
                self.scheduled[q].add(t.id)

    def _hand_back(self, q: str, w: str) -> None:
        """A fenced fetch: what a BLMOVE put in the unregistered worker's list goes back to the front
        of its priority (a BLMOVEd marker is dropped)."""
        plist = self.processing[(q, w)]
        # a reap or a clean exit emptied the list; only BLMOVEs since (unclaimed) can refill it
        assert all(i == MARKER or self.tasks[i].moved for i in plist), (q, w, plist)
        while plist:
            tid = plist.pop()
            event(f"fenced fetch handed back a BLMOVEd {'marker' if tid == MARKER else 'id'}")
            if tid != MARKER:
                self.back_to_pending(tid)

    def fetch_may_complete(self, q: str, w: str, n: int, moved: str) -> bool:
        """Whether fetch.lua's first write is one that frees memory (RPOP, LREM, ZREM): under OOM
        it then runs to the end. The fence hands back with RPOP; a paused queue LREMs the moved id;
        a moved marker is LREMed, so is a moved id that yields to a higher priority; a take from
        the prioritized set starts with ZREM; with no prioritized task, a LIST of markers only is
        trimmed (LTRIM) with nothing to push. Else the first write is LPUSH, LMOVE or SET: refused."""
        if (q, w) not in self.hb:
            return bool(self.processing[(q, w)])
        if self.paused[q]:
            return bool(moved)
        if moved == MARKER:
            return True
        if not self.ranked[q]:
            return n >= 1 and self.markers[q] > 0
        return self._best_high(q) is not None and (moved in self.processing[(q, w)] or n >= 1)

    def _fetch(self, q: str, w: str, n: int, moved: str = "") -> None:
        """``Broker.fetch`` of up to n ids, claiming first the id the fetcher BLMOVEd (if any): a
        moved marker counts one more to take instead, and so does a moved (default priority) id
        while a higher priority waits (the id goes back to the front of the LIST)."""
        plist = self.processing[(q, w)]
        self.oom_may_complete = self.fetch_may_complete(q, w, n, moved)
        if (q, w) not in self.hb:  # reaped, released everything, or never heartbeated: the fence
            with pytest.raises(Fenced):
                self.b.fetch(q, w, n, moved_id=moved)
            self._hand_back(q, w)
            event("fetch fenced")
            return
        if self.paused[q]:
            with pytest.raises(QueuePaused):
                self.b.fetch(q, w, n, moved_id=moved)
            if moved and moved in plist:
                plist.remove(moved)
                if moved != MARKER:  # BLMOVE takes only from the LIST: priority 0
                    assert self.tasks[moved].prio == 0, moved
                    self.make_ready(moved, front=True)
                event(f"paused: the BLMOVEd {'marker was dropped' if moved == MARKER else 'id went back to be next'}")
            event("fetch of a paused queue" + (" with tasks ready" if self.ready_order(q) else ""))
            # nothing was claimed: the worker's list holds no more than the model's (guards and
            # deliveries are compared by the invariants)
            assert self.r.lrange(self.b.keys(q).processing(w), 0, -1) == plist, (q, w, plist)
            return
        ids = []
        count = n
        if moved == MARKER:
            if MARKER in plist:  # else a reap dropped it meanwhile; fetch counts it all the same
                plist.remove(MARKER)
            count += 1
            event("claim of a BLMOVEd marker")
        elif moved and moved in plist:
            assert self.tasks[moved].moved, moved
            if self._best_high(q) is not None:
                plist.remove(moved)
                self.make_ready(moved, front=True)
                count += 1
                event("a BLMOVEd id yielded to a higher priority")
            else:
                ids.append(moved)
        elif moved:  # reaped after its BLMOVE and registered again since: the id is not ours any more
            event("claim of a BLMOVEd id that was reaped: not claimed")
        for _ in range(count):
            tid = self._take_next(q)
            if tid is None:
                break
            plist.insert(0, tid)
            self.tasks[tid].loc = f"processing:{w}"
            ids.append(tid)
        if len({self.tasks[i].prio for i in ids}) > 1:
            event("one fetch took several priorities")
        got = self.b.fetch(q, w, n, moved_id=moved)
        self._apply_fetch(q, w, ids, got)

    @rule(data=st.data(), name=st.sampled_from(NAMES), n=st.sampled_from([0, 1, 2, 3, 3]))
    def fetch(self, data: st.DataObject, name: str, n: int) -> None:
        q = data.draw(st.sampled_from([q for q in QUEUES if self.ready_order(q)] or QUEUES))
        w = self.current[name]
        self._fetch(q, w, n, self.moved.pop((q, w), ""))  # the fetch loop claims what it BLMOVEd first

    def _blmove_choices(self) -> list[tuple[str, str]]:
        """(queue, name) whose fetcher may BLMOVE: ids or markers in the LIST, and not holding a
        BLMOVEd id unclaimed.

        Only on a non-empty list: an empty one would block ~100 ms (Redis's timer resolution)."""
        return [(q, name) for q in QUEUES if self.pending[q] or self.markers[q] for name in NAMES
                if (q, self.current[name]) not in self.moved]

    @precondition(lambda self: self._blmove_choices())
    @rule(data=st.data())
    def blmove(self, data: st.DataObject) -> None:
        """The blocking half of a fetch: BLMOVE one id (or a marker: a prioritized task became
        ready), claim it later (or die, or be reaped, first).

        A plain BLMOVE knows no fence, nor pause: a worker reaped while it waited still moves an id."""
        q, name = data.draw(st.sampled_from(self._blmove_choices()))
        w = self.current[name]
        moved = self.b.wait(q, w, timeout=0.01)
        if self.pending[q]:
            tid = self.pending[q].pop()
            assert moved == tid, (moved, tid)
            t = self.tasks[tid]
            t.loc, t.moved = f"processing:{w}", True
        else:
            assert moved == MARKER, moved
            self.markers[q] -= 1
            tid = MARKER
            event("BLMOVE woken by a marker")
        self.processing[(q, w)].insert(0, tid)
        self.moved[(q, w)] = tid
        if (q, w) not in self.hb:
            event("BLMOVE by an unregistered worker")
        if self.paused[q]:
            event("BLMOVE on a paused queue")

    @precondition(lambda self: self.moved)
    @rule(data=st.data(), n=st.integers(0, 2), raced=st.sampled_from([False, False, True]))
    def claim_moved(self, data: st.DataObject, n: int, raced: bool) -> None:
        """The fetch after a BLMOVE. ``raced``: an unregistered worker's heartbeat thread registers it
        again just before the claim reaches Redis (the claim then must not take the reaped id)."""
        q, w = data.draw(st.sampled_from(sorted(self.moved)))
        if raced and (q, w) not in self.hb:
            self._beat(w, drop=False)
            event("claim raced by the heartbeat that re-registered the worker")
        self._fetch(q, w, n, self.moved.pop((q, w)))

    @precondition(lambda self: self.moved)
    @rule(data=st.data(), sweep=st.booleans())
    def claim_lost(self, data: st.DataObject, sweep: bool) -> None:
        """The fetch after a BLMOVE never reaches Redis (the connection dropped): the fetcher forgets
        what it moved (an id or a marker), which stays in the worker's list until the sweep, a reap
        or a clean exit hands it back. ``sweep``: the next heartbeats' sweep finds it first."""
        q, w = data.draw(st.sampled_from(sorted(self.moved)))
        del self.moved[(q, w)]
        event("claim after a BLMOVE lost")
        if sweep:
            self.liveness(w.split(".", 1)[0], dies=False, sweep=True)

    def _held(self, kind: str | None = None) -> list[tuple[str, str]]:
        return sorted((w, i) for w, h in self.holds.items() for i, k in h.items() if kind is None or k == kind)

    @precondition(lambda self: self._held("run"))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        w, tid = data.draw(st.sampled_from(self._held("run")))
        t = self.tasks[tid]
        del self.holds[w][tid]
        owned = t.loc == f"processing:{w}"
        try:
            ack(self.b, t.queue, w, tid, '"ok"')
            assert owned
        except LeaseLost:
            assert not owned
            event(f"late ack of a {t.loc.split(':')[0]} task")
        if not owned:  # a lost lease says 'success' to the redelivered copy, which then does not run; an owned
            t.guard = "success"  # ack leaves its guard to lapse: the hash's state 'finished' is the record
        if owned:
            self.remove_from_processing(t)
            t.loc = "finished"
            self.counters[t.queue]["processed"] += 1

    @precondition(lambda self: self._held("run"))
    @rule(data=st.data(), delay=st.sampled_from([0, 1000, 30_000]))
    def retry(self, data: st.DataObject, delay: int) -> None:
        w, tid = data.draw(st.sampled_from(self._held("run")))
        t = self.tasks[tid]
        del self.holds[w][tid]
        owned = t.loc == f"processing:{w}"
        try:
            self.b.retry(t.queue, w, tid, delay, {"exc": "builtins.ValueError", "msg": "boom", "tb": "", "at": 0})
            assert owned
        except LeaseLost:
            assert not owned
            return
        self.remove_from_processing(t)
        t.loc = "scheduled"
        self.scheduled[t.queue].add(tid)
        t.failures += 1
        if t.guard == f"running:{w}":
            t.guard = None
        self.counters[t.queue]["failed"] += 1

    @precondition(lambda self: self._held())
    @rule(data=st.data(), failed=st.booleans())
    def bury(self, data: st.DataObject, failed: bool) -> None:
        w, tid = data.draw(st.sampled_from(self._held()))
        t = self.tasks[tid]
        kind = self.holds[w].pop(tid)
        failed = failed and kind == "run"
        owned = t.loc == f"processing:{w}"
        reason = "failed" if kind == "run" else "missing_task"
        try:
            trimmed = self.b.bury(t.queue, w, tid, {"exc": "x.Error", "msg": "dead ü", "tb": "tb", "at": 1}, reason, failed)
            assert owned
        except LeaseLost:
            assert not owned
            return
        self.move_to_dead(t, w, failed, trimmed)

    @precondition(lambda self: self._held() or any(self.processing.values()))
    @rule(data=st.data(), everything=st.sampled_from([False, False, True]), then_restart=st.booleans())
    def release(self, data: st.DataObject, everything: bool, then_restart: bool) -> None:
        """A stopping worker hands back tasks it fetched but never started, or (clean exit)
        everything left in its processing lists, and leaves the heartbeat set (then, maybe, the
        process starts again under the same name: a new id)."""
        if everything:
            name = data.draw(st.sampled_from(NAMES))
            w = self.current[name]
            for q in QUEUES:
                plist = self.processing[(q, w)]
                n = sum(i != MARKER for i in plist)  # a BLMOVEd marker is dropped, not counted
                while plist:
                    tid = plist.pop()
                    if tid == MARKER:
                        event("clean exit dropped a BLMOVEd marker")
                        continue
                    t = self.tasks[tid]
                    self.back_to_pending(tid)
                    if t.guard == f"running:{w}":
                        t.guard = None
                self.hb.pop((q, w), None)
                self.alive.pop((q, w), None)
                self.moved.pop((q, w), None)
                assert self.b.release(q, w) == n
            self.holds[w].clear()
            if then_restart:
                self._restart(name, beats=data.draw(st.booleans()))
            return
        # the ids a predecessor of the same name still holds: a restarted worker never undoes their claims
        theirs = {name: sorted(i for (_, o), plist in self.processing.items() if o != w and o.split(".", 1)[0] == name
                               for i in plist if i != MARKER) for name, w in self.current.items()}
        choices = sorted(w for name, w in self.current.items() if self.holds[w] or theirs[name])
        if not choices:
            return
        w = data.draw(st.sampled_from(choices))
        by_queue: dict[str, list[str]] = {}
        for tid in sorted(self.holds[w]):
            if data.draw(st.booleans()):
                by_queue.setdefault(self.tasks[tid].queue, []).append(tid)
        name = w.split(".", 1)[0]
        if theirs[name] and (not by_queue or data.draw(st.booleans())):
            tid = data.draw(st.sampled_from(theirs[name]))
            by_queue.setdefault(self.tasks[tid].queue, []).append(tid)
            event("release names a predecessor's task")
        self._release_ids(w, by_queue)

    def _release_ids(self, w: str, by_queue: dict[str, list[str]]) -> None:
        """``Broker.release`` with ids, per queue: each id in w's list goes back to the front of its
        priority; its claim (delivery, guard) is undone only where w holds the guard. A marker named
        (the sweep finds one a BLMOVE moved and the worker dropped) leaves w's list and is no task:
        not handed back, not counted."""
        for q, ids in by_queue.items():
            expected = 0
            for tid in ids:
                if tid == MARKER:
                    plist = self.processing[(q, w)]
                    if MARKER in plist:
                        plist.remove(MARKER)
                        event("release dropped a stray marker")
                    continue
                t = self.tasks[tid]
                self.holds[w].pop(tid, None)
                if t.loc != f"processing:{w}":
                    continue
                expected += 1
                self.remove_from_processing(t)
                self.back_to_pending(tid)
                if t.guard == f"running:{w}":
                    t.guard = None
                    t.deliveries -= 1
            assert self.b.release(q, w, ids) == expected

    # -- liveness, restarts, time ------------------------------------------

    def _beat(self, w: str, drop: bool = True) -> None:
        """``Broker.heartbeat`` on every queue: it names the queues where w was not registered; the
        model's run start moves to now unless the previous beat is at most the gap old."""
        gone = self.b.heartbeat(QUEUES, w, {"name": w})
        assert gone == [q for q in QUEUES if (q, w) not in self.hb], (w, gone, self.registered(QUEUES[0]))
        pipe = self.r.pipeline(transaction=False)
        for q in QUEUES:
            pipe.zscore(self.b.keys(q).workers, w)
        for q, score in zip(QUEUES, pipe.execute(), strict=True):
            now = int(score)  # Redis TIME in the script
            prev, since = self.hb.get((q, w)), self.alive.get((q, w))
            if prev is None or since is None or now - prev > self.gap:
                self.alive[(q, w)] = now
                if prev is not None:
                    event("heartbeat after a gap: a new run")
            self.hb[(q, w)] = now
        if gone and len(gone) < len(QUEUES):
            event("heartbeat: unregistered on some queues only")
        if drop:  # the heartbeat fences the queues it was gone from: the worker drops its unclaimed BLMOVE
            for q in gone:
                self.moved.pop((q, w), None)

    def _rewind(self, w: str) -> None:
        """Make w's heartbeats look silent for longer than WORKER_TIMEOUT (where it is registered)."""
        now = self.now_ms()
        for q in QUEUES:
            if (q, w) in self.hb:
                score = now - TIMEOUT_MS - 5000
                assert self.r.zadd(self.b.keys(q).workers, {w: score}, xx=True, ch=True) == 1
                self.hb[(q, w)] = score

    @rule(name=st.sampled_from(NAMES), dies=st.booleans(), sweep=st.booleans())
    def liveness(self, name: str, dies: bool, sweep: bool) -> None:
        """A heartbeat, then maybe the sweep (Heartbeat.sweep: ids in the worker's lists that it
        does not know of, such as a BLMOVEd id it dropped when fenced, are released); or death:
        the worker's heartbeat score looks silent for longer than WORKER_TIMEOUT (it may heartbeat
        again later: a paused process waking up)."""
        w = self.current[name]
        if not dies:
            self._beat(w)
            if sweep:
                known = set(self.holds[w]) | {i for (_, o), i in self.moved.items() if o == w}
                orphans = {q: sorted(set(self.processing[(q, w)]) - known) for q in QUEUES}
                if any(orphans.values()):
                    event("sweep released orphans")
                self._release_ids(w, {q: ids for q, ids in orphans.items() if ids})
            return
        self._rewind(w)
        event("worker died")

    def _restart(self, name: str, beats: bool) -> None:
        old = self.current[name]
        del self.holds[old]  # the old process is gone: what it held locally is forgotten
        for q in QUEUES:
            self.moved.pop((q, old), None)
        self.born[name] += 1
        new = self.current[name] = incarnation(name, self.born[name])
        self.holds[new] = {}
        if beats:  # Worker.run heartbeats before its first fetch
            self._beat(new)

    def _restart_choices(self) -> list[str]:
        """Names whose live process holds something (a restart of an idle one only changes its id)."""
        return [name for name, w in self.current.items() if self.holds[w] or any(self.processing[(q, w)] for q in QUEUES)]

    @precondition(lambda self: self._restart_choices())
    @rule(data=st.data(), beats=st.sampled_from([True, True, False]), long_ago=st.booleans())
    def restart(self, data: st.DataObject, beats: bool, long_ago: bool) -> None:
        """The process of a worker dies (SIGKILL, OOM killer) and is started again with the same --name.

        The old incarnation never acts again; what it held stays in its processing list until a reap
        hands it back (deliveries still counted). ``long_ago``: it died a timeout before the restart.
        ``beats``: the new one heartbeats before its first fetch, as Worker.run does (or it is fenced)."""
        name = data.draw(st.sampled_from(self._restart_choices()))
        if long_ago:
            self._rewind(self.current[name])
        self._restart(name, beats)
        event("worker restarted under the same name")

    def _shift(self, delta: int) -> None:
        """Everything that measures time in Redis moves ``delta`` ms into the past."""
        pipe = self.r.pipeline(transaction=True)
        for q in QUEUES:
            k = self.b.keys(q)
            for key in (k.scheduled, k.workers):
                for member, score in self.r.zrange(key, 0, -1, withscores=True):
                    pipe.zadd(key, {member: score - delta})
            for member, value in self.r.hgetall(k.alive).items():
                pipe.hset(k.alive, member, int(value) - delta)
        pipe.execute()
        for key in self.hb:
            self.hb[key] -= delta
        for key in self.alive:
            self.alive[key] -= delta
        for q in QUEUES:
            for key in self.r.scan_iter(match=self.b.keys(q).prefix + "status:*", count=1000):
                ttl = self.r.pttl(key)
                if ttl < 0:
                    continue
                if ttl <= delta:
                    self.r.delete(key)
                    self.tasks[key.rsplit(":", 1)[1]].guard = None
                else:
                    self.r.pexpire(key, ttl - delta)

    @rule(delta=st.sampled_from([1300, 4700, 11_000, 25_000]),
          beating=st.lists(st.sampled_from(NAMES), max_size=3, unique=True))
    def time_passes(self, delta: int, beating: list[str]) -> None:
        """``delta`` ms of Redis time pass while the workers ``beating`` heartbeat every 4 s (at most
        the gap): their runs grow unbroken (past WORKER_TIMEOUT, they may reap); the others go stale."""
        while delta > 0:
            for name in beating:
                self._beat(self.current[name])
            step = min(delta, 4000) if beating else delta
            self._shift(step)
            delta -= step

    @rule(extra=st.sampled_from([1, 5000]), back=st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True),
          reaps=st.lists(st.sampled_from(QUEUES), min_size=3, max_size=3), operator=st.sampled_from([None, *QUEUES]))
    def redis_outage(self, extra: int, back: list[str], reaps: list[str], operator: str | None) -> None:
        """Redis was paused (SIGSTOP) or unreachable for longer than WORKER_TIMEOUT: to the scripts,
        every heartbeat and run start aged at once. The first workers back heartbeat, then try to
        reap (on ``reaps[i]``): their runs restarted, so none of them may reap the others yet. An
        operator's reap (on ``operator``) still reaps everyone else."""
        before = {q: set(self.registered(q)) for q in QUEUES}
        self._shift(TIMEOUT_MS + extra)
        for name, q in zip(back, reaps, strict=False):
            w = self.current[name]
            self._beat(w)
            assert all(self.alive[(qq, w)] == self.hb[(qq, w)] for qq in QUEUES), "the run did not restart after the outage"
            verdict, _ = self._call_reap(q, w, 10)
            assert verdict == "refused", (w, verdict)
        if operator is not None:
            others = before[operator] - {self.current[name] for name in back}
            _, reaped = self._call_reap(operator, "", 10)
            if len(others) <= 10:
                assert set(reaped) == others, (reaped, others)
            event("operator reap after an outage")

    def _crash_loop_choices(self) -> list[str]:
        return [q for q in QUEUES if not self.paused[q] and self.ready_order(q)[:1]
                and self.tasks[self.ready_order(q)[0]].has_msg]

    @precondition(lambda self: self._crash_loop_choices())
    @rule(data=st.data(), name=st.sampled_from(NAMES), rounds=st.integers(2, 3))
    def crash_loop(self, data: st.DataObject, name: str, rounds: int) -> None:
        """A task that kills its worker's process: fetched, the process dies and is started again
        under the same name, the predecessor is reaped. The new incarnation cannot release the
        predecessor's claim, and the reap keeps the delivery counted: each round counts one more."""
        q = data.draw(st.sampled_from(self._crash_loop_choices()))
        tid = self.ready_order(q)[0]
        t, k = self.tasks[tid], self.b.keys(q)
        for _ in range(rounds):
            w = self.current[name]
            if (q, w) not in self.hb:
                self._beat(w)
            before = t.deliveries
            self._fetch(q, w, 1, self.moved.pop((q, w), ""))
            if t.loc != f"processing:{w}" or t.guard != f"running:{w}":  # not run (a 'success' guard, a stale one)
                return
            self._rewind(w)
            self._restart(name, beats=True)
            new = self.current[name]
            assert self.b.release(q, new, [tid]) == 0, "a restarted worker released its predecessor's task"
            assert int(self.r.hget(k.task(tid), "deliveries")) == before + 1
            _, reaped = self._call_reap(q, "", 10)
            if w not in reaped:  # more than 10 dead workers before it
                return
            assert t.loc == "pending", t.loc
            assert int(self.r.hget(k.task(tid), "deliveries")) == before + 1, "the reap undid a delivery"
            event(f"crash loop: {before + 1} deliveries")
            if self.ready_order(q)[:1] != [tid]:  # other dead workers' tasks were handed back before it
                return

    # -- background duties -------------------------------------------------

    @rule(q=st.sampled_from(QUEUES))
    def promote(self, q: str) -> None:
        k = self.b.keys(q)
        before = dict(self.r.zrange(k.scheduled, 0, -1, withscores=True))
        assert set(before) == self.scheduled[q]
        now = self.now_ms()
        moved, _ = self.b.promote(q)
        left = set(self.r.zrange(k.scheduled, 0, -1))
        gone = set(before) - left
        assert len(gone) == moved
        assert all(before[i] > now for i in left), "a due task was not promoted"
        assert all(before[i] <= now + 2000 for i in gone), "a task was promoted long before it was due"
        for tid in sorted(gone, key=lambda i: (before[i], i)):  # ZRANGEBYSCORE's order: each at the back of its priority
            self.scheduled[q].discard(tid)
            self.make_ready(tid, front=False)

    def _check_reaped(self, q: str, me: str, before: int, after: int, max_workers: int, reaped: list[str]) -> None:
        """The workers reaped are the oldest silent for longer than WORKER_TIMEOUT at the script's
        now (somewhere between ``before`` and ``after``), at most ``max_workers``, never the reaper."""
        scores = {w: s for w, s in self.registered(q).items() if w != me}
        assert set(reaped) <= {w for w, s in scores.items() if s <= after - TIMEOUT_MS}, (reaped, scores, after)
        assert len(reaped) <= max_workers and len(set(reaped)) == len(reaped)
        assert reaped == sorted(reaped, key=lambda w: (scores[w], w)), reaped
        missed = sorted((s, w) for w, s in scores.items() if s <= before - TIMEOUT_MS and w not in reaped)
        if missed:  # only the cap leaves a dead worker, and only the younger ones
            assert len(reaped) == max_workers, (reaped, missed)
            assert all((scores[w], w) < missed[0] for w in reaped), (reaped, missed)
            event("reap capped by max_workers")

    def _apply_reap(self, q: str, reaped: list[str]) -> int:
        expected = 0
        for w in reaped:
            del self.hb[(q, w)]
            self.alive.pop((q, w), None)
            plist = self.processing[(q, w)]
            if plist and w not in self.current.values():
                event("a predecessor's tasks reaped (deliveries kept)")
            while plist:
                tid = plist.pop()
                if tid == MARKER:  # a wake-up its worker moved, not a task: dropped
                    event("reap dropped a BLMOVEd marker")
                    continue
                expected += 1
                t = self.tasks[tid]
                self.back_to_pending(tid)  # reaped tasks run next; their delivery stays counted
                if t.guard == f"running:{w}":
                    t.guard = None
        if expected:
            event("reaped tasks")
        return expected

    def _call_reap(self, q: str, me: str, max_workers: int) -> tuple[str, list[str]]:
        """``Broker.reap`` by ``me`` ('' = an operator): returns the verdict on the reaper's
        condition ('operator', 'refused', 'allowed', or 'edge' when Redis's now may fall either
        side of it) and the workers reaped."""
        mine, since = self.hb.get((q, me)), self.alive.get((q, me))
        before = self.now_ms()
        count, reaped = reap(self.b, q, me, max_workers)
        after = self.now_ms()
        assert me not in reaped, "a worker reaped itself"
        verdict = "operator"
        if me:
            if mine is None or since is None:
                may = must = False
            else:  # it may reap while its run is WORKER_TIMEOUT old and its last beat at most the gap old
                lo, hi = since + TIMEOUT_MS, mine + self.gap
                may = max(before, lo) <= min(after, hi)
                must = lo <= before and after <= hi
            verdict = "allowed" if must else "edge" if may else "refused"
            event(f"worker reap {verdict}")
            if reaped:
                event("a worker reaped others")
        if verdict == "refused":
            assert (count, reaped) == (0, []), (me, mine, since, before, count, reaped)
            return verdict, []
        if verdict != "edge" or reaped:
            self._check_reaped(q, me, before, after, max_workers, reaped)
        assert count == self._apply_reap(q, reaped)
        return verdict, reaped

    @rule(q=st.sampled_from(QUEUES), max_workers=st.sampled_from([10, 10, 1]))
    def reap(self, q: str, max_workers: int) -> None:
        """An operator's reap: no condition on the caller."""
        self._call_reap(q, "", max_workers)

    @rule(q=st.sampled_from(QUEUES), name=st.sampled_from(NAMES), max_workers=st.sampled_from([10, 10, 1]))
    def worker_reaps(self, q: str, name: str, max_workers: int) -> None:
        """A worker's periodic reap: refused unless its own beats are fresh and unbroken for WORKER_TIMEOUT."""
        self._call_reap(q, self.current[name], max_workers)

    # -- operator actions --------------------------------------------------

    @precondition(lambda self: any(self.dead.values()))
    @rule(data=st.data(), action=st.sampled_from(["replay", "purge"]))
    def operator(self, data: st.DataObject, action: str) -> None:
        """Replay or purge some dead letters (and some ids that are not dead: skipped)."""
        q = data.draw(st.sampled_from([q for q in QUEUES if self.dead[q]]))
        pool = sorted(self.dead[q]) + sorted(t.id for t in self.live() if t.queue == q and t.loc != "dead")[:2]
        ids = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4, unique=True))
        expected = 0
        if action == "purge":
            for tid in ids:
                if tid in self.dead[q]:
                    del self.dead[q][tid]
                    self.tasks[tid].loc = "gone"
                    expected += 1
            assert self.b.operator.purge(q, ids) == expected
            self.left_dead[q] += expected
            return
        for tid in ids:
            t = self.tasks[tid]
            if t.loc != "dead" or not t.has_msg:
                continue
            del self.dead[q][tid]
            self.make_ready(tid, front=False)  # at the back of its priority, in the order named
            t.failures = t.deliveries = 0  # a full set of attempts again
            expected += 1
        assert self.b.operator.replay(q, ids) == expected
        self.left_dead[q] += expected
        for tid in ids:  # a dead letter with nothing to run stays, with its time of death
            if tid in self.dead[q]:
                assert self.r.zscore(self.b.keys(q).dead, tid) == self.dead[q][tid]

    @rule(q=st.sampled_from(QUEUES))
    def pause_or_resume(self, q: str) -> None:
        """An operator pauses the queue (P:paused, as the pause scripts will write it) or resumes it."""
        k = self.b.keys(q)
        if self.paused[q]:
            assert self.r.delete(k.paused) == 1
        else:
            assert self.r.set(k.paused, f"{self.now_ms()}|state-machine", nx=True)
        self.paused[q] = not self.paused[q]
        event("queue paused" if self.paused[q] else "queue resumed")

    # -- transient error replies -------------------------------------------

    def _oom_steps(self) -> dict[str, Callable[[st.DataObject], None]]:
        """Write steps that can be tried now, each as the rule that runs it (with fresh draws)."""
        qs, names = st.sampled_from(QUEUES), st.sampled_from(NAMES)
        steps: dict[str, Callable[[st.DataObject], None]] = {
            "enqueue": lambda d: self.enqueue(d.draw(qs), d.draw(st.sampled_from([0, 5000])), d.draw(st.sampled_from(["", "k1"])),
                                              [d.draw(PRIORITIES)]),
            "fetch": lambda d: self.fetch(d, d.draw(names), d.draw(st.integers(1, 3))),  # n >= 1: it must write
            "heartbeat": lambda d: self.liveness(d.draw(names), dies=False, sweep=False),
            "reap": lambda d: self.reap(d.draw(qs), 10),
            "worker_reaps": lambda d: self.worker_reaps(d.draw(qs), d.draw(names), 10),
            "promote": lambda d: self.promote(d.draw(qs)),
        }
        if self._blmove_choices():
            steps["blmove"] = lambda d: self.blmove(d)
        if self.moved:
            steps["claim"] = lambda d: self.claim_moved(d, d.draw(st.integers(1, 2)), raced=False)
        if self._held("run"):
            steps["ack"] = lambda d: self.ack(d)
            steps["retry"] = lambda d: self.retry(d, d.draw(st.sampled_from([0, 30_000])))
        if self._held():
            steps["bury"] = lambda d: self.bury(d, d.draw(st.booleans()))
        if self._held() or any(self.processing.values()):
            steps["release"] = lambda d: self.release(d, d.draw(st.booleans()), then_restart=False)
        if any(self.dead.values()):
            steps["replay"] = lambda d: self.operator(d, "replay")
        return steps

    def _snapshot(self) -> dict[str, tuple[bytes, bool]]:
        """Every key's serialized value (DUMP: type, encoding and content) and whether it has a TTL."""
        keys = sorted(self.r.scan_iter(match="*", count=1000))
        pipe = self.r.pipeline(transaction=False)
        for key in keys:
            pipe.dump(key)
            pipe.pttl(key)
        out = pipe.execute()
        return {key: (out[2 * i], out[2 * i + 1] >= 0) for i, key in enumerate(keys)}

    @rule(data=st.data())
    def transient_error(self, data: st.DataObject) -> None:
        """Redis answers OOM (CONFIG SET maxmemory 1): a write step must raise an error that
        ``is_transient`` calls transient (the caller waits and tries again) and change nothing,
        byte for byte; or, for the steps of OOM_MAY_COMPLETE, complete exactly as modelled."""
        try:
            policy = self.r.config_get("maxmemory-policy").get("maxmemory-policy")
            old = self.r.config_get("maxmemory")["maxmemory"]
        except redis.ResponseError:  # CONFIG disabled (a managed Redis given by REDISQ_TEST_REDIS_URL)
            event("CONFIG disabled: no OOM step")
            return
        if policy != "noeviction":  # maxmemory 1 would evict the queues
            event("maxmemory-policy is not noeviction: no OOM step")
            return
        steps = self._oom_steps()
        step = data.draw(st.sampled_from(sorted(steps)))
        saved = copy.deepcopy({f: getattr(self, f) for f in MODEL})
        before = self._snapshot()
        self.oom_may_complete = False
        refused: redis.ResponseError | None = None
        self.r.config_set("maxmemory", 1)
        try:
            steps[step](data)
        except redis.ResponseError as exc:
            refused = exc
        finally:
            self.r.config_set("maxmemory", old)
        if refused is not None:
            assert is_transient(refused), f"{step} under OOM raised {type(refused).__name__}({refused}): is_transient says no"
            for f, v in saved.items():
                setattr(self, f, v)
            assert self._snapshot() == before, f"{step} was refused under OOM but changed Redis"
            event(f"OOM refused {step}")
            return
        if self._snapshot() == before:  # nothing to write (a refused worker reap, a duplicate enqueue)
            event(f"OOM: {step} had nothing to write")
            return
        assert step in OOM_MAY_COMPLETE or self.oom_may_complete, f"{step} wrote to Redis while it answered OOM"
        event(f"OOM let {step} complete (its first write frees memory)")

    # -- the invariants ----------------------------------------------------

    @invariant()
    def every_task_in_exactly_one_place(self) -> None:
        seen: dict[str, list[str]] = {}
        for q in QUEUES:
            k = self.b.keys(q)
            pending = self.r.lrange(k.pending, 0, -1)
            assert MARKER not in pending or set(pending) == {MARKER}, f"{q}: markers and ids in one LIST: {pending}"
            assert pending == self.pending[q] + [MARKER] * self.markers[q], (q, pending, self.pending[q], self.markers[q])
            ranked = [(i, int(s)) for i, s in self.r.zrange(k.prioritized, 0, -1, withscores=True)]
            assert ranked == sorted(self.ranked[q].items(), key=lambda kv: (kv[1], kv[0])), (q, ranked, self.ranked[q])
            assert int(self.r.get(k.prioseq) or 0) == self.seq[q], q
            assert bool(self.r.exists(k.paused)) == self.paused[q], q
            scheduled = self.r.zrange(k.scheduled, 0, -1)
            assert set(scheduled) == self.scheduled[q]
            dead = self.r.zrange(k.dead, 0, -1)
            assert set(dead) == set(self.dead[q])
            for tid in [i for i in pending if i != MARKER] + [i for i, _ in ranked]:  # the ZSET is pending too
                seen.setdefault(tid, []).append("pending")
            for tid in scheduled:
                seen.setdefault(tid, []).append("scheduled")
            for tid in dead:
                seen.setdefault(tid, []).append("dead")
            for key in self.r.scan_iter(match=k.prefix + "processing:*", count=1000):
                w = key.rsplit(":", 1)[1]
                plist = self.r.lrange(key, 0, -1)
                assert plist == self.processing[(q, w)], (q, w, plist, self.processing[(q, w)])
                for tid in plist:
                    if tid != MARKER:
                        seen.setdefault(tid, []).append(f"processing:{w}")
        for (q, w), plist in self.processing.items():
            if plist:
                assert self.r.exists(self.b.keys(q).processing(w)), (q, w)
        pipe = self.r.pipeline(transaction=False)
        tasks = list(self.tasks.values())
        for t in tasks:
            k = self.b.keys(t.queue)
            pipe.hmget(k.task(t.id), "state", "deliveries", "failures", "msg", "prio")
            pipe.exists(k.task(t.id))
            pipe.get(k.status(t.id))
        replies = pipe.execute()
        for i, t in enumerate(tasks):
            (state, deliveries, failures, msg, prio), exists, guard = replies[3 * i: 3 * i + 3]
            places = seen.pop(t.id, [])
            if t.loc in ("finished", "gone"):
                assert places == [], (t.id, t.loc, places)
            else:
                assert places == [t.loc], (t.id, t.loc, places)
            assert not t.moved or t.loc.startswith("processing:"), (t.id, t.loc)
            if t.loc == "gone":
                assert not exists, t.id
                continue
            if not t.has_msg:
                assert msg is None
                if t.loc == "dead":
                    assert state == "dead"
                continue
            if t.loc.startswith("processing:"):
                want = "pending" if t.moved else "running"  # BLMOVEd and not claimed yet, or claimed
            else:
                want = t.loc
            assert state == want, (t.id, t.loc, state, t.guard)
            assert prio == (str(t.prio) if t.prio else None), (t.id, prio, t.prio)  # kept by every move
            assert (int(deliveries), int(failures)) == (t.deliveries, t.failures), (t.id, deliveries, failures)
            assert guard == t.guard, (t.id, guard, t.guard)
        assert not seen, f"ids in queue lists that were never enqueued: {seen}"

    @invariant()
    def ready_in_running_order(self) -> None:
        """priority.ready_page (the admin's pending page, the counts) lists the model's ready order."""
        for q in QUEUES:
            total, page = ready_page(self.r, self.b.keys(q), 0, 10_000)
            want = [(i, self.tasks[i].prio) for i in self.ready_order(q)]
            assert (total, page) == (len(want), want), (q, total, page, want)

    @invariant()
    def heartbeats_agree(self) -> None:
        """The workers ZSET and the alive HASH hold exactly the model's heartbeats and run starts;
        a worker's info key outlives neither its reap nor its clean exit."""
        pipe = self.r.pipeline(transaction=False)
        for q in QUEUES:
            k = self.b.keys(q)
            pipe.zrange(k.workers, 0, -1, withscores=True)
            pipe.hgetall(k.alive)
        replies = pipe.execute()
        for i, q in enumerate(QUEUES):
            scores = {w: int(s) for w, s in replies[2 * i]}
            assert scores == self.registered(q), (q, scores, self.registered(q))
            alive = {w: int(v) for w, v in replies[2 * i + 1].items()}
            assert alive == {w: s for (qq, w), s in self.alive.items() if qq == q}, (q, alive)
            prefix = self.b.keys(q).prefix + "worker:"
            for key in self.r.scan_iter(match=prefix + "*", count=1000):
                assert key[len(prefix):] in scores, (q, key)

    @invariant()
    def counters_agree(self) -> None:
        for q in QUEUES:
            k = self.b.keys(q)
            got = {name: int(self.r.get(k.counter(name)) or 0) for name in ("processed", "failed", "dead_count")}
            assert got == self.counters[q], (q, got, self.counters[q])
            # the dead-letter queue holds every bury not since replayed, purged or trimmed
            assert self.r.zcard(k.dead) == got["dead_count"] - self.left_dead[q] == len(self.dead[q]) <= DEAD_MAX
        # a task is finished by its own ack, or by a late ack's 'success' guard found at fetch
        finished = sum(t.loc == "finished" for t in self.tasks.values())
        assert finished == sum(c["processed"] for c in self.counters.values()) + self.finished_by_guard


@pytest.fixture
def sm_broker(r: redis.Redis) -> Broker:
    return Broker(replace(get_options("default"), dead_letter_max=DEAD_MAX, worker_timeout=TIMEOUT_MS / 1000,
                          heartbeat_interval=INTERVAL_MS / 1000))


def test_broker_state_machine(r: redis.Redis, sm_broker: Broker) -> None:
    """The machine on a real Redis. Its rules draw from what Redis answered, so a run can draw differently where a
    replayed prefix met another answer (Hypothesis's ``FlakyStrategyDefinition``: seen twice in a day of loaded
    runs, never with an invariant broken). That is the harness, not the broker: such a run is started afresh, once;
    an invariant that fails raises as always."""
    from hypothesis.errors import FlakyStrategyDefinition

    try:
        for attempt in (1, 2):
            try:
                run_state_machine_as_test(
                    lambda: BrokerMachine(r, sm_broker),
                    settings=settings(
                        max_examples=EXAMPLES, stateful_step_count=60, deadline=None, database=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                    ),
                )
                return
            except FlakyStrategyDefinition:
                if attempt == 2:
                    raise
                r.config_set("maxmemory", 0)
                print("\nthe state machine drew differently on a replayed prefix; run again afresh")
    finally:  # never leave the session's Redis refusing writes
        r.config_set("maxmemory", 0)


def test_claim_of_reaped_moved_id(r: redis.Redis, sm_broker: Broker) -> None:
    """A worker BLMOVEs an id, stalls past WORKER_TIMEOUT, is reaped, then claims the id.

    The id is back in pending. The claim is fenced (the worker is no longer registered) and
    takes nothing; and once its heartbeat has registered it again (racing the claim), fetch.lua
    must still not claim (guard, state 'running', deliveries + 1) an id its processing list
    does not hold (regression).
    """
    b, k = sm_broker, sm_broker.keys("default")
    b.enqueue("default", [NewTask("x1", _msg(1, "default"), TASK_PATH, 0, "")])
    assert b.heartbeat(QUEUES, "w1.a", {}) == list(QUEUES)  # its first heartbeat
    assert b.wait("default", "w1.a", 0.01) == "x1"
    now = int(r.time()[0]) * 1000
    r.zadd(k.workers, {"w1.a": now - TIMEOUT_MS - 5000})
    assert reap(b, "default") == (1, ["w1.a"])
    with pytest.raises(Fenced):  # the stalled worker wakes up
        b.fetch("default", "w1.a", 0, moved_id="x1")
    assert r.lrange(k.pending, 0, -1) == ["x1"]
    assert r.hget(k.task("x1"), "state") == "pending" and r.get(k.status("x1")) is None
    assert b.heartbeat(QUEUES, "w1.a", {}) == ["default"]  # told it was reaped there
    assert b.fetch("default", "w1.a", 0, moved_id="x1") == [], "claimed a task that is not in this worker's processing list"
    assert r.lrange(k.pending, 0, -1) == ["x1"]
    assert r.hget(k.task("x1"), "state") == "pending" and r.hget(k.task("x1"), "deliveries") == "0"
