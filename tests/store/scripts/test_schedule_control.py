"""schedule_pause.lua, schedule_resume.lua and schedule_run.lua, each called directly through the broker."""

import pytest

from tests.helpers import keys, message, redis_ms, seed_pending, where_is

K = keys()
MARKER = K.schedule("s")
DAY = 86_400_000


def test_pause_sets_paused_and_by_and_stops_the_expiry(r, broker):
    r.hset(MARKER, mapping={"last": 1000, "fired": 3})
    r.pexpire(MARKER, DAY)
    before = redis_ms(r)
    changed, since = broker.schedules.pause("default", "s", "alice")
    assert changed and before <= since <= redis_ms(r)
    assert r.hgetall(MARKER) == {"last": "1000", "fired": "3", "paused": str(since), "paused_by": "alice"}
    assert r.pttl(MARKER) == -1


@pytest.mark.parametrize("exists", [True, False], ids=["marker", "no-marker"])
def test_pause_twice_keeps_the_first(r, broker, exists):
    if exists:
        r.hset(MARKER, "last", 1000)
    _, since = broker.schedules.pause("default", "s", "alice")
    assert broker.schedules.pause("default", "s", "bob") == (False, since)
    assert r.hget(MARKER, "paused_by") == "alice"


def test_resume_keeps_the_window_and_brings_the_expiry_back(r, broker):
    _, since = broker.schedules.pause("default", "s", "alice")
    assert broker.schedules.resume("default", "s", DAY) == since
    m = r.hgetall(MARKER)
    assert (m["paused"], m["paused_by"], m["paused_from"]) == ("", "", str(since)) and since <= int(m["resumed_at"]) <= redis_ms(r)
    assert 0 < r.pttl(MARKER) <= DAY


@pytest.mark.parametrize("marker", [{}, {"last": "1000"}, {"paused": ""}], ids=["none", "unpaused", "resumed"])
def test_resume_of_a_schedule_not_paused_changes_nothing(r, broker, marker):
    if marker:
        r.hset(MARKER, mapping=marker)
    assert broker.schedules.resume("default", "s", DAY) is None
    assert r.hgetall(MARKER) == marker and r.pttl(MARKER) in (-1, -2)


def test_run_stores_a_pending_task_and_records_it_without_moving_last(r, broker):
    r.hset(MARKER, mapping={"last": 1000, "last_id": "p-1000"})
    at = broker.schedules.run_now("default", "s", "p-mabc", message(), "tests.testapp.tasks.add", DAY)
    assert at is not None and where_is(r, "p-mabc") == ["pending"]
    assert r.hget(K.task("p-mabc"), "task") == "tests.testapp.tasks.add"
    m = r.hgetall(MARKER)
    assert (m["last"], m["last_id"], m["manual_id"], m["manual_at"]) == ("1000", "p-1000", "p-mabc", str(at))
    assert 0 < r.pttl(MARKER) <= DAY


def test_run_keeps_a_paused_marker_from_expiring(r, broker):
    broker.schedules.pause("default", "s", "alice")
    broker.schedules.run_now("default", "s", "p-mabc", message(), "tests.testapp.tasks.add", DAY)
    assert r.pttl(MARKER) == -1 and r.hget(MARKER, "paused")


def test_run_with_an_id_that_exists_changes_nothing(r, broker):
    seed_pending(r, "p-mabc")
    assert broker.schedules.run_now("default", "s", "p-mabc", message(), "tests.testapp.tasks.add", DAY) is None
    assert r.llen(K.pending) == 1 and not r.exists(MARKER)


@pytest.mark.parametrize("call", ["pause", "resume", "run"])
def test_a_marker_of_the_wrong_type_is_set_aside(r, broker, call):
    r.set(MARKER, "not-a-hash")
    {"pause": lambda: broker.schedules.pause("default", "s", "alice"),
     "resume": lambda: broker.schedules.resume("default", "s", DAY),
     "run": lambda: broker.schedules.run_now("default", "s", "p-mabc", message(), "tests.testapp.tasks.add", DAY)}[call]()
    assert r.get(K.corrupt(MARKER)) == "not-a-hash" and r.pttl(K.corrupt(MARKER)) > 0
