"""``redisq topics [--json]``, ``redisq topics rewind``, the lag metric and the health threshold."""

from __future__ import annotations

import io
import json
import threading
from datetime import datetime, timezone

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_redisq.events.publish import publish
from django_redisq.ops.metrics import exposition
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.topics import Topics
from django_redisq.worker.background.pump import EventPump
from tests.events.conftest import THREE, events_settings


def redisq(*args: str) -> str:
    out = io.StringIO()
    call_command("redisq", *args, stdout=out)
    return out.getvalue()


def _half_consumed() -> list[str]:
    """10 events; billing turned all into tasks, mail took 4 and acknowledged none, audit has not read."""
    ids = [publish("orders.placed", {"n": i}) for i in range(10)]
    options = get_options()
    pump = EventPump(options, Broker(options), threading.Event(), "w1", ["default", "emails", "low"])
    billing = next(s for s in pump.subs if s.name == "billing-on-order")
    pump.handle(billing, 0, pump.topics.read("orders.placed", billing.name, "w1", 100).entries)
    pump.topics.read("orders.placed", "mail-on-order", "w1", 4)
    return ids


def test_topics_lists_lag_pending_and_last_delivered(r):
    with events_settings(THREE):
        ids = _half_consumed()
        rows = {row["name"]: row for row in json.loads(redisq("topics", "--json"))}
        assert set(rows) == set(THREE)
        b, m, a = rows["billing-on-order"], rows["mail-on-order"], rows["audit"]
        assert (b["lag"], b["pending"], b["last_delivered"], b["oldest_pending_age"]) == (0, 0, ids[-1], None)
        assert (m["lag"], m["pending"], m["last_delivered"]) == (6, 4, ids[3]) and m["oldest_pending_age"] >= 0
        assert (a["lag"], a["pending"], a["exists"], a["start"]) == (10, 0, True, "earliest")
        text = redisq("topics")
        assert "mail-on-order" in text and ids[3] in text and "SUBSCRIPTION" in text.splitlines()[0]


def test_rewind_by_id_time_or_earliest_and_its_errors(r):
    with events_settings(THREE):
        ids = _half_consumed()
        out = json.loads(redisq("topics", "rewind", "billing-on-order", "--to", ids[6], "--json"))
        assert out["generation"] == 1
        topics = Topics(Broker(get_options()))
        got = topics.read("orders.placed", "billing-on-order", "w1", 100)
        assert got.generation == 1 and [e.id for e in got.entries] == ids[6:]
        when = datetime.fromtimestamp(int(ids[0].split("-")[0]) / 1000, tz=timezone.utc).isoformat()
        assert "generation 2" in redisq("topics", "rewind", "billing-on-order", "--to", when)
        assert len(topics.read("orders.placed", "billing-on-order", "w1", 100).entries) == 10
        assert json.loads(redisq("topics", "--json", "rewind", "billing-on-order", "--to", "earliest"))["generation"] == 3
        assert topics.read("orders.placed", "billing-on-order", "w1", 100).generation == 3
        with pytest.raises(CommandError, match="no subscription 'nope'") as exc:
            redisq("topics", "rewind", "nope", "--to", "earliest")
        assert exc.value.returncode == 1
        with pytest.raises(CommandError, match="--to 'yesterday'") as exc:
            redisq("topics", "rewind", "audit", "--to", "yesterday")
        assert exc.value.returncode == 2


def test_topics_says_when_redis_is_unreachable_in_one_line(r):
    with events_settings(THREE, REDIS_URL="redis://127.0.0.1:1/0"):
        with pytest.raises(CommandError, match=r"cannot reach Redis at redis://127\.0\.0\.1:1/0") as exc:
            redisq("topics")
        assert exc.value.returncode == 3  # Redis unreachable, as for every subcommand (management/cli/out.py)


def test_lag_metric_and_health_threshold(r):
    with events_settings(THREE, {"orders.placed": {"HEALTH_MAX_LAG": 5}}):
        _half_consumed()
        text = exposition()[0].decode()
        assert 'redisq_subscription_lag{backend="default",subscription="audit",topic="orders.placed"} 10.0' in text
        assert 'redisq_subscription_lag{backend="default",subscription="billing-on-order",topic="orders.placed"} 0.0' in text
        assert 'redisq_subscription_pending{backend="default",subscription="mail-on-order",topic="orders.placed"} 4.0' in text
        out = io.StringIO()
        with pytest.raises(SystemExit) as exc:
            call_command("redisq", "health", "--json", stdout=out)
        assert exc.value.code == 1
        report = json.loads(out.getvalue())
        assert report["subscriptions"]["audit"]["breaches"] == [
            "subscription audit (topic orders.placed) lags 10 entries > 5 (HEALTH_MAX_LAG)"]
        assert report["subscriptions"]["billing-on-order"]["breaches"] == []
        assert any("mail-on-order" in b for b in report["breaches"])
