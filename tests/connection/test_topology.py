"""The checks of CLUSTER and SENTINEL_* (E060-E067) and what a cluster or sentinel client is built from."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from django_redisq import connection
from django_redisq.connection import topology
from django_redisq.settings.read import build_options, validate


def ids(options: dict[str, Any]) -> list[str]:
    return [cid for cid, _, _ in validate("default", {"QUEUES": ["default"], "OPTIONS": options})]


SENTINEL = {"SENTINELS": [("10.0.0.1", 26379), ("10.0.0.2", 26379)], "SENTINEL_MASTER": "mymaster"}


@pytest.mark.parametrize(("options", "expected"), [
    ({"REDIS_URL": "redis://10.0.0.1:7000/0", "CLUSTER": True}, []),
    ({"REDIS_URL": "redis://10.0.0.1:7000", "CLUSTER": False}, []),
    ({"REDIS_URL": "redis://10.0.0.1:7000/0", "CLUSTER": "yes"}, ["E060"]),
    ({"REDIS_URL": "redis://10.0.0.1:7000/0", "CLUSTER": 1}, ["E060"]),
    ({"EMBEDDED": True, "CLUSTER": True}, ["E061"]),
    ({**SENTINEL, "CLUSTER": True}, ["E061"]),
    ({"REDIS_URL": "redis://10.0.0.1:7000/3", "CLUSTER": True}, ["E062"]),
    ({"REDIS_URL": "unix:///tmp/redis.sock", "CLUSTER": True}, ["E062"]),
    (SENTINEL, []),
    ({**SENTINEL, "REDIS_URL": "rediss://:secret@mymaster/2", "SENTINEL_KWARGS": {"password": "s"}}, []),
    ({**SENTINEL, "REDIS_URL": "redis://:secret@/0"}, []),
    ({**SENTINEL, "SENTINELS": []}, ["E063"]),
    ({**SENTINEL, "SENTINELS": ["10.0.0.1:26379"]}, ["E063"]),
    ({**SENTINEL, "SENTINELS": [("10.0.0.1", "26379")]}, ["E063"]),
    ({**SENTINEL, "SENTINEL_MASTER": ""}, ["E064"]),
    ({"SENTINELS": SENTINEL["SENTINELS"]}, ["E064"]),
    ({"SENTINEL_MASTER": "mymaster"}, ["E065"]),
    ({"SENTINEL_KWARGS": {"password": "x"}}, ["E065"]),
    ({**SENTINEL, "SENTINEL_KWARGS": {"db": 3}}, ["E066"]),
    ({**SENTINEL, "SENTINEL_KWARGS": "password"}, ["E066"]),
    ({**SENTINEL, "REDIS_URL": "redis://10.0.0.9:6379/0"}, ["E067"]),
    ({**SENTINEL, "REDIS_URL": "redis://mymaster:6379/0"}, ["E067"]),
    ({**SENTINEL, "EMBEDDED": True}, ["E067"]),
])
def test_checks(options, expected):
    assert ids(options) == expected


def test_the_options_carry_the_topology():
    o = build_options("default", {"OPTIONS": {**SENTINEL, "SENTINEL_KWARGS": {"password": "s"}}})
    assert (o.sentinels, o.sentinel_master, o.sentinel_kwargs, topology.kind(o)) == (
        (("10.0.0.1", 26379), ("10.0.0.2", 26379)), "mymaster", {"password": "s"}, "sentinel")
    assert connection.describe(o) == "Redis master 'mymaster' of sentinels 10.0.0.1:26379, 10.0.0.2:26379"
    c = build_options("default", {"OPTIONS": {"REDIS_URL": "redis://:pw@10.0.0.1:7000/0", "CLUSTER": True}})
    assert topology.kind(c) == "cluster" and connection.describe(c) == "the Redis Cluster of node redis://10.0.0.1:7000/0"
    assert connection.target(c) != connection.target(build_options("default", {"OPTIONS": {"REDIS_URL": "redis://:pw@10.0.0.1:7000/0"}}))


def test_a_cluster_client_gets_the_same_credentials_tls_and_timeouts():
    o = build_options("default", {"OPTIONS": {"REDIS_URL": "rediss://u:pw@10.0.0.1:7000/0?ssl_cert_reqs=none", "CLUSTER": True}})
    kwargs = topology._cluster_kwargs(o, connection.pool_kwargs(o))
    assert (kwargs["host"], kwargs["port"], kwargs["username"], kwargs["password"], kwargs["ssl"], kwargs["ssl_cert_reqs"]) == (
        "10.0.0.1", 7000, "u", "pw", True, "none")
    assert kwargs["socket_timeout"] == connection.BLOCK_TIMEOUT + 10 and kwargs["decode_responses"] and kwargs["retry"] is not None


def test_a_sentinel_master_gets_the_urls_credentials_not_its_address():
    o = build_options("default", {"OPTIONS": {**SENTINEL, "REDIS_URL": "redis://:pw@mymaster/2"}})
    kwargs = topology._sentinel_kwargs(o, connection.pool_kwargs(o))
    assert "host" not in kwargs and "port" not in kwargs and (kwargs["password"], kwargs["db"]) == ("pw", 2)
    own = topology._sentinel_own(o, connection.pool_kwargs(o))
    assert own["socket_timeout"] <= topology.SENTINEL_TIMEOUT


def test_a_cluster_over_a_database_other_than_0_is_refused_when_built(monkeypatch):
    o = build_options("default", {"OPTIONS": {"REDIS_URL": "redis://10.0.0.1:7000/0", "CLUSTER": True}})
    with pytest.raises(ImproperlyConfigured, match="database 0 only"):
        topology._cluster_kwargs(o, {**connection.pool_kwargs(o), "db": 4})
