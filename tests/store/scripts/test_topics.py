"""The events scripts (store/topics/steps.py), each on one Redis and on the cluster (its topic's slot only)."""

from __future__ import annotations

import json

import pytest
import redis

from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.keys import QueueKeys, TopicKeys
from django_redisq.store.topics import NoSuchGroup, Topics, before


@pytest.fixture
def topics(r):
    return Topics(Broker(get_options()))


def test_publish_creates_missing_groups_before_the_event(r, topics):
    first = topics.publish("t", '{"n":1}', [("latest", "$"), ("earliest", "0")])
    second = topics.publish("t", '{"n":2}', [("latest", "$"), ("earliest", "0")])
    assert [e.id for e in topics.read("t", "latest", "c", 10).entries] == [first, second]
    assert [e.payload for e in topics.read("t", "earliest", "c", 10).entries] == ['{"n":1}', '{"n":2}']


def test_groups_start_latest_or_earliest_and_existing_ones_stay(r, topics):
    old = topics.publish("t", "{}")
    assert topics.ensure_groups("t", [("a", "$"), ("b", "0")]) == []  # new: none was recreated
    assert {g["name"] for g in r.xinfo_groups(TopicKeys("t").stream)} == {"a", "b"}
    assert topics.ensure_groups("t", [("a", "0")]) == []  # exists: not moved back
    new = topics.publish("t", "{}")
    assert [e.id for e in topics.read("t", "a", "c", 10).entries] == [new]
    assert [e.id for e in topics.read("t", "b", "c", 10).entries] == [old, new]
    assert r.hgetall(TopicKeys("t").gen) == {"a": "0", "b": "0"}


def test_read_reports_the_top_when_nothing_is_new_and_a_missing_group(r, topics):
    topics.ensure_groups("t", [("g", "$")])
    top = topics.publish("t", "{}", [])
    assert len(topics.read("t", "g", "c", 10).entries) == 1
    got = topics.read("t", "g", "c", 10)
    assert got.entries == [] and got.top == top
    topics.wait("t", top, 10)  # nothing after the top: returns after the timeout
    with pytest.raises(NoSuchGroup):
        topics.read("t", "nope", "c", 10)


def test_claim_walks_the_pending_list_with_delivery_counts(r, topics):
    topics.ensure_groups("t", [("g", "0")])
    ids = [topics.publish("t", json.dumps({"n": i})) for i in range(7)]
    topics.read("t", "g", "dead", 100)
    seen, cursor = [], "0-0"
    while True:
        got = topics.claim("t", "g", "live", 0, cursor, 3)
        seen += got.entries
        cursor = got.cursor
        if cursor == "0-0":
            break
    assert [e.id for e in seen] == ids and {e.deliveries for e in seen} == {2}
    assert topics.claim("t", "g", "live", 0, "0-0", 100).entries[0].deliveries == 3
    assert topics.ack("t", "g", ids) == 7
    assert topics.claim("t", "g", "live", 0, "0-0", 100).entries == []
    with pytest.raises(NoSuchGroup):
        topics.claim("t", "nope", "live", 0, "0-0", 10)


def test_trim_keeps_what_a_group_holds_and_the_hard_cap_counts_the_loss(r, topics):
    topics.ensure_groups("t", [("g", "0")])
    ids = [topics.publish("t", "{}") for _ in range(10)]
    topics.read("t", "g", "c", 4)
    assert topics.trim("t", 0, 2, 0, ["g"]) == (0, 0)  # the first is pending
    topics.ack("t", "g", ids[:4])
    assert topics.trim("t", 0, 2, 0, ["g"]) == (4, 0)
    assert topics.trim("t", 0, 2, 3, ["g"]) == (0, 3)
    assert r.hgetall(TopicKeys("t").meta) == {"dropped": "3", "dropped:g": "3", "acked:g": ids[3]}


def test_a_deleted_group_is_recreated_where_it_had_acknowledged_everything_and_counted(r, topics):
    k = TopicKeys("t")
    topics.ensure_groups("t", [("g", "$"), ("h", "$")])
    ids = [topics.publish("t", "{}") for _ in range(6)]
    topics.read("t", "g", "c", 4)
    topics.ack("t", "g", ids[:2])  # g: ids[2] and ids[3] pending, acknowledged through the id just below ids[2]
    topics.trim("t", 0, 0, 0, ["g", "h"])
    assert r.hget(k.meta, "acked:g") == before(ids[2]) and r.hget(k.meta, "acked:h") == "0-0"
    r.xgroup_destroy(k.stream, "g")
    assert topics.trim("t", 0, 1, 0, ["g"]) == (2, 0)  # the missing group still holds what it had not acknowledged
    assert r.xrange(k.stream, count=1)[0][0] == ids[2]
    (back,) = topics.ensure_groups("t", [("g", "$")])
    assert (back.group, back.at) == ("g", before(ids[2]))
    assert [e.id for e in topics.read("t", "g", "c", 10).entries] == ids[2:]
    r.xgroup_destroy(k.stream, "h")  # h never read: recorded at 0-0, every retained entry
    new = topics.publish("t", "{}", [("h", "$")])
    assert [e.id for e in topics.read("t", "h", "c", 10).entries] == [*ids[2:], new]
    assert {f: v for f, v in r.hgetall(k.meta).items() if f.startswith("regrouped")} == {
        "regrouped": "2", "regrouped:g": "1", "regrouped:h": "1"}
    assert topics.stats("t", ["g", "h"])["g"].regrouped == 1
    assert r.hgetall(k.gen) == {"g": "0", "h": "0"}  # generations kept: the same task ids, duplicates dropped


def test_rewind_sets_the_group_back_and_bumps_the_generation(r, topics):
    topics.ensure_groups("t", [("g", "0")])
    ids = [topics.publish("t", "{}") for _ in range(3)]
    assert topics.read("t", "g", "c", 10).generation == 0
    assert topics.rewind("t", "g", before(ids[1])) == 1
    got = topics.read("t", "g", "c", 10)
    assert got.generation == 1 and [e.id for e in got.entries] == ids[1:]
    with pytest.raises(NoSuchGroup):
        topics.rewind("t", "nope", "0-0")
    with pytest.raises(NoSuchGroup):
        topics.rewind("no-stream", "g", "0-0")


def test_a_stream_key_of_another_type_is_an_error_not_a_missing_group(r, topics):
    r.set(TopicKeys("t").stream, "not a stream")
    for step in (lambda: topics.read("t", "g", "c", 10), lambda: topics.claim("t", "g", "c", 0, "0-0", 10)):
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            step()


def test_prune_deletes_only_idle_consumers_with_nothing_pending(r, topics):
    topics.ensure_groups("t", [("g", "0")])
    topics.publish("t", "{}")
    topics.read("t", "g", "holder", 10)
    second = topics.publish("t", "{}")
    topics.read("t", "g", "empty", 10)
    topics.ack("t", "g", [second])  # "empty" holds nothing now
    assert topics.prune("t", "g", 0) == 1
    assert [c["name"] for c in r.xinfo_consumers(TopicKeys("t").stream, "g")] == ["holder"]


def test_bury_event_dead_letters_once(r, topics):
    error = {"exc": "x.Y", "msg": "bad", "tb": "bad", "at": 0}
    assert topics.bury("default", "e1", '{"v":1,"args":[1],"kwargs":{}}', "a.b", "bad_event", error)
    assert not topics.bury("default", "e1", "{}", "a.b", "bad_event", error)
    k = QueueKeys("default")
    assert r.zrange(k.dead, 0, -1) == ["e1"]
    assert r.hget(k.task("e1"), "reason") == "bad_event" and r.hget(k.task("e1"), "state") == "dead"
