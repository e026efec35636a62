"""The trace field of a stream entry (``tc``, core/tracing.py): written by topic_publish.lua only when given, returned by
topic_read.lua and topic_claim.lua beside the payload, ``""`` for an entry without it (each on one Redis and the cluster)."""

from __future__ import annotations

import pytest

from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.keys import TopicKeys
from django_redisq.store.topics import Topics

CARRIER = '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'


@pytest.fixture
def topics(r):
    return Topics(Broker(get_options()))


def test_publish_writes_the_trace_field_only_when_given(r, topics):
    traced = topics.publish("t", '{"n":1}', [("g", "0")], CARRIER)
    plain = topics.publish("t", '{"n":2}', [("g", "0")])
    fields = dict(r.xrange(TopicKeys("t").stream))
    assert fields[traced] == {"p": '{"n":1}', "tc": CARRIER}
    assert fields[plain] == {"p": '{"n":2}'}  # off: not one byte more than before
    assert r.xinfo_groups(TopicKeys("t").stream)[0]["name"] == "g"  # the groups still come after the trace argument


def test_read_and_claim_return_each_entrys_trace_beside_its_payload(r, topics):
    topics.ensure_groups("t", [("g", "0")])
    traced = topics.publish("t", '{"n":1}', [], CARRIER)
    plain = topics.publish("t", '{"n":2}')
    foreign = r.xadd(TopicKeys("t").stream, {"x": "1", "tc": "not json", "p": '{"n":3}'})  # another producer's field order
    got = topics.read("t", "g", "c1", 10)
    assert [(e.id, e.payload, e.trace, e.deliveries) for e in got.entries] == [
        (traced, '{"n":1}', CARRIER, 1), (plain, '{"n":2}', "", 1), (foreign, '{"n":3}', "not json", 1)]
    claimed = topics.claim("t", "g", "c2", 0, "0-0", 10)  # each delivered a second time now
    assert [(e.id, e.payload, e.trace, e.deliveries) for e in claimed.entries] == [
        (traced, '{"n":1}', CARRIER, 2), (plain, '{"n":2}', "", 2), (foreign, '{"n":3}', "not json", 2)]
    assert claimed.cursor == "0-0" and claimed.trimmed == 0
