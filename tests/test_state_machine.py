"""A stateful model of the broker, checked against a real redis-server.

Hypothesis drives random sequences of broker operations -- enqueue (now,
delayed, with an idempotency key, a retried enqueue of an existing id),
BLMOVE + fetch, ack, retry, bury, release, heartbeat, worker death + reap,
promote, replay, purge and time passing on the Redis side -- and after every
step compares Redis with a plain-Python model:

* every task id is in exactly one of pending / scheduled / processing:<w> /
  dead / finished (or deleted for good by purge or dead-letter trimming), and
  the lists hold exactly the ids the model expects, in the model's order;
* the task hash's ``state``, ``deliveries`` and ``failures`` fields, the
  idempotency guard and the ``processed`` / ``failed`` / ``dead_count``
  counters agree with the model.

Worker death is simulated by rewinding the worker's heartbeat score in the
``workers`` ZSET relative to Redis ``TIME``; time passing by rewriting the
scores of ``scheduled`` and ``workers`` and shortening the guards' PX TTLs.
Workers keep acting after they were reaped (a paused process that wakes up):
their late ack/retry/bury must be refused or absorbed, never lose a task.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import hypothesis.strategies as st
import pytest
import redis
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from django_redisq.broker import BUSY, DONE, NOMSG, RUN, Broker
from django_redisq.conf import get_options
from django_redisq.exceptions import LeaseLost
from django_redisq.message import encode

QUEUES = ("default", "emails")
WORKERS = ("w1", "w2", "w3")
TIMEOUT_MS = 10_000  # WORKER_TIMEOUT (also the guard lease)
DEAD_MAX = 3  # small, so dead-letter trimming happens
TASK_PATH = "tests.testapp.tasks.noop"
EXAMPLES = int(os.environ.get("REDISQ_SM_EXAMPLES", "100"))


def _msg(n: int, queue: str) -> str:
    return encode([n], {})


class Task:
    __slots__ = ("deliveries", "failures", "guard", "has_msg", "id", "idem", "loc", "queue")

    def __init__(self, task_id: str, queue: str, loc: str, idem: str = "", has_msg: bool = True) -> None:
        self.id, self.queue, self.loc, self.idem, self.has_msg = task_id, queue, loc, idem, has_msg
        self.deliveries = self.failures = 0
        self.guard: str | None = None  # None, "running:<w>" or "success"


class BrokerMachine(RuleBasedStateMachine):
    def __init__(self, client: redis.Redis, broker: Broker) -> None:
        super().__init__()
        self.r, self.b = client, broker
        self.r.flushall()
        self.n = 0
        self.tasks: dict[str, Task] = {}
        self.pending: dict[str, list[str]] = {q: [] for q in QUEUES}  # index 0 = left (LPUSH end); fetch pops the right
        self.scheduled: dict[str, set[str]] = {q: set() for q in QUEUES}
        self.processing: dict[tuple[str, str], list[str]] = {(q, w): [] for q in QUEUES for w in WORKERS}
        self.dead: dict[str, dict[str, float]] = {q: {} for q in QUEUES}  # id -> died at (from Redis)
        self.idem_keys: dict[tuple[str, str], str] = {}  # (queue, key) -> holder id
        self.counters = {q: {"processed": 0, "failed": 0, "dead_count": 0} for q in QUEUES}
        # what each worker believes it holds: id -> "run" (claimed) or "nomsg" (to bury)
        self.holds: dict[str, dict[str, str]] = {w: {} for w in WORKERS}
        self.moved: dict[tuple[str, str], list[str]] = {(q, w): [] for q in QUEUES for w in WORKERS}  # BLMOVEd, unclaimed
        self.registered: set[str] = set()  # workers that heartbeated once
        self.finished_by_guard = 0  # fetched, found 'success' (a late ack), finished without running
        self.left_dead = {q: 0 for q in QUEUES}  # dead letters replayed, purged or trimmed

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
        if t.id in self.moved[(t.queue, w)]:  # BLMOVEd again by a reaped worker, then settled by its old run
            self.moved[(t.queue, w)].remove(t.id)

    def move_to_dead(self, t: Task, w: str, failed: bool, trimmed: int) -> None:
        q = t.queue
        self.remove_from_processing(t)
        t.loc = "dead"
        if failed:
            t.failures += 1
        if t.guard == f"running:{w}":
            t.guard = None
        if t.idem and self.idem_keys.get((q, t.idem)) == t.id:
            del self.idem_keys[(q, t.idem)]
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
          idem=st.sampled_from(["", "", "", "k1", "k2"]), count=st.integers(1, 3))
    def enqueue(self, q: str, delay: int, idem: str, count: int) -> None:
        items = []
        for _ in range(count):
            tid = self.new_id()
            items.append((tid, _msg(self.n, q), TASK_PATH, delay, idem))
        out = self.b.enqueue(q, items)
        assert [e.id for e in out] == [i[0] for i in items]
        for (tid, *_), e in zip(items, out, strict=True):
            holder = self.idem_holder(q, idem) if idem else None
            assert e.duplicate_of == holder, (tid, idem, e, holder)
            if holder is not None:
                continue
            if idem:
                self.idem_keys[(q, idem)] = tid
            if delay > 0:
                self.tasks[tid] = Task(tid, q, "scheduled", idem)
                self.scheduled[q].add(tid)
            else:
                self.tasks[tid] = Task(tid, q, "pending", idem)
                self.pending[q].insert(0, tid)

    def stored(self) -> list[Task]:
        return sorted((t for t in self.live() if t.has_msg), key=lambda t: t.id)

    @rule(data=st.data(), q=st.sampled_from(QUEUES), raw=st.sampled_from(["ghost-1", "a b", "x" * 300]))
    def odd_enqueue(self, data: st.DataObject, q: str, raw: str) -> None:
        """A retried enqueue of a stored id (its first reply was lost) must neither store nor move
        the task again; an id pushed by hand with no task data must be buried as missing."""
        if self.stored() and data.draw(st.booleans()):
            t = data.draw(st.sampled_from(self.stored()))
            out = self.b.enqueue(t.queue, [(t.id, _msg(0, t.queue), TASK_PATH, 0, "")])
            assert out[0].duplicate_of is None
            return
        tid = f"{raw}#{self.new_id()}"
        self.r.lpush(self.b.keys(q).pending, tid)
        self.tasks[tid] = Task(tid, q, "pending", has_msg=False)
        self.pending[q].insert(0, tid)

    # -- consuming -------------------------------------------------------

    def _apply_fetch(self, q: str, w: str, ids: list[str], got: list[Any]) -> None:
        assert [d.id for d in got] == ids, (ids, got)
        for d in got:
            t = self.tasks[d.id]
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
            elif expected == DONE:
                self.remove_from_processing(t)
                t.loc = "finished"
                self.finished_by_guard += 1
            else:
                self.remove_from_processing(t)
                t.loc = "scheduled"
                self.scheduled[q].add(t.id)

    def register(self, w: str) -> None:
        """A worker heartbeats before its first fetch (as Worker.run does)."""
        if w not in self.registered:
            self.b.heartbeat(QUEUES, w, {"name": w})
            self.registered.add(w)

    @rule(q=st.sampled_from(QUEUES), w=st.sampled_from(WORKERS), n=st.sampled_from([0, 1, 2, 3, 3]))
    def fetch(self, q: str, w: str, n: int) -> None:
        self.register(w)
        ids = []
        for _ in range(min(n, len(self.pending[q]))):
            tid = self.pending[q].pop()
            self.processing[(q, w)].insert(0, tid)
            self.tasks[tid].loc = f"processing:{w}"
            ids.append(tid)
        got = self.b.fetch(q, w, n)
        self._apply_fetch(q, w, ids, got)

    @precondition(lambda self: any(self.pending.values()))
    @rule(data=st.data(), w=st.sampled_from(WORKERS))
    def blmove(self, data: st.DataObject, w: str) -> None:
        """The blocking half of a fetch: BLMOVE one id, claim it later (or die first).

        Only on a non-empty list: an empty one would block ~100 ms (Redis's timer resolution).
        """
        q = data.draw(st.sampled_from([q for q in QUEUES if self.pending[q]]))
        self.register(w)
        moved = self.b.wait(q, w, timeout=0.01)
        tid = self.pending[q].pop()
        assert moved == tid
        self.processing[(q, w)].insert(0, tid)
        self.tasks[tid].loc = f"processing:{w}"
        self.moved[(q, w)].append(tid)

    @precondition(lambda self: any(self.moved.values()))
    @rule(data=st.data(), n=st.integers(0, 2))
    def claim_moved(self, data: st.DataObject, n: int) -> None:
        q, w = data.draw(st.sampled_from(sorted(k for k, v in self.moved.items() if v)))
        tid = self.moved[(q, w)].pop(0)
        # reap and clean_exit forget moved ids, so the claim is never stale here;
        # a stale claim is test_claim_of_reaped_moved_id
        assert self.tasks[tid].loc == f"processing:{w}"
        ids = [tid]
        for _ in range(min(n, len(self.pending[q]))):
            nxt = self.pending[q].pop()
            self.processing[(q, w)].insert(0, nxt)
            self.tasks[nxt].loc = f"processing:{w}"
            ids.append(nxt)
        got = self.b.fetch(q, w, n, moved_id=tid)
        self._apply_fetch(q, w, ids, got)

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
            self.b.ack(t.queue, w, tid, '"ok"')
            assert owned
        except LeaseLost:
            assert not owned
            event(f"late ack of a {t.loc.split(':')[0]} task")
        t.guard = "success"  # written even when the lease was lost: the redelivered copy will not run
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
    @rule(data=st.data(), everything=st.sampled_from([False, False, True]))
    def release(self, data: st.DataObject, everything: bool) -> None:
        """A stopping worker hands back tasks it fetched but never started, or (clean exit)
        everything left in its processing lists, and leaves the heartbeat set."""
        if everything:
            w = data.draw(st.sampled_from(WORKERS))
            for q in QUEUES:
                plist = self.processing[(q, w)]
                n = len(plist)
                while plist:
                    tid = plist.pop()
                    t = self.tasks[tid]
                    self.pending[q].append(tid)
                    t.loc = "pending"
                    if t.guard == f"running:{w}":
                        t.guard = None
                assert self.b.release(q, w) == n
                self.moved[(q, w)].clear()
            self.holds[w].clear()
            self.registered.discard(w)
            return
        if not self._held():
            return
        w = data.draw(st.sampled_from(sorted({w for w, _ in self._held()})))
        by_queue: dict[str, list[str]] = {}
        for tid in sorted(self.holds[w]):
            if data.draw(st.booleans()):
                by_queue.setdefault(self.tasks[tid].queue, []).append(tid)
        for q, ids in by_queue.items():
            expected = 0
            for tid in ids:
                t = self.tasks[tid]
                del self.holds[w][tid]
                if t.loc != f"processing:{w}":
                    continue
                expected += 1
                self.remove_from_processing(t)
                self.pending[q].append(tid)
                t.loc = "pending"
                if t.guard == f"running:{w}":
                    t.guard = None
                    t.deliveries -= 1
            assert self.b.release(q, w, ids) == expected

    # -- liveness, time, background duties ---------------------------------

    @rule(w=st.sampled_from(WORKERS), dies=st.booleans())
    def liveness(self, w: str, dies: bool) -> None:
        """A heartbeat; or death: rewind the worker's heartbeat score so it looks silent for
        longer than WORKER_TIMEOUT (it may heartbeat again later: a paused process waking up)."""
        if not dies:
            self.b.heartbeat(QUEUES, w, {"name": w})
            self.registered.add(w)
            return
        now = self.now_ms()
        for q in QUEUES:
            if self.r.zadd(self.b.keys(q).workers, {w: now - TIMEOUT_MS - 5000}, xx=True, ch=True):
                event("worker died")

    @rule(delta=st.sampled_from([1300, 4700, 25_000]))
    def time_passes(self, delta: int) -> None:
        """Everything that measures time in Redis moves ``delta`` ms into the past."""
        pipe = self.r.pipeline(transaction=True)
        for q in QUEUES:
            k = self.b.keys(q)
            for key in (k.scheduled, k.workers):
                for member, score in self.r.zrange(key, 0, -1, withscores=True):
                    pipe.zadd(key, {member: score - delta})
        pipe.execute()
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
        for tid in sorted(gone, key=lambda i: (before[i], i)):
            self.scheduled[q].discard(tid)
            self.pending[q].insert(0, tid)
            self.tasks[tid].loc = "pending"

    @rule(q=st.sampled_from(QUEUES))
    def reap(self, q: str) -> None:
        k = self.b.keys(q)
        scores = dict(self.r.zrange(k.workers, 0, -1, withscores=True))
        now = self.now_ms()
        count, reaped = self.b.reap(q)
        for w, s in scores.items():
            if s < now - TIMEOUT_MS - 1500:
                assert w in reaped, (w, s, now)
            elif s > now - TIMEOUT_MS + 1500:
                assert w not in reaped, (w, s, now)
        expected = 0
        for w in reaped:
            self.registered.discard(w)  # its next fetch heartbeats again, as a woken worker would
            self.moved[(q, w)].clear()
            plist = self.processing[(q, w)]
            expected += len(plist)
            while plist:
                tid = plist.pop()
                t = self.tasks[tid]
                self.pending[q].append(tid)  # reaped tasks run next
                t.loc = "pending"
                if t.guard == f"running:{w}":
                    t.guard = None
        assert count == expected
        if expected:
            event("reaped tasks")

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
            assert self.b.purge(q, ids) == expected
            self.left_dead[q] += expected
            return
        for tid in ids:
            t = self.tasks[tid]
            if t.loc != "dead" or not t.has_msg:
                continue
            del self.dead[q][tid]
            self.pending[q].insert(0, tid)
            t.loc = "pending"
            t.failures = t.deliveries = 0  # a full set of attempts again
            expected += 1
        assert self.b.replay(q, ids) == expected
        self.left_dead[q] += expected
        for tid in ids:  # a dead letter with nothing to run stays, with its time of death
            if tid in self.dead[q]:
                assert self.r.zscore(self.b.keys(q).dead, tid) == self.dead[q][tid]

    # -- the invariants ----------------------------------------------------

    @invariant()
    def every_task_in_exactly_one_place(self) -> None:
        seen: dict[str, list[str]] = {}
        for q in QUEUES:
            k = self.b.keys(q)
            pending = self.r.lrange(k.pending, 0, -1)
            assert pending == self.pending[q], (q, pending, self.pending[q])
            scheduled = self.r.zrange(k.scheduled, 0, -1)
            assert set(scheduled) == self.scheduled[q]
            dead = self.r.zrange(k.dead, 0, -1)
            assert set(dead) == set(self.dead[q])
            for tid in pending:
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
                    seen.setdefault(tid, []).append(f"processing:{w}")
            for w in WORKERS:
                if self.processing[(q, w)]:
                    assert self.r.exists(k.processing(w)), (q, w)
        pipe = self.r.pipeline(transaction=False)
        tasks = list(self.tasks.values())
        for t in tasks:
            k = self.b.keys(t.queue)
            pipe.hmget(k.task(t.id), "state", "deliveries", "failures", "msg")
            pipe.exists(k.task(t.id))
            pipe.get(k.status(t.id))
        replies = pipe.execute()
        for i, t in enumerate(tasks):
            (state, deliveries, failures, msg), exists, guard = replies[3 * i: 3 * i + 3]
            places = seen.pop(t.id, [])
            if t.loc in ("finished", "gone"):
                assert places == [], (t.id, t.loc, places)
            else:
                assert places == [t.loc], (t.id, t.loc, places)
            if t.loc == "gone":
                assert not exists, t.id
                continue
            if not t.has_msg:
                assert msg is None
                if t.loc == "dead":
                    assert state == "dead"
                continue
            if t.loc.startswith("processing:"):
                # claimed, or BLMOVEd and not claimed yet
                want = "pending" if t.id in self.moved[(t.queue, t.loc.split(":", 1)[1])] else "running"
            else:
                want = t.loc
            assert state == want, (t.id, t.loc, state, t.guard)
            assert (int(deliveries), int(failures)) == (t.deliveries, t.failures), (t.id, deliveries, failures)
            assert guard == t.guard, (t.id, guard, t.guard)
        assert not seen, f"ids in queue lists that were never enqueued: {seen}"

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
    return Broker(replace(get_options("default"), dead_letter_max=DEAD_MAX, worker_timeout=TIMEOUT_MS / 1000))


def test_broker_state_machine(r: redis.Redis, sm_broker: Broker) -> None:
    run_state_machine_as_test(
        lambda: BrokerMachine(r, sm_broker),
        settings=settings(
            max_examples=EXAMPLES, stateful_step_count=60, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_claim_of_reaped_moved_id(r: redis.Redis, sm_broker: Broker) -> None:
    """A worker BLMOVEs an id, stalls past WORKER_TIMEOUT, is reaped, then claims the id.

    The id is back in pending; fetch.lua must not claim it (guard, state 'running',
    deliveries + 1) for a worker whose processing list does not hold it (regression).
    """
    b = sm_broker
    b.enqueue("default", [("x1", _msg(1, "default"), TASK_PATH, 0, "")])
    b.heartbeat(QUEUES, "w1", {})
    assert b.wait("default", "w1", 0.01) == "x1"
    now = int(r.time()[0]) * 1000
    r.zadd(b.keys("default").workers, {"w1": now - TIMEOUT_MS - 5000})
    assert b.reap("default") == (1, ["w1"])
    got = b.fetch("default", "w1", 0, moved_id="x1")  # the stalled worker wakes up
    k = b.keys("default")
    assert r.lrange(k.pending, 0, -1) == ["x1"]
    assert [d.code for d in got] != [RUN], "claimed a task that is not in this worker's processing list"
    assert r.hget(k.task("x1"), "state") == "pending"
