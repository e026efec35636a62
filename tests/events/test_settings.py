"""SUBSCRIPTIONS and TOPICS: system checks (E100-E107), and what publish refuses before writing anything."""

from __future__ import annotations

import pytest
from django.core.checks import run_checks
from django.db import transaction

from django_redisq.events.publish import InvalidEvent, publish, publish_on_commit
from django_redisq.store.keys import TopicKeys
from tests.events.conftest import H, events_settings


def _ids(**kwargs):
    with events_settings(**kwargs):
        return sorted({e.id for e in run_checks() if e.id.startswith("django_redisq.")})


def test_good_settings_pass_the_checks():
    assert _ids(subscriptions={"a": {"topic": "orders.placed", "task": H + "billing", "start": "earliest"},
                               "b": {"topic": "orders.placed", "task": H + "audit", "queue_name": "emails"}},
                topics={"orders.placed": {"MAX_AGE": 3600, "MAX_LEN": 1000, "HARD_MAX_LEN": 5000, "HEALTH_MAX_LAG": 100}}) == []


@pytest.mark.parametrize(("subs", "topics", "expected"), [
    ({"a": {"topic": "t", "task": "tests.testapp.event_tasks.nope"}}, None, "E101"),
    ({"a": {"topic": "t", "task": 3}}, None, "E101"),
    ({"a": {"topic": "t", "task": H + "billing", "queue_name": "nowhere"}}, None, "E102"),
    ({"a": {"topic": "bad topic{x}", "task": H + "billing"}}, None, "E103"),
    ({"a": {"topic": "t", "task": H + "billing", "start": "yesterday"}}, None, "E104"),
    ({"a": {"topic": "t", "task": H + "billing", "colour": 1}}, None, "E100"),
    ({"bad name": {"topic": "t", "task": H + "billing"}}, None, "E100"),
    (["not", "a", "dict"], None, "E100"),
    (None, {"t": {"MAX_AGE": -1}}, "E106"),
    (None, {"t": {"MAX_LEN": 1.5}}, "E106"),
    (None, {"t": {"HARD_MAX_LEN": True}}, "E106"),
    (None, {"t": {"MAX_LEN": 100, "HARD_MAX_LEN": 10}}, "E106"),
    (None, {"t": {"max_age": 1}}, "E105"),
    (None, {"t": 5}, "E105"),
    (None, {"t:x": {}}, "E103"),
    ({"a": {"topic": "t", "task": H + "two_args"}}, None, "E107"),
])
def test_each_misconfiguration_is_a_check_error(subs, topics, expected):
    kwargs = {}
    if subs is not None:
        kwargs["subscriptions"] = subs
    if topics is not None:
        kwargs["topics"] = topics
    assert _ids(**kwargs) == [f"django_redisq.{expected}"]


def test_publish_refuses_bad_topics_and_payloads_and_writes_nothing(r):
    with events_settings({"a": {"topic": "t", "task": H + "billing"}}):
        for topic in ("not configured", "other", "", None, "t{x}"):
            with pytest.raises(InvalidEvent, match="topic"):
                publish(topic, {"n": 1})
        for payload in ([1, 2], "text", None, {"when": object()}, {1: "int key"}, {"b": b"bytes"}, {"x": float("nan")}):
            with pytest.raises(InvalidEvent):
                publish("t", payload)
        with pytest.raises(InvalidEvent, match="MAX_MESSAGE_BYTES"):
            publish("t", {"big": "x" * (600 * 1024)})
        assert r.exists(TopicKeys("t").stream) == 0
        assert isinstance(publish("t", {"n": 1}), str)
        assert r.xlen(TopicKeys("t").stream) == 1


@pytest.mark.django_db(transaction=True)
def test_publish_on_commit_publishes_after_the_commit_and_nothing_on_rollback(r):
    with events_settings({"a": {"topic": "t", "task": H + "billing"}}):
        stream = TopicKeys("t").stream
        with transaction.atomic():
            payload = {"n": 1}
            publish_on_commit("t", payload)
            payload["n"] = 2  # what was checked is what is published
            assert r.exists(stream) == 0
        assert [e[1] for e in r.xrange(stream)] == [{"p": '{"n":1}'}]
        with pytest.raises(RuntimeError), transaction.atomic():
            publish_on_commit("t", {"n": 3})
            raise RuntimeError("rolled back")
        assert r.xlen(stream) == 1
        with pytest.raises(InvalidEvent), transaction.atomic():
            publish_on_commit("t", ["bad"])  # raises inside the transaction, not after it
