"""pause.lua and resume.lua: the pause key, on the Redis clock, and what fetch.lua does while it exists."""

import pytest

from django_redisq.exceptions import QueuePaused
from tests.helpers import keys, redis_ms, seed_pending


def test_pause_sets_the_key_once_with_the_redis_time_and_who(r, broker):
    before = redis_ms(r)
    changed, value = broker.operator.pause_queue("default", "ops")
    since, _, who = value.partition("|")
    assert changed and who == "ops" and before <= int(since) <= redis_ms(r)
    assert r.get(keys().paused) == value and r.pttl(keys().paused) == -1  # lasts until resumed
    assert broker.operator.pause_queue("default", "someone else") == (False, value)  # the first pause stays
    assert broker.operator.paused_states(["default", "emails"]) == {"default": value, "emails": None}


def test_resume_deletes_it_and_says_which_pause_ended(r, broker):
    assert broker.operator.resume_queue("default") is None
    _, value = broker.operator.pause_queue("default", "ops")
    assert broker.operator.resume_queue("default") == value and not r.exists(keys().paused)
    assert broker.operator.resume_queue("default") is None


def test_while_paused_enqueues_succeed_and_fetch_takes_nothing(r, broker):
    broker.heartbeat(["default"], "w1", {})
    broker.operator.pause_queue("default", "ops")
    seed_pending(r, "t0")
    with pytest.raises(QueuePaused):
        broker.fetch("default", "w1", 5)
    assert r.lrange(keys().pending, 0, -1) == ["t0"]
    broker.operator.resume_queue("default")
    assert [d.id for d in broker.fetch("default", "w1", 5)] == ["t0"]


def test_a_pause_key_of_another_type_is_set_aside(r, broker):
    r.rpush(keys().paused, "x")
    assert broker.operator.paused_states(["default"]) == {"default": ""}  # fetch.lua sees it exist: paused
    changed, _ = broker.operator.pause_queue("default", "ops")
    assert changed and r.type(keys().paused) == "string" and r.type(keys().paused + ":corrupt") == "list"
