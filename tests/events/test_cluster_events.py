"""Events on the suite's 6-node Redis Cluster: publish, the group reads, reclaim, trim and rewind, each in its topic's slot."""

from __future__ import annotations

from typing import Any

import pytest

from django_redisq.events.publish import publish
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.keys import QueueKeys, TopicKeys
from django_redisq.store.topics import Topics
from tests.events.conftest import HANDLERS, THREE, runs
from tests.helpers import wait_for

pytestmark = pytest.mark.cluster
SUBS = {**THREE, "audit-refunds": {"topic": "orders.refunded", "task": "tests.testapp.event_tasks.refund"}}


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    """Fast heartbeats, the subscriptions, and a short stream for the trim."""
    return {"HEARTBEAT_INTERVAL": 0.2, "WORKER_TIMEOUT": 1.5, "SUBSCRIPTIONS": SUBS, "TOPICS": {"orders.placed": {"MAX_LEN": 10}}}


@pytest.fixture(autouse=True)
def effects_on_the_single_server(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The handlers' effects go to the single Redis (``r``)."""
    monkeypatch.setenv("REDISQ_CHAOS_EFFECTS_URL", redis_url)


def test_publish_and_consume_on_the_cluster(cluster, r, running_worker):
    topics = ("orders.placed", "orders.refunded")
    assert len({cluster.keyslot(TopicKeys(t).stream) for t in topics}) == 2  # a topic is a slot of its own
    placed = [publish("orders.placed", {"n": i}) for i in range(150)]
    refunded = [publish("orders.refunded", {"n": i}) for i in range(50)]
    running_worker()
    assert wait_for(lambda: all(len(runs(r, h)) == 150 for h in HANDLERS) and len(runs(r, "refund")) == 50, 60), \
        {h: len(runs(r, h)) for h in (*HANDLERS, "refund")}
    assert set(runs(r, "billing")) == set(placed) and set(runs(r, "audit")) == set(placed)
    assert set(runs(r, "refund")) == set(refunded)
    assert {n for h in (*HANDLERS, "refund") for n in runs(r, h).values()} == {1}
    for q in ("default", "emails", "low"):
        assert cluster.zcard(QueueKeys(q).dead) == 0


def test_reclaim_trim_and_rewind_on_the_cluster(cluster, r):
    import threading

    from django_redisq.worker.background.pump import EventPump

    options = get_options()
    broker = Broker(options)
    topics = Topics(broker)
    ids = [publish("orders.placed", {"n": i}) for i in range(30)]
    topics.read("orders.placed", "billing-on-order", "dead-worker", 100)  # read, never acknowledged
    pump = EventPump(options, broker, threading.Event(), "live", ["default", "emails", "low"])
    billing = next(s for s in pump.subs if s.name == "billing-on-order")
    assert pump.reclaim(billing, min_idle_ms=0) == 30
    assert cluster.llen(QueueKeys("default").pending) == 30
    for sub in pump.subs:
        if sub.topic == "orders.placed" and sub.name != "billing-on-order":
            pump.handle(sub, 0, topics.read(sub.topic, sub.name, "live", 100).entries)
    placed = next(t for t in pump.retention if t.name == "orders.placed")
    assert pump.trim(placed) == (20, 0)
    assert topics.rewind("orders.placed", "billing-on-order", "0-0") == 1
    again = topics.read("orders.placed", "billing-on-order", "live", 100)
    assert again.generation == 1 and [e.id for e in again.entries] == ids[20:]
    from django_redisq.ops.topics import TopicOps

    rows = {row.name: row for row in TopicOps(options).rows()}  # what redisq topics and the admin read, on the cluster
    assert (rows["billing-on-order"].generation, rows["billing-on-order"].pending, rows["billing-on-order"].lag) == (1, 10, 0)
    assert rows["audit-refunds"].exists is False
