"""The scheduler and store/scripts/fire.lua against a real redis-server: once per tick, catch-up, overlap, clocks, key slots."""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import pytest
from django.test import override_settings

from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.worker.background.scheduler import Scheduler
from tests.helpers import keys, redis_ms, wait_for
from tests.testapp.tasks import TICKS

TASK = "tests.testapp.tasks.on_tick"


def with_schedules(value: dict[str, Any]):
    from django.conf import settings

    tasks = copy.deepcopy(settings.TASKS)
    tasks["default"]["OPTIONS"]["SCHEDULES"] = value
    return override_settings(TASKS=tasks)


def scheduler(entries: dict[str, Any]) -> Scheduler:
    with with_schedules(entries):
        opts = get_options("default")
        return Scheduler(opts, Broker(opts), threading.Event())


def marker(r, name: str, queue: str = "default") -> dict[str, str]:
    return r.hgetall(keys(queue).schedule(name))


def pending_ticks(r, queue: str = "default") -> list[str]:
    import json

    return sorted(json.loads(r.hget(keys(queue).task(i), "msg"))["kwargs"].get("periodic_tick", "") for i in r.lrange(keys(queue).pending, 0, -1))


def every(seconds: float, **extra: Any) -> dict[str, Any]:
    return {"task": TASK, "every": seconds, "kwargs": {"key": "k"}, "timezone": "UTC", **extra}


# -- the claim ---------------------------------------------------------------


def test_many_schedulers_at_one_instant_enqueue_each_tick_once(r):
    ss = [scheduler({"s": every(60)}) for _ in range(5)]
    s = ss[0].schedules[0]
    now = redis_ms(r)
    tick = s.latest_at(now)
    r.hset(keys().schedule("s"), "last", tick - 60_000)  # the previous tick was claimed
    claims = [x.plan(s, marker(r, "s")["last"], now) for x in ss]  # all read before anyone claims
    results = [x.broker.schedules.fire("default", "s", c) for x, c in zip(ss, claims, strict=True)]
    assert sorted(f.code for f in results) == [0, 0, 0, 0, 1]
    assert r.llen(keys().pending) == 1 and marker(r, "s")["last"] == str(tick)


def test_a_claim_whose_marker_moved_since_it_was_read_is_refused(r):
    x = scheduler({"s": every(60)})
    s = x.schedules[0]
    now = redis_ms(r)
    r.hset(keys().schedule("s"), "last", s.latest_at(now) - 120_000)
    claim = x.plan(s, str(s.latest_at(now) - 180_000), now)  # read before another scheduler's claim
    assert x.broker.schedules.fire("default", "s", claim).code == -1 and r.llen(keys().pending) == 0


def test_a_tick_in_the_future_on_the_redis_clock_is_refused(r):
    from dataclasses import replace

    x = scheduler({"s": every(60)})
    s = x.schedules[0]
    claim = x.plan(s, "", s.latest_at(redis_ms(r)) + 1)
    future = replace(claim, upto=claim.upto + 3_600_000, ticks=[(claim.upto + 3_600_000, claim.ticks[0][1])])
    assert x.broker.schedules.fire("default", "s", future).code == -2 and r.llen(keys().pending) == 0


def test_every_key_the_script_touches_is_in_the_queues_hash_tag(r):
    x = scheduler({"s": every(1, queue_name="emails")})
    s = x.schedules[0]
    assert wait_for(lambda: x.run_once() is not None and r.llen(keys("emails").pending) == 1, timeout=5)
    written = set(r.keys("*"))
    assert written and all("{emails}" in k for k in written), written
    assert keys("emails").schedule("s") in written
    assert 0 < r.pttl(keys("emails").schedule("s")) <= 3 * 7 * 86_400_000
    # the KEYS of one call hash to one slot
    from redis.crc import key_slot

    k = keys("emails")
    assert len({key_slot(key.encode()) for key in (k.pending, k.scheduled, k.schedule(s.name))}) == 1


def test_the_task_learns_its_tick_and_runs_in_a_worker(r, make_worker):
    x = scheduler({"s": every(1)})
    assert wait_for(lambda: x.run_once() is not None and r.llen(keys().pending) == 1, timeout=5)
    [tick] = pending_ticks(r)
    [task_id] = r.lrange(keys().pending, 0, -1)
    assert task_id == x.id_base(x.schedules[0]) + str(marker(r, "s")["last"])
    make_worker(scheduler=False).run()
    assert r.hgetall(TICKS) == {f"k|{tick}": "1"}
    assert tick.endswith("+00:00")


def test_a_task_that_does_not_take_its_tick_gets_only_its_kwargs(r):
    x = scheduler({"s": {"task": "tests.testapp.tasks.no_tick", "every": 1, "kwargs": {"key": "n"}}})
    assert wait_for(lambda: x.run_once() is not None and r.llen(keys().pending) == 1, timeout=5)
    assert '"kwargs":{"key":"n"}' in r.hget(keys().task(r.lindex(keys().pending, 0)), "msg")


# -- catch-up: downtime simulated by setting the marker back ------------------


def downtime(r, x: Scheduler, ticks_back: int) -> tuple[int, int]:
    """The marker says the last claim was ``ticks_back`` ticks before the latest one; returns (now, latest)."""
    s = x.schedules[0]
    now = redis_ms(r)
    latest = s.latest_at(now)
    r.hset(keys().schedule(s.name), "last", latest - ticks_back * s.every_ms)
    return now, latest


def at_phase(r, x: Scheduler, *, after_tick_ms: int = 0, before_next_ms: int = 0) -> None:
    """Wait, on the Redis clock, until now is at least ``after_tick_ms`` past the schedule's latest tick and more than
    ``before_next_ms`` before its next one. A test whose expectation depends on where now falls between two ticks
    waits for a phase that gives one answer (at most the window asked for) instead of skipping."""
    s = x.schedules[0]
    deadline = time.monotonic() + (after_tick_ms + before_next_ms) / 1000 + 5
    while True:
        now = redis_ms(r)
        if now - s.latest_at(now) >= after_tick_ms and s.next_after(now) - now > before_next_ms:
            return
        assert time.monotonic() < deadline, "the schedule's phase never came"
        time.sleep(0.05)


def claim_now(r, x: Scheduler):
    s = x.schedules[0]
    return x.broker.schedules.fire("default", s.name, x.plan(s, marker(r, s.name)["last"], redis_ms(r)))


def test_catch_up_latest_runs_the_newest_missed_tick_once_and_counts_the_rest(r):
    x = scheduler({"s": every(600)})
    at_phase(r, x, before_next_ms=10_000)  # the claim falls before the next tick
    _, latest = downtime(r, x, 5)
    fired = claim_now(r, x)
    assert (fired.code, fired.fired, fired.missed) == (1, 1, 4)
    assert r.lrange(keys().pending, 0, -1) == [x.id_base(x.schedules[0]) + str(latest)]
    assert claim_now is not None and x.plan(x.schedules[0], marker(r, "s")["last"], redis_ms(r)) is None  # nothing more due
    assert marker(r, "s")["missed"] == "4"


def test_catch_up_latest_does_not_run_a_tick_older_than_its_window(r):
    x = scheduler({"s": {"task": TASK, "cron": "0 0 1 1 *", "kwargs": {"key": "k"}, "timezone": "UTC"}})  # yearly: window 1 h
    s = x.schedules[0]
    latest = s.latest_at(redis_ms(r))
    r.hset(keys().schedule("s"), "last", s.latest_at(latest - 1))
    fired = claim_now(r, x)
    assert (fired.code, fired.fired, fired.missed) == (1, 0, 1) and r.llen(keys().pending) == 0


def test_catch_up_skip_runs_no_missed_tick(r):
    x = scheduler({"s": every(600, catch_up="skip")})
    now, latest = downtime(r, x, 3)
    fired = claim_now(r, x)
    on_time = now - latest <= 10_000
    assert (fired.fired, fired.missed) == ((1, 2) if on_time else (0, 3))


def test_catch_up_all_runs_every_missed_tick_at_most_100(r):
    x = scheduler({"s": every(60, catch_up="all")})
    _, latest = downtime(r, x, 7)
    fired = claim_now(r, x)
    assert (fired.fired, fired.missed) == (7, 0)
    assert len(set(r.lrange(keys().pending, 0, -1))) == 7
    r.flushall()  # (the tasks of those 7 ticks would stop their ids being enqueued again)
    _, latest = downtime(r, x, 150)
    fired = claim_now(r, x)
    assert (fired.fired, fired.missed) == (100, 50)
    assert max(int(i.rsplit("-", 1)[1]) for i in r.lrange(keys().pending, 0, -1)) == latest


def test_a_new_schedule_does_not_catch_up(r):
    x = scheduler({"s": every(3600)})
    s = x.schedules[0]
    at_phase(r, x, after_tick_ms=10_001)  # past the window in which the latest tick is still on time
    assert x.plan(s, "", redis_ms(r)) is None


# -- overlap -----------------------------------------------------------------


def test_without_overlap_a_tick_is_skipped_while_the_previous_run_is_unfinished(r, make_worker):
    x = scheduler({"s": every(60, allow_overlap=False, catch_up="all")})
    downtime(r, x, 3)
    fired = claim_now(r, x)
    assert (fired.fired, fired.skipped) == (1, 2)  # the first is still pending when the next comes up
    downtime(r, x, 1)
    r.hset(marker_key := keys().schedule("s"), "last", r.hget(marker_key, "last"))
    assert claim_now(r, x).skipped in (0, 1)
    make_worker(scheduler=False).run()  # the previous run finishes
    downtime(r, x, 1)
    fired = claim_now(r, x)
    assert (fired.fired, fired.skipped) == (1, 0)
    assert int(marker(r, "s")["skipped"]) >= 2


def test_with_overlap_every_tick_runs(r):
    x = scheduler({"s": every(60, catch_up="all")})
    at_phase(r, x, before_next_ms=2_000)  # a tick passing between the setup and the claim makes it four (seen once)
    downtime(r, x, 3)
    assert claim_now(r, x).fired == 3


# -- clocks ------------------------------------------------------------------


@pytest.mark.parametrize("offset_hours", [-5, 7])
def test_a_worker_whose_clock_is_hours_off_fires_on_the_redis_clock(r, monkeypatch, offset_hours):
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + offset_hours * 3600)
    x = scheduler({"s": every(1)})
    t = threading.Thread(target=x.loop, daemon=True)
    t.start()
    try:
        assert wait_for(lambda: r.llen(keys().pending) >= 3, timeout=8)
    finally:
        x.stop.set()
        t.join(5)
    now = redis_ms(r)
    ticks = sorted(int(i.rsplit("-", 1)[1]) for i in r.lrange(keys().pending, 0, -1))
    assert all(now - 6000 < tk <= now for tk in ticks) and len(set(ticks)) == len(ticks)
    assert ticks == list(range(ticks[0], ticks[-1] + 1000, 1000))  # none missed, none twice


def test_three_in_process_schedulers_fire_each_second_once(r):
    xs = [scheduler({"s": every(1), "t": every(2, kwargs={"key": "t"})}) for _ in range(3)]
    threads = [threading.Thread(target=x.loop, daemon=True) for x in xs]
    start = redis_ms(r)
    for t in threads:
        t.start()
    try:  # the point: real ticks (every 1 s, read from Redis TIME) fired by three racing schedulers, four of "s"
        assert wait_for(lambda: int(marker(r, "s").get("fired", 0)) >= 4 and int(marker(r, "t").get("fired", 0)) >= 2,
                        timeout=15), (marker(r, "s"), marker(r, "t"))
    finally:
        for x in xs:
            x.stop.set()
        for t in threads:
            t.join(5)
    ids = r.lrange(keys().pending, 0, -1)
    assert len(ids) == len(set(ids))
    s_ticks = sorted(int(i.rsplit("-", 1)[1]) for i in ids if i.startswith(xs[0].id_base(xs[0].schedules[0])))
    assert s_ticks == list(range(s_ticks[0], s_ticks[-1] + 1000, 1000)) and len(s_ticks) >= 4
    assert s_ticks[0] >= start - 1000
    assert int(marker(r, "s")["fired"]) == len(s_ticks) and "missed" not in marker(r, "s")


def test_after_redis_failed_the_scheduler_looks_again_within_a_quarter_second_and_claims_once_it_is_back():
    """A one-second schedule must not lose a tick to a short outage (a restart, a failover): a scheduler that
    waited its full second after a failure found the tick past its on-time window, and ``skip`` and ``latest``
    gave it up. So after each failed look it waits at most FAILED_MAX (0.25 s) before the next: read from the
    waits it asks of its stop event (its clock seam), over three looks at a stopped server, not from a rate of
    looks in wall time (each look is the client's own retries, ~0.35 s, longer on a loaded machine)."""
    import redis as redis_py

    from django_redisq.testing import RedisServer
    from django_redisq.worker.background.scheduler import FAILED_MAX

    class Counting(Scheduler):
        looks = 0

        def run_once(self) -> float:
            self.looks += 1
            return super().run_once()

    class Waits(threading.Event):
        """The stop event, remembering each wait the scheduler asks of it."""

        def __init__(self) -> None:
            super().__init__()
            self.asked: list[float | None] = []

        def wait(self, timeout: float | None = None) -> bool:
            self.asked.append(timeout)
            return super().wait(timeout)

    assert FAILED_MAX <= 0.25
    server = RedisServer().start()
    try:
        tasks = copy.deepcopy(settings_tasks())
        tasks["default"]["OPTIONS"].update(REDIS_URL=server.url, SCHEDULES={"s": every(1, catch_up="skip")})
        stop = Waits()
        with override_settings(TASKS=tasks):
            opts = get_options("default")
            x = Counting(opts, Broker(opts), stop)
        server.stop()
        thread = threading.Thread(target=x.loop, daemon=True)
        thread.start()
        assert wait_for(lambda: x.looks >= 4, timeout=20), x.looks  # three failed looks, each followed by its wait
        waits_while_down = stop.asked[:3]
        server.start()
        c = redis_py.Redis.from_url(server.url, decode_responses=True)
        assert wait_for(lambda: c.hget(keys().schedule("s"), "last"), timeout=10), "never claimed after the restart"
        x.stop.set()
        thread.join(5)
        assert len(waits_while_down) == 3 and all(w is not None and w <= FAILED_MAX for w in waits_while_down), waits_while_down
        assert c.llen(keys().pending) >= 1
    finally:
        server.stop()
        server.cleanup()


def settings_tasks() -> dict[str, Any]:
    from django.conf import settings

    return settings.TASKS


# -- the command ---------------------------------------------------------------


def test_redisq_schedules_lists_next_and_last_runs_and_counts(r):
    import json
    from io import StringIO

    from django.core.management import call_command

    entries = {"s": every(60, catch_up="all"), "broken": {"task": TASK, "cron": "nope"}}
    x = scheduler({"s": every(60, catch_up="all")})
    downtime(r, x, 2)
    claim_now(r, x)
    with with_schedules(entries):
        out = StringIO()
        call_command("redisq", "schedules", "--json", stdout=out)
        rows = {row["name"]: row for row in json.loads(out.getvalue())}
        text = StringIO()
        call_command("redisq", "schedules", stdout=text)
    assert rows["s"]["fired"] == 2 and rows["s"]["expression"] == "every 60 s" and rows["s"]["timezone"] == "UTC"
    assert rows["s"]["next_run"] and rows["s"]["last_run"] and rows["s"]["last_id"].startswith("p")
    assert rows["broken"]["problems"] and "E023" in rows["broken"]["problems"][0]
    assert "NOT RUN" in text.getvalue() and "every 60 s" in text.getvalue()


def test_a_non_burst_worker_runs_the_scheduler_and_no_scheduler_opts_out(r):
    from django_redisq.worker.worker import Worker

    with with_schedules({"s": every(1)}):
        assert Worker(burst=False).scheduler is not None
        assert Worker(burst=False, scheduler=False).scheduler is None
        assert Worker(burst=True).scheduler is None
