"""No hoarding (issue 22, part 2), with two real ``runworker`` processes and a real Redis.

A task never waits in one worker's hands while another worker that serves its
queue has a free slot: a worker whose every slot is busy fetches nothing (not
even through a blocked BLMOVE), and what it fetched and cannot start soon goes
back to the head of its queue, in order, with its delivery count unchanged.
The 0.5 s target is a measured figure (``bench/run.py --only hoarding``); the
bounds asserted here are generous, for a loaded machine.
"""

from __future__ import annotations

import statistics
import time

from tests.helpers import blocked_of, keys, wait_for, where_is
from tests.testapp import tasks
from tests.testapp.tasks import SPANS

LONG = 8.0
QUEUES = ("default", "emails")


def spans(r) -> dict[str, tuple[float, float | None]]:
    """tag -> (start, end or None) of each run of ``span``."""
    out = {}
    for e in r.lrange(SPANS, 0, -1):
        tag, start, end = e.split("|")
        out[tag] = (float(start), float(end) if end else None)
    return out


def ran_on(r, queue: str, task_id: str) -> str:
    """The name (``--name``) of the worker that last took ``task_id``."""
    return (r.hget(keys(queue).task(task_id), "workers") or "").split(",")[-1].rsplit(".", 1)[0]


def test_a_busy_worker_hands_back_what_it_holds_to_an_idle_one(r, run_worker_process):
    """The issue's run: A (-c 2) takes four long tasks and 18 fast ones of another queue, then B (-c 4) starts.
    B runs the two long ones A could not start and the fast ones, long before A's first two end; delivery counts
    stay 1 (a hand-back is not a delivery)."""
    slow = tasks.span.using(queue_name="default")
    fast = tasks.span.using(queue_name="emails")
    longs = [slow.enqueue(f"long{i}", LONG) for i in range(4)]
    quick = [fast.enqueue(f"fast{i}", 0.01) for i in range(18)]
    a = run_worker_process(*QUEUES, "--concurrency", "2", "--name", "A")
    assert wait_for(lambda: sum(1 for t in spans(r) if t.startswith("long")) >= 2, timeout=30)
    a_busy_at = time.time()
    b = run_worker_process(*QUEUES, "--concurrency", "4", "--name", "B")
    assert wait_for(lambda: len(spans(r)) == 22, timeout=LONG), sorted(spans(r))
    s = spans(r)
    first_long_end = a_busy_at + LONG - 1.0
    late = {t: round(start - a_busy_at, 2) for t, (start, _) in s.items() if start > first_long_end}
    assert not late, late  # nothing waited for A's long tasks
    assert sorted(ran_on(r, "default", x.id) for x in longs) == ["A", "A", "B", "B"]
    assert {ran_on(r, "emails", x.id) for x in quick} <= {"A", "B"}
    assert wait_for(lambda: all(fast.get_result(x.id).is_finished for x in quick), timeout=10)
    assert [int(r.hget(keys("emails").task(x.id), "deliveries")) for x in quick] == [1] * 18
    assert [int(r.hget(keys("default").task(x.id), "deliveries")) for x in longs] == [1] * 4
    for wp in (a, b):
        wp.proc.terminate()


def test_a_fast_task_starts_at_once_on_the_idle_worker(r, run_worker_process):
    """A is busy on two long tasks, B idle, both serving the queue: each fast task enqueued starts on B, within
    a generous bound, and A holds nothing beyond the two it runs (nor waits in BLMOVE for more)."""
    slow = tasks.span.using(queue_name="default")
    longs = [slow.enqueue(f"long{i}", 6 * LONG) for i in range(2)]  # 48 s: they outlast a slow run
    a = run_worker_process(*QUEUES, "--concurrency", "2", "--name", "A")
    assert wait_for(lambda: len(spans(r)) == 2, timeout=30)
    began = time.time()

    def why() -> str:  # what a failure needs: where A's long tasks are, and what the workers said
        places = {x.id: (where_is(r, x.id, "default"), r.hgetall(keys().task(x.id))) for x in longs}
        logs = []
        for name, wp in (("A", a), ("B", b)):
            wp.log.seek(0)
            logs.append(f"--- worker {name}:\n" + wp.log.read()[-3000:])
        return f"{time.time() - began:.1f}s after A began its long tasks; {places}\n" + "\n".join(logs)

    # a BLMOVE A entered before it was busy ends at BLOCK_TIMEOUT: wait for that, on A's own clients
    assert wait_for(lambda: blocked_of(r, a.proc.pid, "blmove") == 0, timeout=10), r.client_list()
    b = run_worker_process(*QUEUES, "--concurrency", "2", "--name", "B")
    # B waits in BLMOVE on both queues, A on none: counted on B's own clients (a client another test of the session
    # left blocked may end its wait meanwhile, so a count of all of them is no measure)
    assert wait_for(lambda: blocked_of(r, b.proc.pid, "blmove") >= 2 and r.zcard(keys().workers) == 2, timeout=30)
    waits = []
    for i in range(20):
        q = QUEUES[i % 2]
        t0 = time.time()
        res = tasks.span.using(queue_name=q).enqueue(f"fast{i}", 0.0)
        assert wait_for(lambda: f"fast{i}" in spans(r), timeout=10, step=0.005)  # noqa: B023
        waits.append(spans(r)[f"fast{i}"][0] - t0)
        # were A blocked in BLMOVE too, Redis would serve it first about half the time (the longest blocked first)
        assert ran_on(r, q, res.id) == "B", why()
        a_holds = sum(r.llen(k) for q2 in QUEUES for k in r.scan_iter(keys(q2).processing("A.*")))
        assert a_holds == 2, f"fast{i}: A holds {a_holds}; " + why()  # A's two long tasks, nothing more
        time.sleep(0.05)
    waits.sort()
    print(f"enqueue -> start on the idle worker: median {statistics.median(waits):.3f}s, max {waits[-1]:.3f}s")
    assert waits[-1] < 2.0, waits  # the target is 0.5 s (p99, bench/run.py --only hoarding); generous here
    for wp in (a, b):
        wp.proc.terminate()


# -- the parts, one by one -------------------------------------------------


def _deliveries(q: str, n: int, start: int = 0) -> list:
    from django_redisq.store.steps.replies import RUN, Delivery

    return [Delivery(f"{q}{i}", q, RUN, "", 1, 0) for i in range(start, start + n)]


def test_no_room_while_every_slot_is_busy():
    """``reserve``: the free slots plus ``ahead`` less what waits unstarted; nothing while every slot is busy."""
    from django_redisq.worker.fetching.held import Held

    ahead = [3]
    held = Held(["default", "emails"], lambda: 100, slots=2, ahead=lambda: ahead[0])
    assert held.reserve(100) == 5  # 2 free slots + 3 ahead
    held.unreserve(5)
    held.add("default", held.permits["default"].take(0), _deliveries("default", 4))
    assert held.reserve(100) == 1 and held.reserve(100) == 0  # 4 wait, 1 was reserved: 5 in all
    held.unreserve(1)
    for _ in range(2):
        d = held.next()
        assert d is not None and held.begin(d, lambda: True)
    assert held.free_slots() == 0 and held.reserve(100) == 0 and not held.wait_for_room(0.01)
    held.finished(d)
    assert held.reserve(100) == 1 + 3 - 2  # one free slot, 3 ahead, 2 wait
    held.unreserve(2)
    ahead[0] = 0
    assert held.reserve(100) == 0  # as many wait as slots are free, and nothing may be held ahead
    assert len(held.executing) == 1 and len(held.running) == 2  # run but not settled: no slot, still held


def test_take_stale_takes_only_what_waited_too_long_oldest_first():
    from django_redisq.worker.fetching.held import Held

    held = Held(["default", "emails"], lambda: 100, slots=1)
    held.add("default", held.permits["default"].take(0), _deliveries("default", 3))
    held.add("emails", held.permits["emails"].take(0), _deliveries("emails", 2))
    taken = held.next()
    assert taken is not None and held.begin(taken, lambda: True)
    assert held.take_stale(60.0) == {}
    time.sleep(0.05)
    held.add("default", held.permits["default"].take(0), _deliveries("default", 1, start=3))
    stale = held.take_stale(0.04)
    assert stale == {"default": ["default1", "default2"], "emails": ["emails0", "emails1"]}
    assert held.known() == {"default0", "default3"} and held.permits["emails"].held == 0
    assert held.permits["default"].held == 2 and held.next() is not None and held.next() is None


def test_a_hand_back_keeps_order_and_delivery_counts(r, broker):
    """What a busy worker hands back is taken next, in the order it had, with its delivery count as before."""
    from django_redisq.worker.fetching.handback import hand_back
    from tests.helpers import seed_pending

    for i in range(5):
        seed_pending(r, f"t{i}", deliveries=1 if i == 1 else 0)
    broker.heartbeat(["default"], "w1", {})
    broker.heartbeat(["default"], "w2", {})
    got = [d.id for d in broker.fetch("default", "w1", 3)]
    assert got == ["t0", "t1", "t2"]
    assert hand_back(broker, "w1", "default", got, "test")
    assert r.llen(keys().processing("w1")) == 0
    again = broker.fetch("default", "w2", 5)
    assert [d.id for d in again] == ["t0", "t1", "t2", "t3", "t4"]
    assert [d.deliveries for d in again] == [1, 2, 1, 1, 1]  # one delivery each: the hand-back counted none


def test_a_fetch_sent_before_the_worker_found_it_was_reaped_is_not_held():
    """A fetch in flight when the worker froze, answered before the reap: its tasks went back to pending and run
    elsewhere, so once the worker has dropped what it held on the queue (it found it was reaped), that answer is not
    held either; one sent after, or on another queue, is (seen before: 7 of a prefetched batch ran twice)."""
    from django_redisq.worker.fetching.held import Held

    held = Held(["default", "emails"], lambda: 100)
    fence, other = held.fences["default"], held.fences["emails"]
    held.add("default", held.permits["default"].take(0), _deliveries("default", 2))
    assert held.drop("default") == 2  # the heartbeat found the worker reaped on "default"
    assert held.add("default", held.permits["default"].take(0), _deliveries("default", 3, start=2), fence) == 0
    assert held.next() is None and held.permits["default"].held == 0  # nothing held, every permit back
    assert held.add("emails", held.permits["emails"].take(0), _deliveries("emails", 1), other) == 1
    after = held.fences["default"]
    assert held.add("default", held.permits["default"].take(0), _deliveries("default", 1, start=9), after) == 1
    assert {held.next().id, held.next().id} == {"emails0", "default9"}
