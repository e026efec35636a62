"""Trimming: by age and length, never past what a subscription has not turned into a task, but to the hard cap."""

from __future__ import annotations

import threading

from django_redisq.events.publish import publish
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.keys import TopicKeys
from django_redisq.store.topics import Topics
from django_redisq.worker.background.pump import EventPump
from tests.events.conftest import H, events_settings

STREAM = TopicKeys("t1").stream
SUBS = {"fast": {"topic": "t1", "task": H + "plain"}, "stalled": {"topic": "t1", "task": H + "mail"}}


def _pump(consumer: str = "w1") -> EventPump:
    return EventPump(get_options(), Broker(get_options()), threading.Event(), consumer, ["default", "emails"])


def test_max_len_trims_only_what_every_subscription_acknowledged(r):
    with events_settings(SUBS, {"t1": {"MAX_LEN": 10}}):
        ids = [publish("t1", {"n": i}) for i in range(100)]
        pump = _pump()
        fast, stalled = pump.subs
        topics = pump.topics
        pump.handle(fast, 0, topics.read("t1", "fast", "w1", 1000).entries)  # all 100 became tasks and were acked
        # the stalled subscription took 40 and acknowledged none of them
        got = topics.read("t1", "stalled", "w1", 40)
        assert len(got.entries) == 40
        (t,) = pump.retention
        assert pump.trim(t) == (0, 0)  # its oldest pending entry is the first: nothing may go
        assert r.xlen(STREAM) == 100
        topics.ack("t1", "stalled", [e.id for e in got.entries[:25]])
        assert pump.trim(t) == (25, 0)  # up to its oldest pending entry, not to MAX_LEN
        assert r.xrange(STREAM, count=1)[0][0] == ids[25]
        topics.ack("t1", "stalled", [e.id for e in got.entries[25:]])
        assert pump.trim(t) == (40 - 25, 0)  # now up to what it has not been delivered yet
        assert r.xrange(STREAM, count=1)[0][0] == ids[40]
        pump.handle(stalled, 0, topics.read("t1", "stalled", "w1", 1000).entries)
        assert pump.trim(t) == (50, 0)  # both caught up: MAX_LEN rules
        assert r.xlen(STREAM) == 10
        assert Topics(pump.broker).stats("t1", ["stalled"])["stalled"].dropped == 0


def test_max_age_waits_for_a_stalled_subscription(r):
    with events_settings(SUBS, {"t1": {"MAX_AGE": 0.001}}):
        for i in range(30):
            publish("t1", {"n": i})
        pump = _pump()
        fast, _ = pump.subs
        pump.handle(fast, 0, pump.topics.read("t1", "fast", "w1", 1000).entries)
        (t,) = pump.retention
        assert pump.trim(t) == (0, 0)  # every entry is old enough, and "stalled" has none of them
        assert r.xlen(STREAM) == 30


def test_the_hard_cap_trims_past_a_stalled_subscription_and_counts_its_loss(r):
    with events_settings(SUBS, {"t1": {"MAX_LEN": 5, "HARD_MAX_LEN": 20}}):
        for i in range(50):
            publish("t1", {"n": i})
        pump = _pump()
        fast, _ = pump.subs
        pump.handle(fast, 0, pump.topics.read("t1", "fast", "w1", 1000).entries)
        (t,) = pump.retention
        assert pump.trim(t) == (0, 30)
        assert r.xlen(STREAM) == 20
        stats = pump.topics.stats("t1", ["fast", "stalled"])
        assert stats["stalled"].dropped == 30 and stats["fast"].dropped == 0
        assert r.hget(TopicKeys("t1").meta, "dropped") == "30"
        # the stalled subscription then gets the 20 left, each once
        got = pump.topics.read("t1", "stalled", "w1", 1000)
        assert len(got.entries) == 20


def test_a_group_no_subscription_names_holds_nothing_back(r):
    with events_settings({"fast": SUBS["fast"]}, {"t1": {"MAX_LEN": 5}}):
        for i in range(20):
            publish("t1", {"n": i})
        r.xgroup_create(STREAM, "removed-subscription", id="0")
        pump = _pump()
        pump.handle(pump.subs[0], 0, pump.topics.read("t1", "fast", "w1", 1000).entries)
        (t,) = pump.retention
        assert pump.trim(t) == (15, 0)


def test_a_topic_without_subscriptions_is_trimmed_by_every_worker(r):
    with events_settings({}, {"lonely": {"MAX_LEN": 3}}):
        for i in range(10):
            publish("lonely", {"n": i})
        pump = _pump()
        assert pump.subs == []
        (t,) = pump.retention
        assert pump.trim(t) == (7, 0)
        assert r.xlen(TopicKeys("lonely").stream) == 3
