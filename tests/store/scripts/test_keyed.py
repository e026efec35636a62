"""Keys in the scripts: per-key limits (lib/limits.lua), fair queues (lib/fair.lua), debounce and throttle (lib/store.lua)."""

import dataclasses
import json

from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.steps.replies import LIMITED, RUN, NewTask
from tests.helpers import ack, keys, reap, where_is

MSG = '{"v":1,"args":[],"kwargs":{}}'
PATH = "tests.testapp.tasks.noop"


def spec(**kw) -> str:
    return json.dumps(kw)


def put(broker, *ids, limits="", idem="", priority=0, msg=MSG):
    return broker.enqueue("default", [NewTask(i, msg, PATH, 0, idem, priority, limits) for i in ids])


def fetch(broker, n=10, worker="w1"):
    return [(d.id, d.code) for d in broker.fetch("default", worker, n)]


def fair_broker() -> Broker:
    o = get_options("default")
    return Broker(dataclasses.replace(o, queue_overrides={"default": {"FAIR": True}}))


def test_a_limit_key_counts_max_running_per_key(r, broker):
    broker.heartbeat(["default"], "w1", {})
    put(broker, "a1", "a2", "a3", limits=spec(m="2", lk="acct-a"))
    put(broker, "b1", "b2", limits=spec(m="2", lk="acct-b"))
    got = dict(fetch(broker))
    assert got == {"a1": RUN, "a2": RUN, "a3": LIMITED, "b1": RUN, "b2": RUN}
    k = keys()
    assert set(r.zrange(k.task_slots(PATH + "#acct-a"), 0, -1)) == {"a1", "a2"}
    assert r.lrange(k.task_blocked(PATH + "#acct-a"), 0, -1) == ["a3"] and where_is(r, "a3") == ["blocked"]
    assert r.zrange(k.keyload, 0, -1, withscores=True) == [(PATH + "#acct-b", 2.0), (PATH + "#acct-a", 3.0)]
    assert not r.exists(k.task_slots(PATH)) and r.hget(k.limits, PATH) == "2"  # one limit per task, not per key
    ack(broker, "default", "w1", "a1", "1")
    assert r.lrange(k.pending, 0, -1) == ["a3"] and r.zscore(k.keyload, PATH + "#acct-a") == 1.0
    assert fetch(broker) == [("a3", RUN)]
    for i in ("a2", "a3", "b1", "b2"):
        ack(broker, "default", "w1", i, "1")
    assert not r.exists(k.keyload) and not r.exists(k.task_slots(PATH + "#acct-a"))  # nothing left behind


def test_a_reaped_worker_gives_back_its_per_key_slots(r, broker):
    broker.heartbeat(["default"], "w1", {})
    put(broker, "a1", "a2", limits=spec(m="1", lk="k"))
    assert dict(fetch(broker)) == {"a1": RUN, "a2": LIMITED}
    r.zadd(keys().workers, {"w1": 1})  # its heartbeat long gone
    assert reap(broker, "default")[0] == 1
    assert r.zcard(keys().task_slots(PATH + "#k")) == 0 and set(r.lrange(keys().pending, 0, -1)) == {"a1", "a2"}
    assert r.zscore(keys().keyload, PATH + "#k") is None


def test_a_rate_limit_per_key_spaces_one_key_only(r, broker):
    broker.heartbeat(["default"], "w1", {})
    put(broker, "a1", "a2", limits=spec(r="1|60000", lk="a"))
    put(broker, "b1", limits=spec(r="1|60000", lk="b"))
    assert dict(fetch(broker)) == {"a1": RUN, "a2": LIMITED, "b1": RUN}
    assert r.exists(keys().prefix + "rate:" + PATH + "#a") and r.zscore(keys().scheduled, "a2")


def test_a_fair_queue_serves_its_keys_round_robin(r):
    broker = fair_broker()
    broker.heartbeat(["default"], "w1", {})
    put(broker, *[f"big{i}" for i in range(50)], limits=spec(fk="big"))
    put(broker, "s1", "s2", limits=spec(fk="small"))
    put(broker, "t1", limits=spec(fk="tiny"))
    k = keys()
    assert r.lrange(k.fair, 0, -1) == ["big", "small", "tiny"] and r.get(k.fairn) == "53"
    assert [i for i, _ in fetch(broker, 6)] == ["big0", "s1", "t1", "big1", "s2", "big2"]
    assert r.lrange(k.fair, 0, -1) == ["big"] and r.get(k.fairn) == "47"
    assert broker.nothing_left(["default"], "w2") is False


def test_priorities_order_within_a_fairness_key(r):
    broker = fair_broker()
    broker.heartbeat(["default"], "w1", {})
    put(broker, "low", limits=spec(fk="a"))
    put(broker, "high", limits=spec(fk="a"), priority=10)
    put(broker, "b", limits=spec(fk="b"))
    assert [i for i, _ in fetch(broker, 3)] == ["high", "b", "low"]
    assert not r.exists(keys().fair) and r.get(keys().fairn) == "0"


def test_a_blocked_worker_is_woken_for_a_fair_task(r):
    broker = fair_broker()
    broker.heartbeat(["default"], "w1", {})
    put(broker, "x", limits=spec(fk="a"))
    moved = broker.wait("default", "w1", timeout=1)
    assert moved == "~redisq:wake"
    assert broker.fetch("default", "w1", 0, moved_id=moved)[0].id == "x"


def test_cancel_takes_a_fair_task_out_of_its_key(r):
    broker = fair_broker()
    put(broker, "x", limits=spec(fk="a"))
    assert broker.operator.cancel("default", ["x"], who="cli") == ["cancelled"]
    assert not r.exists(keys().fair) and not r.exists(keys().prefix + "fair:a")


def test_debounce_keeps_one_task_with_the_last_message_due_after_the_last_call(r, broker):
    first = put(broker, "d1", limits=spec(d=1000), idem="reindex-42", msg='{"v":1,"args":[1],"kwargs":{}}')
    due = r.zscore(keys().scheduled, "d1")
    second = put(broker, "d2", limits=spec(d=5000), idem="reindex-42", msg='{"v":1,"args":[2],"kwargs":{}}')
    assert first[0].duplicate_of is None and second[0].duplicate_of == "d1"
    assert not r.exists(keys().task("d2")) and json.loads(r.hget(keys().task("d1"), "msg"))["args"] == [2]
    assert r.zscore(keys().scheduled, "d1") >= due + 3900  # moved to 5 s after the last call
    assert r.hget(keys().task("d1"), "idem") == "" and not r.exists(keys().idem("reindex-42"))  # not a plain idempotency key
    r.zadd(keys().scheduled, {"d1": 0})
    broker.promote("default")
    third = put(broker, "d3", limits=spec(d=1000), idem="reindex-42")
    assert third[0].duplicate_of is None  # the burst's task left the schedule: a new burst


def test_throttle_joins_calls_inside_the_window(r, broker):
    got = [put(broker, f"t{i}", limits=spec(t=60000), idem="hook-7")[0].duplicate_of for i in range(3)]
    assert got == [None, "t0", "t0"] and where_is(r, "t0") == ["pending"]
    assert 59000 < r.pttl(keys().prefix + "throttle:hook-7") <= 60000
    r.delete(keys().prefix + "throttle:hook-7")  # the window is over
    assert put(broker, "t9", limits=spec(t=60000), idem="hook-7")[0].duplicate_of is None


def test_an_idempotency_key_alone_keeps_its_meaning(r, broker):
    put(broker, "i1", idem="order-1")
    assert put(broker, "i2", idem="order-1")[0].duplicate_of == "i1" and r.get(keys().idem("order-1")) == "i1"


def test_keyed_tasks_are_not_plain_at_fetch(r, broker):
    broker.heartbeat(["default"], "w1", {})
    put(broker, "p")
    put(broker, "k", limits=spec(r="100|1000", lk="a"))
    assert {d.id: d.plain for d in broker.fetch("default", "w1", 5)} == {"p": True, "k": False}
