"""Priorities in the scripts (lib/ready.lua): order, FIFO within a priority, wake-ups, and every way back to ready."""

import threading

import pytest

from django_redisq.exceptions import QueuePaused
from django_redisq.store.reads.priority import MARKER, ready_page
from django_redisq.store.steps.replies import RUN, NewTask
from tests.helpers import ack, keys, reap, where_is


@pytest.fixture(autouse=True)
def _registered(broker):
    for w in ("w1", "w2"):
        broker.heartbeat(["default"], w, {})


def put(broker, *items, delay=0):
    """Enqueue ``(id, priority)`` pairs of a plain message, in one call."""
    return broker.enqueue("default", [NewTask(i, '{"v":1,"args":[],"kwargs":{}}', "tests.testapp.tasks.noop", delay, "", p) for i, p in items])


def order(broker, n=100, worker="w1"):
    return [d.id for d in broker.fetch("default", worker, n)]


def test_higher_priorities_first_fifo_within_one(r, broker):
    put(broker, ("low1", -5), ("d1", 0), ("high1", 50), ("d2", 0), ("top", 100), ("high2", 50), ("low2", -5), ("bottom", -100))
    assert order(broker) == ["top", "high1", "high2", "d1", "d2", "low1", "low2", "bottom"]


def test_a_default_priority_queue_uses_the_list_alone(r, broker):
    """Priority 0 costs nothing new: no prioritized key, no field, no counter."""
    put(broker, ("a", 0), ("b", 0))
    k = keys()
    assert r.lrange(k.pending, 0, -1) == ["b", "a"]
    assert not r.exists(k.prioritized) and not r.exists(k.prioseq) and r.hget(k.task("a"), "prio") is None


def test_a_batch_fetch_is_in_priority_order_across_calls(r, broker):
    put(broker, *[(f"d{i}", 0) for i in range(3)])
    put(broker, ("h", 10))
    assert order(broker, 2) == ["h", "d0"]
    put(broker, ("h2", 1), ("l", -1))
    assert order(broker) == ["h2", "d1", "d2", "l"]


def test_a_prioritized_task_wakes_a_worker_blocked_on_the_list(r, broker):
    """The marker: a BLMOVE on the empty list returns, and the fetch takes the prioritized task instead."""
    got: list[str | None] = []
    waiter = threading.Thread(target=lambda: got.append(broker.wait("default", "w1", 5)))
    waiter.start()
    put(broker, ("urgent", 90))
    waiter.join(5)
    assert got == [MARKER]
    [d] = broker.fetch("default", "w1", 0, moved_id=MARKER)  # the caller counted the moved id as one
    assert (d.id, d.code) == ("urgent", RUN)
    assert r.llen(keys().pending) == 0 and r.lrange(keys().processing("w1"), 0, -1) == ["urgent"]


def test_markers_wake_one_worker_each_and_never_mix_with_ids(r, broker):
    put(broker, ("p1", 5), ("p2", 5), ("p3", 5))
    k = keys()
    assert r.lrange(k.pending, 0, -1) == [MARKER] * 3  # three blocked workers may wake
    put(broker, ("d", 0))  # an id wakes anyone: the markers go
    assert r.lrange(k.pending, 0, -1) == ["d"]
    put(broker, ("p4", 5))
    assert r.lrange(k.pending, 0, -1) == ["d"]  # the list has an id: no marker needed
    assert order(broker) == ["p1", "p2", "p3", "p4", "d"]


def test_markers_stay_bounded_under_a_steady_stream_of_priorities(r, broker):
    """Each task taken straight from the set leaves its marker: they stop at MARKERS_MAX, and a fetch that reaches
    the list drops them all (the state machine found them piling up one per task)."""
    from django_redisq.store.reads.priority import MARKERS_MAX

    for i in range(3 * MARKERS_MAX):
        put(broker, (f"p{i}", 5))
        assert order(broker, 1) == [f"p{i}"]
    assert r.lrange(keys().pending, 0, -1) == [MARKER] * MARKERS_MAX
    assert order(broker) == [] and r.llen(keys().pending) == 0


def test_an_id_pushed_onto_the_most_markers_there_can_be_drops_them_all(r, broker):
    """enqueue looks for markers only while the LIST, its id in, is at most MARKERS_MAX + 1 long: the boundary."""
    from django_redisq.store.reads.priority import MARKERS_MAX

    for i in range(2 * MARKERS_MAX):
        put(broker, (f"p{i}", 5))
        assert order(broker, 1) == [f"p{i}"]
    assert r.llen(keys().pending) == MARKERS_MAX
    put(broker, ("d", 0))
    assert r.lrange(keys().pending, 0, -1) == ["d"]
    put(broker, ("e", 0))
    assert r.lrange(keys().pending, 0, -1) == ["e", "d"]


def test_a_moved_default_id_yields_to_a_higher_priority(r, broker):
    put(broker, ("d0", 0), ("d1", 0))
    assert broker.wait("default", "w1", 0.1) == "d0"
    put(broker, ("h", 20))
    [d] = broker.fetch("default", "w1", 0, moved_id="d0")
    assert d.id == "h"
    assert r.lrange(keys().pending, 0, -1) == ["d1", "d0"]  # d0 is the next of priority 0 again
    assert order(broker) == ["d0", "d1"]


def test_markers_are_dropped_by_a_fetch_that_reaches_the_list(r, broker):
    put(broker, ("p", 3), ("n", -3))
    assert order(broker) == ["p", "n"]
    assert r.llen(keys().pending) == 0


def test_promote_keeps_the_priority(r, broker):
    put(broker, ("later", 60), delay=1)
    put(broker, ("now", 0))
    import time

    time.sleep(0.02)
    broker.promote("default")
    assert order(broker) == ["later", "now"]


def test_reap_and_release_give_back_to_the_front_of_the_priority(r, broker):
    put(broker, ("a", 7), ("b", 7), ("c", 7), ("d", 0))
    assert order(broker, 1, "w1") == ["a"]
    broker.release("default", "w1", ["a"])  # never started: the front of priority 7 again
    assert order(broker, 2, "w2") == ["a", "b"]
    r.zadd(keys().workers, {"w2": 1})  # w2 fell silent long ago
    broker.heartbeat(["default"], "w1", {})
    r.hset(keys().alive, "w1", 1)
    tasks, _ = reap(broker, "default", "w1")
    assert tasks == 2
    got = order(broker, 10, "w1")
    # both come back before the rest of priority 7 (among themselves, in id order)
    assert sorted(got[:2]) == ["a", "b"] and got[2:] == ["c", "d"]


def test_replay_keeps_the_priority(r, broker):
    put(broker, ("h", 40), ("d", 0))
    assert order(broker, 2) == ["h", "d"]
    broker.bury("default", "w1", "h", {"exc": "x", "msg": "m", "tb": ""}, "failed", True)
    ack(broker, "default", "w1", "d", "null")
    put(broker, ("d2", 0))
    assert broker.operator.replay("default", ["h"]) == 1
    assert order(broker) == ["h", "d2"]


def test_a_fenced_fetch_hands_prioritized_ids_back_to_the_set(r, broker):
    put(broker, ("h", 30))
    assert broker.wait("default", "w1", 0.1) == MARKER
    r.zrem(keys().workers, "w1")
    from django_redisq.exceptions import Fenced

    with pytest.raises(Fenced):
        broker.fetch("default", "w1", 5, moved_id=MARKER)
    assert where_is(r, "h") == ["pending"] and r.llen(keys().processing("w1")) == 0


def test_a_paused_fetch_drops_the_marker_and_keeps_the_task(r, broker):
    put(broker, ("h", 30))
    assert broker.wait("default", "w1", 0.1) == MARKER
    r.set(keys().paused, "1|ops")
    with pytest.raises(QueuePaused):
        broker.fetch("default", "w1", 0, moved_id=MARKER)
    assert r.llen(keys().processing("w1")) == 0 and where_is(r, "h") == ["pending"]
    r.delete(keys().paused)
    assert order(broker) == ["h"]


def test_cancel_takes_a_prioritized_task_out_in_one_step(r, broker):
    put(broker, ("h", 30), ("d", 0))
    assert broker.operator.cancel("default", ["h"], "test") == ["cancelled"]
    assert where_is(r, "h") == ["dead"] and order(broker) == ["d"]


@pytest.mark.parametrize("value", ["high", "500", "2.5", ""])
def test_a_bad_stored_priority_counts_as_the_default(r, broker, value):
    """Another producer's bad 'prio' never strands its task: it is ready at priority 0."""
    put(broker, ("x", 0), delay=1)
    r.hset(keys().task("x"), "prio", value)
    import time

    time.sleep(0.02)
    broker.promote("default")
    assert r.lrange(keys().pending, 0, -1) == ["x"] and order(broker) == ["x"]


def test_ready_page_lists_in_running_order(r, broker):
    put(broker, ("l", -1), ("d0", 0), ("h", 9), ("d1", 0), ("h2", 9), ("n", -50))
    total, page = ready_page(r, keys(), 0, 50)
    assert total == 6 and page == [("h", 9), ("h2", 9), ("d0", 0), ("d1", 0), ("l", -1), ("n", -50)]
    for start in range(6):
        assert ready_page(r, keys(), start, 2) == (6, page[start : start + 2])
    r.delete(keys().pending)
    put(broker, ("p", 1))  # only markers in the list: not counted
    assert ready_page(r, keys(), 0, 50)[0] == 5


def test_a_marker_named_to_release_is_dropped_not_handed_back(r, broker):
    """The sweep hands back ids in a worker's list it never heard of: a marker a BLMOVE moved whose
    claim never reached Redis is one of them. It is no task: release drops it from the list, counts
    nothing, and never pushes it to pending beside ids (the LIST holds markers or ids, never both)."""
    put(broker, ("h", 5))
    assert broker.wait("default", "w1", 0.1) == MARKER  # the claim that follows is lost
    put(broker, ("d", 0))
    assert broker.release("default", "w1", [MARKER]) == 0
    k = keys()
    assert r.llen(k.processing("w1")) == 0 and r.lrange(k.pending, 0, -1) == ["d"]
    assert order(broker) == ["h", "d"]
