"""A subscription's consumer group deleted by an operator: recreated where it stood, logged, counted; nothing skipped."""

from __future__ import annotations

import io
import json
import logging
import threading

import pytest
from django.core.management import call_command

from django_redisq.events.publish import publish
from django_redisq.ops.metrics import exposition
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.keys import QueueKeys, TopicKeys
from django_redisq.worker.background.pump import EventPump
from tests.events.conftest import H, events_settings, runs

STREAM = TopicKeys("t1").stream
SUB = {"b": {"topic": "t1", "task": H + "billing"}}


def _pump() -> EventPump:
    options = get_options()
    return EventPump(options, Broker(options), threading.Event(), "w1", ["default"])


def _one_done_five_unread(pump: EventPump) -> tuple[str, list[str]]:
    """The group exists (a worker joined); one event became a task and ran; five more are published, unread."""
    pump.join(pump.subs[0])
    first = publish("t1", {"n": 0})
    pump.pump_once(pump.subs[0], block_ms=0)
    return first, [publish("t1", {"n": i}) for i in range(1, 6)]


def _redisq(*args: str) -> str:
    out = io.StringIO()
    call_command("redisq", *args, stdout=out)
    return out.getvalue()


def test_a_deleted_group_is_recreated_by_the_worker_and_its_unread_events_run_once(r, make_worker, caplog):
    with events_settings(SUB):
        pump = _pump()
        first, unread = _one_done_five_unread(pump)
        r.xgroup_destroy(STREAM, "b")
        caplog.set_level(logging.WARNING, logger="django_redisq")
        with pytest.raises(LookupError):  # the reader finds its group gone (NoSuchGroup) and joins again
            pump.pump_once(pump.subs[0], block_ms=0)
        pump.join(pump.subs[0])
        pump.pump_once(pump.subs[0], block_ms=0)
        make_worker("default").run()
        # the unread five ran; the first, delivered again (no trim had recorded where the group stood: from '0'), was
        # dropped by its task id (same generation): it ran once
        assert runs(r, "billing") == dict.fromkeys([first, *unread], 1)
        assert any(rec.levelno == logging.WARNING and "subscription b" in rec.getMessage() and "recreated" in rec.getMessage()
                   for rec in caplog.records)
        (row,) = json.loads(_redisq("topics", "--json"))
        assert row["regrouped"] == 1 and row["lag"] == 0 and row["pending"] == 0
        assert "found deleted and recreated 1 time(s)" in _redisq("topics")
        text = exposition()[0].decode()
        assert 'redisq_subscription_regrouped_total{backend="default",subscription="b",topic="t1"} 1.0' in text
        out = io.StringIO()
        call_command("redisq", "health", "--json", stdout=out)  # a note, not a breach: nothing was lost
        report = json.loads(out.getvalue())
        assert report["subscriptions"]["b"]["regrouped"] == 1
        assert any("subscription b" in n for n in report["notes"])


def test_a_publish_that_finds_the_group_deleted_recreates_it_where_the_last_trim_saw_it(r, make_worker, caplog):
    with events_settings(SUB, {"t1": {"MAX_LEN": 1}}):
        pump = _pump()
        first, unread = _one_done_five_unread(pump)
        (topic,) = pump.retention
        pump.trim(topic)  # records that "b" acknowledged everything through `first` (and holds the five unread)
        assert r.xlen(STREAM) == 5
        r.xgroup_destroy(STREAM, "b")
        pump.trim(topic)  # the group is gone: what it had not acknowledged is still held back
        assert r.xlen(STREAM) == 5
        caplog.set_level(logging.WARNING, logger="django_redisq")
        late = publish("t1", {"n": 6})  # the publisher recreates the group, at `first`, not at this event
        assert any("recreated at " + first in rec.getMessage() for rec in caplog.records)
        got = pump.topics.read("t1", "b", "w1", 100)
        assert [e.id for e in got.entries] == [*unread, late] and got.generation == 0
        pump.handle(pump.subs[0], got.generation, got.entries)
        make_worker("default").run()
        assert runs(r, "billing") == dict.fromkeys([first, *unread, late], 1)
        assert pump.topics.stats("t1", ["b"])["b"].regrouped == 1


def test_a_new_subscription_still_starts_at_the_latest_event_uncounted(r):
    with events_settings(SUB):
        publish("t1", {"n": 0})
    with events_settings({**SUB, "late": {"topic": "t1", "task": H + "plain"}}):
        pump = EventPump(get_options(), Broker(get_options()), threading.Event(), "w1", ["default"])
        assert pump.topics.ensure_groups("t1", [("late", "$")]) == []
        assert pump.topics.read("t1", "late", "w1", 10).entries == []
        assert pump.topics.stats("t1", ["late"])["late"].regrouped == 0


def test_a_rewind_to_after_the_newest_event_leaves_the_trim_working(r):
    """A rewind by time sets the group to '<ms>-<max seq>'; the trim read that id (overflowing) and failed every round."""
    with events_settings(SUB, {"t1": {"MAX_LEN": 1}}):
        pump = _pump()
        pump.join(pump.subs[0])
        ids = [publish("t1", {"n": i}) for i in range(3)]
        pump.pump_once(pump.subs[0], block_ms=0)
        ms = int(ids[-1].split("-")[0]) + 1
        pump.topics.rewind("t1", "b", f"{ms - 1}-18446744073709551615")  # as ``--to`` a time just after the newest
        (topic,) = pump.retention
        assert pump.trim(topic) == (2, 0)
        assert r.llen(QueueKeys("default").pending) == 3
