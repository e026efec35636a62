"""Fleet-wide limits in the scripts (lib/limits.lua): slots taken at the claim, freed by every settle, waiters woken."""

import dataclasses
import itertools
import time

import pytest

from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.steps.replies import LIMITED, RUN, NewTask
from tests.helpers import ack, keys, reap, where_is

MSG = '{"v":1,"args":[],"kwargs":{}}'
PATH = "tests.testapp.tasks.noop"


@pytest.fixture(autouse=True)
def _registered(broker):
    for w in ("w1", "w2"):
        broker.heartbeat(["default"], w, {})


def put(broker, *ids, limits="2||", priority=0, delay=0):
    return broker.enqueue("default", [NewTask(i, MSG, PATH, delay, "", priority, limits) for i in ids])


def codes(broker, n=10, worker="w1"):
    return {d.id: d.code for d in broker.fetch("default", worker, n)}


def slots(r):
    return set(r.zrange(keys().task_slots(PATH), 0, -1))


def blocked(r):
    return r.lrange(keys().task_blocked(PATH), 0, -1)


def test_over_the_limit_waits_in_redis_unclaimed(r, broker):
    put(broker, "a", "b", "c", "d")
    got = codes(broker)
    assert got == {"a": RUN, "b": RUN, "c": LIMITED, "d": LIMITED}
    assert slots(r) == {"a", "b"} and blocked(r) == ["d", "c"]  # c waits longest: taken first
    for i in ("c", "d"):
        assert r.hget(keys().task(i), "deliveries") == "0" and not r.hget(keys().task(i), "workers")  # not an attempt
        assert r.get(keys().status(i)) is None and where_is(r, i) == ["blocked"]  # in no worker
    assert r.lrange(keys().processing("w1"), 0, -1) == ["b", "a"]
    assert r.hget(keys().limits, PATH) == "2"


def test_an_ack_frees_its_slot_and_wakes_the_longest_waiting(r, broker):
    put(broker, "a", "b", "c", "d")
    codes(broker)
    ack(broker, "default", "w1", "a", "1")
    assert slots(r) == {"b"} and blocked(r) == ["d"] and r.lrange(keys().pending, 0, -1) == ["c"]
    assert codes(broker, worker="w2") == {"c": RUN} and slots(r) == {"b", "c"}
    assert r.hget(keys().task("a"), "slot") is None


@pytest.mark.parametrize("settle", ["retry", "bury", "release", "reap"])
def test_every_way_a_task_stops_frees_its_slot(r, broker, settle):
    put(broker, "a", "b", "c")
    codes(broker, worker="w2")
    err = {"exc": "x", "msg": "m", "tb": ""}
    if settle == "retry":
        broker.retry("default", "w2", "a", 60_000, err)
    elif settle == "bury":
        broker.bury("default", "w2", "a", err, "failed", True)
    elif settle == "release":
        broker.release("default", "w2", ["a"])
    else:
        r.zadd(keys().workers, {"w2": 1})  # w2 died long ago: both its slots come back
        r.hset(keys().alive, "w1", 1)
        broker.heartbeat(["default"], "w1", {})
        assert reap(broker, "default", "w1")[0] == 2
    freed = {"a", "b"} if settle == "reap" else {"a"}
    assert slots(r) == {"b", "a"} - freed
    assert "c" in r.lrange(keys().pending, 0, -1) and blocked(r) == []


def test_a_slot_whose_holder_stopped_running_is_swept(r, broker):
    """A holder whose guard is gone (lost some way no script saw) does not hold its slot forever."""
    put(broker, "a", "b", "c")
    codes(broker)
    r.delete(keys().status("a"))
    assert codes(broker, worker="w2") == {} and blocked(r) == ["c"]  # nothing pending: c still waits...
    put(broker, "d")
    assert codes(broker, worker="w2") == {"d": RUN} and slots(r) == {"b", "d"}


def test_a_raised_limit_fills_up_from_the_waiters(r, broker):
    put(broker, "a", "b", "c", "d", limits="1||")
    assert list(codes(broker).values()).count(RUN) == 1 and len(blocked(r)) == 3
    put(broker, "e", limits="3||")  # a deploy raised it to 3
    assert codes(broker, worker="w2") == {"e": RUN}
    assert len(r.lrange(keys().pending, 0, -1)) == 1  # one waiter woken for the free slot


def test_a_rate_limit_books_evenly_spaced_starts(r, broker):
    put(broker, *[f"t{i}" for i in range(5)], limits="|4|1000")  # 4/s: one start per 250 ms
    got = codes(broker)
    assert got == {"t0": RUN, "t1": LIMITED, "t2": LIMITED, "t3": LIMITED, "t4": LIMITED}
    due = dict(r.zrange(keys().scheduled, 0, -1, withscores=True))
    gaps = sorted(due.values())
    assert [round(b - a) for a, b in itertools.pairwise(gaps)] == [250, 250, 250]
    for i in ("t1", "t2", "t3", "t4"):
        assert r.hget(keys().task(i), "deliveries") == "0" and r.hget(keys().task(i), "state") == "scheduled"
    time.sleep(0.3)
    broker.promote("default")
    assert codes(broker) == {"t1": RUN}  # booked: it starts without asking again
    assert r.zcard(keys().scheduled) == 3 and r.hget(keys().task("t1"), "rl") is None


def test_a_queue_limit_from_the_options_applies_to_every_task(r, settings):
    options = dataclasses.replace(get_options("default"), max_running=1, rate_limit="")
    broker = Broker(options)
    broker.heartbeat(["default"], "w1", {})
    put(broker, "a", "b", limits="")
    assert codes(broker) == {"a": RUN, "b": LIMITED}
    assert r.zrange(keys().slots, 0, -1) == ["a"] and r.lrange(keys().blocked, 0, -1) == ["b"]
    ack(broker, "default", "w1", "a", "1")
    assert codes(broker) == {"b": RUN}


def test_a_blocked_task_can_be_cancelled(r, broker):
    put(broker, "a", "b", "c")
    codes(broker)
    assert broker.operator.cancel("default", ["c"], "test") == ["cancelled"]
    assert where_is(r, "c") == ["dead"] and blocked(r) == []


def test_a_waiter_keeps_its_priority_when_woken(r, broker):
    put(broker, "a", "b", limits="1||")
    put(broker, "hi", limits="1||", priority=50)
    assert codes(broker) == {"hi": RUN, "a": LIMITED, "b": LIMITED}
    ack(broker, "default", "w1", "hi", "1")
    assert r.lrange(keys().pending, 0, -1) == ["a"]


@pytest.mark.parametrize("maxr", ["x", "0", "-2", "1.5"])
def test_a_bad_stored_limit_is_no_limit(r, broker, maxr):
    """Another producer's garbage in 'maxr' never strands a task."""
    put(broker, "a", "b", limits="")
    for i in ("a", "b"):
        r.hset(keys().task(i), "maxr", maxr)
    assert codes(broker) == {"a": RUN, "b": RUN}
