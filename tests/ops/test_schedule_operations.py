"""Pause, resume and run now (ops/operations.py, store/scripts/schedule_*.lua, fire.lua) against a real redis-server."""

from __future__ import annotations

import io
import json
import threading
from datetime import datetime

import pytest
from django.core.management import CommandError, call_command

from django_redisq.ops.inspector import Inspector, UnknownSchedule, schedule_rows
from django_redisq.ops.operations import ScheduleOperations
from django_redisq.schedules.ticks import id_base
from django_redisq.settings.read import get_options
from tests.helpers import keys, redis_ms, wait_for
from tests.testapp.tasks import TICKS
from tests.worker.test_scheduler import TASK, at_phase, claim_now, downtime, every, marker, pending_ticks, scheduler, with_schedules


def ops() -> ScheduleOperations:
    return ScheduleOperations(Inspector(get_options("default")))


def tick_of(task_id: str) -> int:
    return int(task_id.rsplit("-", 1)[1])


# -- pause and resume ----------------------------------------------------------


def test_a_paused_schedule_does_not_fire_on_three_schedulers_and_fires_again_once_resumed(r):
    """Three schedulers, back after five ticks away, find the schedule paused since two and a half ticks ago: they
    run the two ticks before the pause, hold the three after it, and once resumed fire every tick after the resume.

    The ticks that pass while paused are travelled to, not waited for: the marker's last claim and the pause's
    start are moved back on the Redis clock (the only clock the scheduler reads)."""
    entries = {"s": every(1, catch_up="all")}  # all: the claim lists every due tick, so each is run or held
    with with_schedules(entries):
        xs = [scheduler(entries) for _ in range(3)]
        s = xs[0].schedules[0]
        latest = s.latest_at(redis_ms(r))
        r.hset(keys().schedule("s"), "last", latest - 5000)  # claimed five ticks ago, nothing since
        paused = ops().pause("s", "tests")
        assert paused.changed and paused.at is not None
        paused_ms = latest - 2500  # the pause began between the third and the second tick before the latest
        r.hset(keys().schedule("s"), "paused", paused_ms)
        threads = [threading.Thread(target=x.loop, daemon=True) for x in xs]
        for t in threads:
            t.start()
        try:
            assert wait_for(lambda: int(marker(r, "s")["last"]) >= latest, timeout=5)  # the schedulers caught up
            during = r.lrange(keys().pending, 0, -1)
            assert sorted(tick_of(i) for i in during) == [latest - 4000, latest - 3000]  # the ticks before the pause
            assert int(marker(r, "s")["paused_ticks"]) >= 3
            assert int(marker(r, "s")["last"]) >= paused_ms + 2000  # the claims kept up with the clock
            resumed = ops().resume("s", "tests")
            assert resumed.changed
            resumed_ms = int(marker(r, "s")["resumed_at"])
            assert wait_for(lambda: r.llen(keys().pending) >= len(during) + 2, timeout=5)  # firing again
        finally:
            for x in xs:
                x.stop.set()
            for t in threads:
                t.join(5)
    ids = r.lrange(keys().pending, 0, -1)
    assert len(ids) == len(set(ids))
    after = sorted(tick_of(i) for i in ids if i not in during)
    assert after and all(t > resumed_ms for t in after), "a tick that passed while paused ran after the resume"
    assert after == list(range(after[0], after[-1] + 1000, 1000))  # every tick after the resume, once


def test_ticks_that_passed_while_paused_are_not_run_after_resume_even_if_no_worker_ran(r):
    """No scheduler ran during the pause: three ticks passed unclaimed, and the first claim after the resume lists
    them all (catch_up=all) and runs none. Travelled to on the Redis clock: the last claim and the pause's start
    moved three ticks back, a minute apart, so no tick falls between the resume and the claim."""
    entries = {"s": every(60, catch_up="all")}
    x = scheduler(entries)
    at_phase(r, x, before_next_ms=2000)
    _, latest = downtime(r, x, 3)  # claimed up to three ticks ago
    with with_schedules(entries):
        ops().pause("s", "tests")
        r.hset(keys().schedule("s"), "paused", latest - 3 * 60_000 + 1)  # paused just after that claim
        ops().resume("s", "tests")
    fired = claim_now(r, x)  # the first claim after the resume: catch_up=all lists them all
    assert (fired.code, fired.fired, fired.missed, fired.paused) == (1, 0, 0, 3)
    assert r.llen(keys().pending) == 0


def test_catch_up_latest_after_a_resume_does_not_run_the_newest_paused_tick(r):
    x = scheduler({"s": every(600)})
    at_phase(r, x, after_tick_ms=1000)
    now, latest = downtime(r, x, 3)
    r.hset(keys().schedule("s"), mapping={"paused_from": latest - 1, "resumed_at": now})  # a pause over the newest tick
    fired = claim_now(r, x)
    assert (fired.fired, fired.missed, fired.paused) == (0, 2, 1) and r.llen(keys().pending) == 0
    assert marker(r, "s")["last"] == str(latest)


def test_a_tick_before_the_pause_still_runs(r):
    x = scheduler({"s": every(600, catch_up="all")})
    at_phase(r, x, before_next_ms=10_000)
    _, latest = downtime(r, x, 1)
    r.hset(keys().schedule("s"), "paused", latest + 1)  # paused just after the tick, before its claim
    fired = claim_now(r, x)
    assert (fired.fired, fired.paused) == (1, 0)


def test_pause_and_resume_are_idempotent_and_say_so(r):
    scheduler({"s": every(60)})
    with with_schedules({"s": every(60)}):
        first = ops().pause("s", "alice")
        again = ops().pause("s", "bob")
        assert first.changed and not again.changed and again.at == first.at
        assert marker(r, "s")["paused_by"] == "alice"
        assert ops().resume("s", "alice").changed
        assert not ops().resume("s", "alice").changed
        assert marker(r, "s")["paused"] == "" and marker(r, "s")["paused_from"] == str(int(first.at.timestamp() * 1000))


def test_a_paused_marker_does_not_expire_and_a_resumed_one_does(r):
    x = scheduler({"s": every(1)})
    with with_schedules({"s": every(1)}):
        assert wait_for(lambda: x.run_once() is not None and r.llen(keys().pending) == 1, timeout=5)
        assert r.pttl(keys().schedule("s")) > 0
        ops().pause("s", "tests")
        assert r.pttl(keys().schedule("s")) == -1
        assert wait_for(lambda: x.run_once() is not None and int(marker(r, "s").get("paused_ticks", 0)) >= 1, timeout=5)
        assert r.pttl(keys().schedule("s")) == -1  # a claim while paused does not bring the expiry back
        ops().resume("s", "tests")
        assert 0 < r.pttl(keys().schedule("s")) <= 7 * 86_400_000


def test_unknown_and_broken_schedules_cannot_be_changed(r):
    with with_schedules({"s": every(60), "broken": {"task": TASK, "cron": "nope"}}):
        with pytest.raises(UnknownSchedule, match="no schedule 'nope'"):
            ops().pause("nope", "tests")
        with pytest.raises(UnknownSchedule, match=r"has errors and is not run: \[E023\]"):
            ops().run_now("broken", "tests")
    assert r.keys("*") == []


# -- run now -------------------------------------------------------------------


def test_run_now_enqueues_exactly_one_task_with_its_own_id_and_leaves_the_ticks_alone(r, make_worker):
    x = scheduler({"s": every(3600)})
    s = x.schedules[0]
    r.hset(keys().schedule("s"), "last", s.latest_at(redis_ms(r)))
    before = marker(r, "s")
    with with_schedules({"s": every(3600)}):
        start = redis_ms(r)
        change = ops().run_now("s", "tests")
    assert r.lrange(keys().pending, 0, -1) == [change.task_id]
    assert change.task_id.startswith(id_base(s) + "m") and change.task_id != id_base(s) + before["last"]
    after = marker(r, "s")
    assert after["last"] == before["last"] and after["manual_id"] == change.task_id and "fired" not in after
    [tick] = pending_ticks(r)
    assert start - 5 <= datetime.fromisoformat(tick).timestamp() * 1000 <= redis_ms(r)  # the current time, Redis clock
    assert x.plan(s, after["last"], redis_ms(r)) is None  # nothing became due
    make_worker(scheduler=False).run()
    assert r.hgetall(TICKS) == {f"k|{tick}": "1"}


def test_run_now_works_while_paused_and_keeps_the_pause(r):
    scheduler({"s": every(60)})
    with with_schedules({"s": every(60)}):
        ops().pause("s", "tests")
        change = ops().run_now("s", "tests")
        assert r.lrange(keys().pending, 0, -1) == [change.task_id]
        assert marker(r, "s")["paused"] and r.pttl(keys().schedule("s")) == -1


def test_without_overlap_a_tick_is_skipped_while_a_run_now_is_unfinished(r, make_worker):
    entries = {"s": every(60, allow_overlap=False, catch_up="all")}
    x = scheduler(entries)
    downtime(r, x, 1)
    with with_schedules(entries):
        ops().run_now("s", "tests")
    fired = claim_now(r, x)
    assert (fired.fired, fired.skipped) == (0, 1) and r.llen(keys().pending) == 1
    make_worker(scheduler=False).run()
    downtime(r, x, 1)
    assert claim_now(r, x).fired == 1


# -- what the admin and the command show ---------------------------------------


def test_rows_show_the_pause_the_counts_and_the_last_run(r, make_worker):
    entries = {"s": every(300), "c": {"task": TASK, "cron": "0 3 * * *", "timezone": "Europe/Berlin", "kwargs": {"key": "c"}}}
    with with_schedules(entries):
        ops().pause("s", "alice")
        change = ops().run_now("c", "bob")
        rows = {row.name: row for row in schedule_rows(Inspector(get_options("default")))}
        assert rows["s"].paused and rows["s"].paused_by == "alice" and rows["s"].paused_at is not None
        assert rows["s"].description == "every 5 minutes" and rows["s"].last_run is None and rows["s"].last_state == ""
        assert rows["c"].description == "daily at 03:00" and not rows["c"].paused
        assert (rows["c"].last_id, rows["c"].last_state, rows["c"].last_manual) == (change.task_id, "pending", True)
        make_worker(scheduler=False).run()
        assert schedule_rows(Inspector(get_options("default")))[0].last_state == "finished"
        r.delete(keys().task(change.task_id))  # its result expired
        row = next(x for x in schedule_rows(Inspector(get_options("default"))) if x.name == "c")
        assert row.last_id == change.task_id and row.last_state == ""


def run_command(*args: str) -> str:
    out = io.StringIO()
    call_command("redisq", *args, stdout=out)
    return out.getvalue()


def test_the_command_pauses_resumes_and_runs_now(r):
    with with_schedules({"s": every(60)}):
        assert run_command("schedules", "pause", "s") == "paused schedule s\n"
        assert "was paused already" in run_command("schedules", "pause", "s")
        listing = run_command("schedules")
        assert "PAUSED since" in listing and "manage.py redisq (" in listing
        rows = json.loads(run_command("schedules", "--json"))
        assert rows[0]["paused"] is True and rows[0]["paused_ticks"] == 0 and rows[0]["description"] == "every minute"
        data = json.loads(run_command("schedules", "run", "s", "--json"))
        assert data["action"] == "run" and r.lrange(keys().pending, 0, -1) == [data["task_id"]]
        assert json.loads(run_command("schedules", "--json", "resume", "s"))["changed"] is True
        assert run_command("schedules", "resume", "s") == "schedule s was not paused\n"
        assert " active" in run_command("schedules")
        with pytest.raises(CommandError, match="no schedule 'nope'"):
            run_command("schedules", "run", "nope")
