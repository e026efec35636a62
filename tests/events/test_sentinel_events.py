"""Events through Redis Sentinel: publish and the subscriptions' reads go to the master the sentinels name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from django_redisq import connection
from django_redisq.events.publish import publish
from django_redisq.store.keys import TopicKeys
from tests.conftest import topology_settings
from tests.events.conftest import HANDLERS, THREE, runs
from tests.helpers import wait_for

pytestmark = pytest.mark.sentinel


@pytest.fixture
def sentinel(redis_sentinel: Any, r: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """TASKS on the sentinels (the master by name) with SUBSCRIPTIONS; the handlers' effects go to the single Redis."""
    monkeypatch.setenv("REDISQ_CHAOS_EFFECTS_URL", redis_url)
    port = redis_sentinel.master_port()
    assert port, "no sentinel names a master"
    master = redis.Redis(port=port, decode_responses=True)
    master.flushall()
    with topology_settings(REDIS_URL=f"redis://{redis_sentinel.master_name}/0", SENTINELS=redis_sentinel.sentinels,
                           SENTINEL_MASTER=redis_sentinel.master_name, HEARTBEAT_INTERVAL=0.5, WORKER_TIMEOUT=3.0,
                           SUBSCRIPTIONS=THREE):
        connection.reset()
        yield master
    connection.reset()
    master.flushall()


def test_publish_and_consume_through_the_sentinels_master(sentinel, r, running_worker):
    ids = [publish("orders.placed", {"n": i}) for i in range(100)]
    assert sentinel.xlen(TopicKeys("orders.placed").stream) == 100  # on the master the sentinels name
    running_worker()
    assert wait_for(lambda: all(set(runs(r, h)) == set(ids) for h in HANDLERS), 60)
    assert {n for h in HANDLERS for n in runs(r, h).values()} == {1}
