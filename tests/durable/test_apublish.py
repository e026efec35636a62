"""An async publish (``apublish``) wakes a waiting durable task as ``publish`` does (one Redis; the scripts' cluster cases
run the same wake through the sync path in tests/store/scripts/test_durable_scripts.py)."""

from __future__ import annotations

from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.steps.durable import SCHEDULED
from django_redisq.store.topics.steps import Topics
from django_redisq.store.topics.waiters import Waiter, Waiters
from tests.helpers import keys, seed_processing


def test_an_async_publish_wakes_a_waiter_too(r):
    broker = Broker(get_options("default"))
    import asyncio

    from django_redisq.events.publish import apublish
    from tests.conftest import topology_settings

    seed_processing(r, "t6", "w1")
    rec = broker.durable.record("default", "t6", "wait#0", 0, "wait", due=("in", 60_000)).record
    Waiters(Topics(broker)).register("orders", Waiter("default", "t6", "wait#0", {"id": 9}, rec.due))
    assert broker.durable.suspend("default", "w1", "t6", "wait#0", 0) == SCHEDULED
    with topology_settings(TOPICS={"orders": {}}):
        entry = asyncio.run(apublish("orders", {"id": 9}))
    assert broker.durable.load("default", "t6")[1]["wait#0"].event == entry and r.zscore(keys().scheduled, "t6") is None
