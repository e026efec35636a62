"""Each subscription gets every event once; later subscriptions, rewinds, bad and undeliverable entries."""

from __future__ import annotations

import json
import threading
from typing import Any

from django_redisq.events.publish import publish
from django_redisq.events.subscriptions import subscriptions_of
from django_redisq.exceptions import RedisError
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.keys import QueueKeys, TopicKeys
from django_redisq.store.steps.replies import NewTask
from django_redisq.store.topics import Topics
from django_redisq.worker.background.pump import MAX_DELIVERIES, EventPump
from tests.events.conftest import HANDLERS, THREE, H, events_settings, runs
from tests.helpers import wait_for

STREAM = TopicKeys("orders.placed").stream


def test_three_subscriptions_each_get_every_event_once(r, running_worker):
    with events_settings(THREE):
        ids = [publish("orders.placed", {"n": i}) for i in range(300)]
        running_worker()
        assert wait_for(lambda: all(len(runs(r, h)) == 300 for h in HANDLERS), 60)
        for h in HANDLERS:
            assert set(runs(r, h)) == set(ids)
            assert set(runs(r, h).values()) == {1}, h
            assert sorted(int(n) for n in r.lrange(f"events:seen:{h}", 0, -1)) == list(range(300))
        # every entry acknowledged by every group: nothing pending, nothing lagging
        assert {g["name"] for g in r.xinfo_groups(STREAM)} == set(THREE)
        stats = Topics(Broker(get_options())).stats("orders.placed", list(THREE))  # lag: Redis 7's, or counted on 6.2
        assert all(s.exists and s.pending == 0 and s.lag == 0 for s in stats.values())


def test_the_task_gets_the_payload_and_only_the_keywords_it_takes(r, running_worker):
    subs = {"p": {"topic": "t1", "task": H + "plain"}, "m": {"topic": "t1", "task": H + "mail"}}
    with events_settings(subs):
        event_id = publish("t1", {"n": 7, "nested": {"a": [1, 2]}})
        running_worker()
        assert wait_for(lambda: runs(r, "plain") == {"7": 1} and runs(r, "mail") == {event_id: 1}, 30)


def test_latest_starts_at_the_first_publish_or_worker_and_earliest_gets_the_retained_history(r, running_worker):
    with events_settings({"billing-on-order": THREE["billing-on-order"]}, {"orders.placed": {}}):
        early = [publish("orders.placed", {"n": i}) for i in range(5)]
    # later, two subscriptions are added: one from the latest event on, one with the history
    later = {**THREE, "audit": {**THREE["audit"]}}
    with events_settings(later):
        late = [publish("orders.placed", {"n": i}) for i in range(5, 8)]
        running_worker()
        assert wait_for(lambda: len(runs(r, "audit")) == 8 and len(runs(r, "billing")) == 8 and len(runs(r, "mail")) == 3, 30)
        assert set(runs(r, "audit")) == set(early + late)
        assert set(runs(r, "mail")) == set(late)  # "latest": created by the first publish that knew it
        assert set(runs(r, "audit").values()) == {1}


def test_a_rewind_replays_as_new_tasks_and_each_generation_runs_once(r, running_worker):
    with events_settings(THREE):
        ids = [publish("orders.placed", {"n": i}) for i in range(20)]
        w = running_worker()
        assert wait_for(lambda: len(runs(r, "billing")) == 20, 30)
        topics = Topics(Broker(get_options()))
        assert topics.rewind("orders.placed", "billing-on-order", "0-0") == 1
        assert wait_for(lambda: set(runs(r, "billing").values()) == {2}, 30)
        assert runs(r, "mail") == dict.fromkeys(ids, 1)  # only the rewound subscription replays
        done = {k for k in r.scan_iter(match="redisq:{default}:t:*")}
        gens = {k.split(":t:")[1].split("-")[1] for k in done}
        assert gens == {"0", "1"}
        w.request_stop()


def test_an_entry_that_is_not_a_json_object_is_dead_lettered_with_the_reason(r, running_worker):
    with events_settings({"p": {"topic": "t1", "task": H + "plain"}}):
        publish("t1", {"n": 1})  # creates the group
        r.xadd(TopicKeys("t1").stream, {"p": "[1, 2]"})  # a foreign producer's list
        r.xadd(TopicKeys("t1").stream, {"other": "x"})  # no payload at all
        publish("t1", {"n": 2})
        running_worker()
        k = QueueKeys("default")
        assert wait_for(lambda: r.zcard(k.dead) == 2 and len(runs(r, "plain")) == 2, 30)
        reasons = {r.hget(k.task(i), "reason") for i in r.zrange(k.dead, 0, -1)}
        assert reasons == {"bad_event"}
        assert any("not a JSON object" in r.hget(k.task(i), "error") for i in r.zrange(k.dead, 0, -1))
        assert wait_for(lambda: r.xpending(TopicKeys("t1").stream, "p")["pending"] == 0, 10)


class FailingBroker(Broker):
    """A real broker whose enqueue into one queue fails, as a Redis refusing that slot would."""

    def __init__(self, *args: Any, fail_queue: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fail_queue, self.tries = fail_queue, 0

    def enqueue(self, queue: str, items: Any) -> Any:
        if queue == self.fail_queue:
            self.tries += 1
            raise RedisError("injected: the queue's master refuses writes")
        return super().enqueue(queue, items)


def test_an_entry_that_keeps_failing_to_become_a_task_is_dead_lettered_not_retried_forever(r):
    with events_settings({"p": {"topic": "t1", "task": H + "plain"}}, WORKER_TIMEOUT=1.0, HEARTBEAT_INTERVAL=0.2):
        options = get_options()
        broker = FailingBroker(options, fail_queue="default")
        pump = EventPump(options, broker, threading.Event(), "w1", ["default"])
        pump.join(pump.subs[0])
        event_id = publish("t1", {"n": 1})
        pump.pump_once(pump.subs[0], block_ms=0)
        assert broker.tries == 1
        assert r.xpending(TopicKeys("t1").stream, "p")["pending"] == 1  # left pending, not acknowledged
        k = QueueKeys("default")
        for _ in range(MAX_DELIVERIES + 2):  # each keep reclaims it once (idle 0 here), Redis counts the delivery
            pump.reclaim(pump.subs[0], min_idle_ms=0)
            if r.zcard(k.dead):
                break
        assert broker.tries == MAX_DELIVERIES  # tried once per delivery, then buried: bounded
        (dead_id,) = r.zrange(k.dead, 0, -1)
        assert dead_id == subscriptions_of(options)[0].task_id(0, event_id)
        data = r.hgetall(k.task(dead_id))
        assert data["reason"] == "event_undeliverable"
        assert "injected: the queue's master refuses writes" in data["error"]
        assert json.loads(data["msg"])["args"] == [{"n": 1}]
        assert r.xpending(TopicKeys("t1").stream, "p")["pending"] == 0
        pump.reclaim(pump.subs[0], min_idle_ms=0)
        assert broker.tries == MAX_DELIVERIES


def test_a_dead_consumers_pending_entries_are_reclaimed_past_the_first_window_and_never_enqueued_twice(r):
    from django_redisq.worker.background import pump as pump_module

    with events_settings({"p": {"topic": "t1", "task": H + "plain"}}):
        options = get_options()
        broker = Broker(options)
        dead = EventPump(options, broker, threading.Event(), "dead-worker", ["default"])
        dead.join(dead.subs[0])
        ids = [publish("t1", {"n": i}) for i in range(3 * pump_module.CLAIM_WINDOW + 7)]
        topics = Topics(broker)
        # the dead worker read them all; it enqueued the first 10 and died before its XACK
        got = topics.read("t1", "p", "dead-worker", 10_000)
        assert len(got.entries) == len(ids)
        items = [NewTask(dead.subs[0].task_id(0, e.id), dead.message(dead.subs[0], dead._tasks["p"], e), H + "plain", 0, "")
                 for e in got.entries[:10]]
        broker.enqueue("default", items)
        live = EventPump(options, broker, threading.Event(), "live-worker", ["default"])
        assert live.reclaim(live.subs[0], min_idle_ms=0) == len(ids)  # the whole pending list, window after window
        k = QueueKeys("default")
        assert r.llen(k.pending) == len(ids)  # the 10 already enqueued were not enqueued twice
        assert r.xpending(TopicKeys("t1").stream, "p")["pending"] == 0


def test_a_running_workers_keeper_reclaims_what_a_dead_consumer_left_pending(r, running_worker):
    with events_settings({"p": {"topic": "t1", "task": H + "plain"}}, WORKER_TIMEOUT=1.0, HEARTBEAT_INTERVAL=0.2):
        for i in range(50):
            publish("t1", {"n": i})
        topics = Topics(Broker(get_options()))
        assert len(topics.read("t1", "p", "died-before-enqueue", 1000).entries) == 50
        running_worker("default")
        # the reader sees nothing new; the keeper reclaims the 50 once idle past WORKER_TIMEOUT
        assert wait_for(lambda: len(runs(r, "plain")) == 50, 30)
        assert set(runs(r, "plain").values()) == {1}
        assert wait_for(lambda: r.xpending(TopicKeys("t1").stream, "p")["pending"] == 0, 10)


def test_a_burst_worker_runs_no_pump_unless_asked(r, make_worker):
    with events_settings({"p": {"topic": "t1", "task": H + "plain"}}):
        assert make_worker().pump is None
        assert make_worker(events=True).pump is not None
        assert make_worker(burst=False).pump is not None


def test_a_pending_walk_longer_than_one_call_goes_on_where_it_stopped(r, monkeypatch):
    from django_redisq.worker.background import pump as pump_module

    monkeypatch.setattr(pump_module, "CLAIM_WINDOWS", 1)
    with events_settings({"p": {"topic": "t1", "task": H + "plain"}}):
        options = get_options()
        broker = Broker(options)
        live = EventPump(options, broker, threading.Event(), "live-worker", ["default"])
        live.join(live.subs[0])
        for i in range(2 * pump_module.CLAIM_WINDOW + 7):
            publish("t1", {"n": i})
        Topics(broker).read("t1", "p", "dead-worker", 10_000)
        taken = [live.reclaim(live.subs[0], min_idle_ms=0) for _ in range(4)]
        assert taken == [pump_module.CLAIM_WINDOW, pump_module.CLAIM_WINDOW, 7, 0]
        assert r.llen(QueueKeys("default").pending) == 2 * pump_module.CLAIM_WINDOW + 7


def test_a_partitioned_queue_gets_each_events_task_once_in_one_partition(r, running_worker):
    subs = {"a": {"topic": "t1", "task": H + "audit"}}
    with events_settings(subs, QUEUE_OPTIONS={"low": {"PARTITIONS": 4}}):
        ids = [publish("t1", {"n": i}) for i in range(60)]
        options = get_options()
        pump = EventPump(options, Broker(options), threading.Event(), "w1", ["low"])
        entries = pump.topics.read("t1", "a", "w1", 1000).entries
        pump.handle(pump.subs[0], 0, entries)
        pump.handle(pump.subs[0], 0, entries)  # a second try of the same entries (a reclaim): dropped by id
        queued = {q: r.llen(QueueKeys(q).pending) for q in options.physical("low")}
        assert sum(queued.values()) == 60 and sum(1 for n in queued.values() if n) > 1  # spread, each once
        running_worker("low")
        assert wait_for(lambda: set(runs(r, "audit")) == set(ids), 30)
        assert set(runs(r, "audit").values()) == {1}
