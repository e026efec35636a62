"""Each stream entry is judged on its own: a poison entry is buried, its batch goes on, the keeper keeps trimming."""

from __future__ import annotations

import threading
from typing import Any

from django_redisq.events.publish import publish
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.keys import QueueKeys, TopicKeys
from django_redisq.store.topics import Entry
from django_redisq.worker.background import pump as pump_module
from django_redisq.worker.background.pump import MAX_DELIVERIES, EventPump
from tests.events.conftest import H, events_settings, runs
from tests.helpers import wait_for

STREAM = TopicKeys("t1").stream
SUB = {"b": {"topic": "t1", "task": H + "billing"}}
DEEP = '{"a": ' + "[" * 50_000 + "]" * 50_000 + "}"
"""A JSON object nested too deeply for json.loads: RecursionError, not ValueError (at 5,000 levels Python 3.13 decodes
it, and encoding the task's arguments refuses it cleanly; deeper, the decoder itself raises)."""


def _pump(options: Any = None, broker: Broker | None = None, queues: tuple[str, ...] = ("default", "emails")) -> EventPump:
    options = options or get_options()
    return EventPump(options, broker or Broker(options), threading.Event(), "w1", list(queues))


def _dead(r, queue: str = "default") -> dict[str, dict[str, str]]:
    k = QueueKeys(queue)
    return {i: r.hgetall(k.task(i)) for i in r.zrange(k.dead, 0, -1)}


def test_a_deeply_nested_entry_is_buried_and_the_good_ones_around_it_run_once(r, running_worker, monkeypatch):
    monkeypatch.setattr(pump_module, "KEEP_EVERY", 0.05)  # the keeper's rounds (a trim every TRIM_EVERY of them)
    with events_settings(SUB, {"t1": {"MAX_LEN": 1}}):
        first = publish("t1", {"n": 1})  # creates the group
        poison = r.xadd(STREAM, {"p": DEEP})
        last = publish("t1", {"n": 2})
        running_worker()
        assert wait_for(lambda: len(runs(r, "billing")) == 2 and len(_dead(r)) == 1, 30), (runs(r, "billing"), _dead(r))
        assert runs(r, "billing") == {first: 1, last: 1}
        ((dead_id, data),) = _dead(r).items()
        assert dead_id.endswith(poison) and data["reason"] == "bad_event"
        assert "nested too deeply" in data["error"] and poison in data["error"]
        assert wait_for(lambda: r.xpending(STREAM, "b")["pending"] == 0, 10)
        assert wait_for(lambda: r.xlen(STREAM) == 1, 10)  # the keeper still trims (MAX_LEN 1)


class FaultyPump(EventPump):
    """A real pump whose decoding of chosen entries raises what a bad entry or a plain bug can raise."""

    faults: dict[str, BaseException] = {}

    def message(self, sub: Any, task: Any, e: Entry) -> str:
        if e.id in self.faults:
            raise self.faults[e.id]
        return super().message(sub, task, e)


def test_any_exception_while_building_a_task_buries_that_entry_only(r):
    with events_settings(SUB):
        options = get_options()
        pump = FaultyPump(options, Broker(options), threading.Event(), "w1", ["default"])
        pump.join(pump.subs[0])
        ids = [publish("t1", {"n": i}) for i in range(6)]
        FaultyPump.faults = {ids[1]: UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
                             ids[2]: TypeError("unhashable type: 'dict'"), ids[4]: ZeroDivisionError("a plain bug")}
        try:
            pump.pump_once(pump.subs[0], block_ms=0)
        finally:
            FaultyPump.faults = {}
        dead = _dead(r)
        assert {i.split("-", 2)[2] for i in dead} == {ids[1], ids[2], ids[4]}
        assert {d["reason"] for d in dead.values()} == {"bad_event"}
        errors = " ".join(d["error"] for d in dead.values())
        assert "UnicodeEncodeError" in errors and "TypeError" in errors and "ZeroDivisionError: a plain bug" in errors
        assert pump.enqueued == 3 and r.llen(QueueKeys("default").pending) == 3  # the good ones, in the same batch
        assert r.xpending(STREAM, "b")["pending"] == 0  # the whole batch acknowledged


def test_the_delivery_count_is_checked_before_decoding(r):
    """An entry past MAX_DELIVERIES is buried as undeliverable even if decoding it raises (here: too deep)."""
    with events_settings(SUB):
        pump = _pump()
        (sub,) = pump.subs
        pump.join(sub)
        poison = r.xadd(STREAM, {"p": DEEP})
        assert [e.id for e in pump.topics.read("t1", "b", "w1", 10).entries] == [poison]  # delivered, never handled
        for _ in range(MAX_DELIVERIES):  # each claim is one more delivery (a worker that died each time)
            got = pump.topics.claim("t1", "b", "w1", 0, "0-0", 10)
        assert got.entries[0].deliveries == MAX_DELIVERIES + 1
        pump.handle(sub, got.generation, got.entries)
        ((dead_id, data),) = _dead(r).items()
        assert data["reason"] == "event_undeliverable" and dead_id == sub.task_id(0, poison)
        assert r.xpending(STREAM, "b")["pending"] == 0


def test_one_subscriptions_failure_stops_neither_anothers_reclaim_nor_the_trims(r):
    subs = {"broken": {"topic": "ta", "task": H + "billing"}, "ok": {"topic": "tb", "task": H + "plain"}}
    with events_settings(subs, {"tb": {"MAX_LEN": 2}}):
        options = get_options()
        dead = _pump()
        for s in dead.subs:
            dead.join(s)
        for i in range(5):
            publish("tb", {"n": i})
        assert len(dead.topics.read("tb", "ok", "w1", 100).entries) == 5  # a worker that died before enqueueing them
        r.delete(TopicKeys("ta").stream)
        r.set(TopicKeys("ta").stream, "not a stream")  # every step on topic ta now fails (WRONGTYPE)
        keeper = EventPump(options, Broker(options), threading.Event(), "w2", ["default"])
        keeper.min_idle_ms = 0
        assert keeper.keep_once(trim=True) == 2  # ta's reclaim and ta's trim failed, and were logged
        assert r.llen(QueueKeys("default").pending) == 5  # ok's entries reclaimed and enqueued all the same
        assert r.xpending(TopicKeys("tb").stream, "ok")["pending"] == 0
        assert r.xlen(TopicKeys("tb").stream) == 2  # and tb trimmed


def test_a_failed_enqueue_into_one_partition_loses_none_of_the_others(r):
    from tests.events.test_fanout import FailingBroker

    with events_settings(SUB, QUEUE_OPTIONS={"default": {"PARTITIONS": 2}}):
        options = get_options()
        broker = FailingBroker(options, fail_queue="default~1")
        pump = _pump(options, broker)
        pump.join(pump.subs[0])
        ids = [publish("t1", {"n": i}) for i in range(20)]
        pump.pump_once(pump.subs[0], block_ms=0)
        assert broker.tries == 1
        pending = {p["message_id"] for p in r.xpending_range(STREAM, "b", "-", "+", 100)}
        stored = r.lrange(QueueKeys("default").pending, 0, -1)  # partition 0; partition 1 ("default~1") refused
        assert pending and stored and len(pending) + len(stored) == 20  # each event: a task, or pending for a retry
        assert {i.split("-", 2)[2] for i in stored} == set(ids) - pending
