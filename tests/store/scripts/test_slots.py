"""The scripts no other file here runs (fire, scan_dead, dead_window, save_metadata, edit_replay), and the cluster's slot proof.

``test_every_script_ran_on_the_cluster`` checks that on the cluster every script
has run through the real Broker / Inspector code paths (see conftest.py), none
left out; conftest.py moves it after every other test of the session, so it does
not depend on the order files are collected in.
"""

from __future__ import annotations

import json
import threading
from hashlib import sha1

import pytest

from django_redisq.ops.inspector import Inspector
from django_redisq.settings.read import get_options
from django_redisq.store import scripts
from django_redisq.store.broker import Broker
from django_redisq.store.reads.dead_scan import DeadFilter
from tests.conftest import topology_settings
from tests.helpers import keys, redis_ms, seed_dead, seed_hash, seed_processing
from tests.store.scripts.conftest import CLUSTER_GROUP, EXECUTED, STRICT


def test_fire_claims_a_tick_once(r):
    from django_redisq.worker.background.scheduler import Scheduler

    schedule = {"task": "tests.testapp.tasks.on_tick", "every": 60, "kwargs": {"key": "k"}, "timezone": "UTC"}
    with topology_settings(SCHEDULES={"s": schedule}):
        opts = get_options("default")
        x = Scheduler(opts, Broker(opts), threading.Event())
    s = x.schedules[0]
    now = redis_ms(r)
    r.hset(keys().schedule("s"), "last", s.latest_at(now) - 60_000)
    claim = x.plan(s, r.hget(keys().schedule("s"), "last"), now)
    assert x.broker.schedules.fire("default", "s", claim).code == 1
    assert x.broker.schedules.fire("default", "s", claim).code != 1  # the marker moved: claimed once
    assert r.llen(keys().pending) == 1


def test_scan_dead_filters_by_task(r):
    for i in range(3):
        seed_dead(r, f"d{i}", died_at=1000 + i)
    scan = Inspector(get_options("default")).scan_dead("default", DeadFilter(task="add"), want=0, budget=None)
    assert (scan.examined, scan.matched, scan.exhausted) == (3, 3, True)


def test_dead_window_merges_a_partitioned_queues_dead_letters(r):
    """dead_window.lua, pipelined once per partition (each its own hash tag: on the cluster, maybe its own node)."""
    parts = ["default", "default~1", "default~2"]
    for i in range(9):
        seed_dead(r, f"d{i}", parts[i % 3], died_at=1000 + i)
    with topology_settings(QUEUE_OPTIONS={"default": {"PARTITIONS": 3}}):
        ins = Inspector(get_options("default"))
        page = ins.dead_page("default", per_page=4, start=2)
        assert [row.id for row in page.items] == ["d6", "d5", "d4", "d3"] and page.total == 9
        assert [row.queue for row in page.items] == ["default", "default~2", "default~1", "default"]


def test_save_metadata_direct_and_held(r, broker):
    seed_hash(r, "t1", "pending")
    assert broker.save_metadata("default", "t1", '{"a":1}')
    seed_processing(r, "t2", "w1")
    assert broker.save_metadata_held("default", "w1", [("t2", '{"b":2}')]) == []  # pipelined (EVAL on a cluster)
    assert broker.save_metadata_held("default", "w2", [("t2", '{"c":3}')]) == ["t2"]  # not held by w2


def test_edit_replay_rewrites_and_replays(r, broker):
    seed_dead(r, "d1")
    msg = r.hget(keys().task("d1"), "msg")
    edited = json.dumps({**json.loads(msg), "args": [5, 6]})
    broker.operator.edit_replay("default", "d1", sha1(msg.encode()).hexdigest(), edited)
    assert r.lrange(keys().pending, 0, -1) == ["d1"] and json.loads(r.hget(keys().task("d1"), "msg"))["args"] == [5, 6]


@pytest.mark.cluster
@pytest.mark.xdist_group(CLUSTER_GROUP)
def test_every_script_ran_on_the_cluster(request):
    """Every script in django_redisq/scripts ran on the cluster, so each touched only its queue's slot (conftest.py)."""
    ran_here = [i for i in request.session.items if i.fspath.dirname == request.node.fspath.dirname and "[cluster]" in i.nodeid]
    if len(ran_here) < 100:
        pytest.skip("only part of tests/store/scripts was selected: the coverage of the cluster runs is checked on a full run")
    assert set(scripts.NAMES) - EXECUTED == set(), "scripts that never ran on the cluster"
    assert "?" not in EXECUTED, "a pipelined EVAL of a text that is not one of our scripts"


@pytest.mark.cluster
def test_the_cluster_refuses_a_script_that_strays_from_its_slot(redis_cluster):
    """What the proof rests on: a key derived at run time in another slot is an error, not a silent success."""
    import redis
    from redis.cluster import RedisCluster

    client = RedisCluster.from_url(redis_cluster.url, decode_responses=True)
    stray = STRICT + "return redis.call('GET', ARGV[1])"
    default = client.get_node_from_key(keys("default").pending)
    near = next(q for q in (f"q{i}" for i in range(1000)) if client.get_node_from_key(keys(q).pending) == default
                and client.keyslot(keys(q).pending) != client.keyslot(keys("default").pending))
    far = next(q for q in (f"q{i}" for i in range(1000)) if client.get_node_from_key(keys(q).pending) != default)
    for other in (near, far):  # another slot of the same node, a slot of another node
        with pytest.raises(redis.ResponseError, match=r"same slot|non local"):
            client.eval(stray, 1, keys("default").pending, keys(other).pending)
    assert client.eval(stray, 1, keys("default").pending, keys("default").task("x")) is None  # the same slot: allowed
    client.close()
