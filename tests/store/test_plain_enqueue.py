"""The common enqueue without a script (store/broker/plain.py): what it sends, and every way its outcome can be unknown."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import redis

from django_redisq.compat import TaskResultStatus
from django_redisq.connection.async_wire import WireProtocol
from django_redisq.connection.wire import Wire
from django_redisq.store.broker import Broker
from django_redisq.store.reads.priority import MARKER
from django_redisq.store.steps.replies import NewTask
from tests.helpers import command_calls, drain, keys, message, redis_ms, where_is
from tests.testapp import tasks


@pytest.fixture(autouse=True)
def _plain_pool(broker: Broker) -> None:
    if broker._plain_enqueue() is False:
        pytest.skip("a cluster's or a sentinel's client keeps enqueue.lua for every task")


def calls(r: redis.Redis) -> dict[str, int]:
    stats = r.info("commandstats")
    return {name[len("cmdstat_"):]: int(v["calls"]) for name, v in stats.items()}


def pushed_twice_ran_once(r: redis.Redis, make_worker, result, value: int) -> None:
    """The outcome of an enqueue whose two commands ran but whose replies were lost: enqueue_again.lua pushed the id
    once more, and the copy is absorbed at fetch: the task runs once, with its result."""
    assert r.lrange(keys().pending, 0, -1) == [result.id, result.id]
    drain(make_worker, [result])
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == value
    assert r.get(keys().counter("processed")) == "1"


def test_a_plain_delay_is_one_hset_and_one_lpush_on_the_redis_clock(r):
    tasks.add.delay(1, 2)  # the process reads the Redis clock (TIME), then once a minute
    before = calls(r)
    result = [tasks.add.delay(3, i) for i in range(20)][-1]
    after = calls(r)
    sent = {name: after[name] - before.get(name, 0) for name in after if after[name] != before.get(name, 0)}
    sent.pop("info", None)
    assert sent.pop("time", 0) <= 1  # one of these calls may fall at the minute (the clock read by an earlier test)
    assert sent == {"hset": 20, "lpush": 20}
    stored = r.hgetall(keys().task(result.id))
    assert stored["state"] == "pending" and stored["deliveries"] == "0" and stored["task"] == "tests.testapp.tasks.add"
    assert abs(int(stored["enqueued_at"]) - redis_ms(r)) < 1000  # the Redis clock, as this process last read it
    assert result.enqueued_at is not None and int(result.enqueued_at.timestamp() * 1000) == int(stored["enqueued_at"])
    assert where_is(r, result.id) == ["pending"]


@pytest.mark.parametrize("waits", ["sync", "async"])
def test_the_carried_clock_is_never_ahead_of_the_server_whose_reply_was_slow(waits):
    """A server that answered ``TIME`` at the end of a slow round trip (here the local clock, 50 ms late): the carried
    time may lag the server's, never lead it, or a task's enqueued_at would come after a read that follows it (a
    negative age in ``redisq stats``, seen in CI)."""
    import time

    from django_redisq.store.broker.plain import Clock

    def server_ms() -> int:
        time.sleep(0.05)  # the request's way there
        return int(time.time() * 1000)  # read at the end: the reply is back at once

    async def aserver_ms() -> int:
        return server_ms()

    clock = Clock(server_ms)
    carried = clock.now_ms() if waits == "sync" else asyncio.run(clock.anow_ms(aserver_ms))
    assert carried <= int(time.time() * 1000)  # the midpoint would have carried it 25 ms ahead


def test_what_needs_a_check_still_goes_through_the_script(r):
    tasks.noop.using(priority=1).delay(0)  # the script is loaded (a first EVALSHA may meet NOSCRIPT)
    before = command_calls(r, "evalsha")
    tasks.add.using(priority=5).delay(1, 2)
    tasks.add.using(run_after=timedelta(seconds=60)).delay(1, 2)
    tasks.charge.delay(7)  # an idempotency key
    assert command_calls(r, "evalsha") - before == 3
    assert [where_is(r, x) for x in r.zrange(keys().scheduled, 0, -1)] == [["scheduled"]]


def test_a_batch_is_one_lpush_in_the_order_of_the_calls(r):
    results = tasks.add.enqueue_many([([i, i], {}) for i in range(20)])
    assert r.lrange(keys().pending, 0, -1) == [x.id for x in reversed(results)]  # the first call is taken first


def test_a_pending_list_of_the_wrong_type_is_set_aside_and_the_task_queued(r):
    r.set(keys().pending, "written by another program")
    result = tasks.add.delay(1, 2)
    assert where_is(r, result.id) == ["pending"]
    assert r.get(keys().pending + ":corrupt") == "written by another program"


def test_an_unknown_outcome_is_settled_by_enqueue_again(r, broker, make_worker):
    """The three outcomes a lost reply can hide, each settled without a second run: nothing ran (stored now), both
    ran (a copy pushed, absorbed at fetch), a worker took it since (left alone)."""
    k = keys()
    item = NewTask("never-stored", message(args=[1, 2]), "tests.testapp.tasks.add")
    broker._enqueue_again(k, [item])
    assert where_is(r, "never-stored") == ["pending"]
    broker._enqueue_again(k, [item])  # both ran: the id is pushed once more
    assert r.lrange(k.pending, 0, -1) == ["never-stored", "never-stored"]
    drain(make_worker, [])
    assert r.hget(k.task("never-stored"), "state") == "finished"
    assert r.llen(k.pending) == 0 and r.get(k.counter("processed")) == "1"  # the copy was absorbed, not run
    broker._enqueue_again(k, [item])  # taken and finished since: nothing to do
    assert r.llen(k.pending) == 0


def test_a_connection_lost_mid_enqueue_runs_the_task_once(r, make_worker, monkeypatch):
    """The two commands ran, then the connection failed before their replies: the enqueue still answers, and the
    task runs once."""
    real = Wire.send_all

    def lost(self: Wire, commands):
        real(self, commands)
        raise redis.ConnectionError("the connection was lost before the replies")

    monkeypatch.setattr(Wire, "send_all", lost)
    result = tasks.add.delay(2, 3)
    monkeypatch.undo()
    pushed_twice_ran_once(r, make_worker, result, 5)


def test_a_plain_task_behind_wake_up_markers_is_counted_listed_and_run(r, make_worker):
    """A prioritized task on an idle queue leaves a marker at the LIST's tail; a plain LPUSH puts an id at its head.
    The counts, the admin's ready page and a worker all see one plain task and one prioritized, no marker."""
    from django_redisq.ops.inspector import Inspector
    from django_redisq.store.reads.priority import ready_page

    inspector = Inspector.for_alias()

    urgent = tasks.add.using(priority=10).delay(1, 1)
    assert r.lrange(keys().pending, 0, -1) == [MARKER]
    plain = tasks.add.delay(2, 2)
    assert r.lrange(keys().pending, 0, -1) == [plain.id, MARKER]
    total, page = ready_page(r, keys(), 0, 10)
    assert total == 2 and page == [(urgent.id, 10), (plain.id, 0)]
    assert [q.pending for q in inspector.stats() if q.queue == "default"] == [2]
    assert [q.pending for q in inspector.figures() if q.queue == "default"] == [2]
    drain(make_worker, [urgent, plain])
    assert r.get(keys().counter("processed")) == "2" and r.llen(keys().pending) == 0



# -- the same on the event loop (store/broker/async_broker.py) ------------------------------------------------------


def test_a_plain_aenqueue_is_one_hset_and_one_lpush_on_the_redis_clock(r):
    asyncio.run(tasks.add.aenqueue(1, 2))  # the broker's Redis clock is read, then once a minute

    async def twenty() -> list[Any]:
        return [await tasks.add.aenqueue(3, i) for i in range(20)]

    before = calls(r)
    result = asyncio.run(twenty())[-1]
    after = calls(r)
    sent = {name: after[name] - before.get(name, 0) for name in after if after[name] != before.get(name, 0)}
    # asyncio.run: a new loop, so a new connection and its handshake (Redis 6.2 counts CLIENT SETNAME as "client")
    handshake = {"info", "hello", "select", "auth", "ping", "client", "client|setname", "client|setinfo"}
    assert sent.pop("time", 0) <= 1  # one of these calls may fall at the minute (the clock read by an earlier test)
    assert {name: n for name, n in sent.items() if name not in handshake} == {"hset": 20, "lpush": 20}
    stored = r.hgetall(keys().task(result.id))
    assert stored["state"] == "pending" and stored["deliveries"] == "0" and stored["task"] == "tests.testapp.tasks.add"
    assert abs(int(stored["enqueued_at"]) - redis_ms(r)) < 1000
    assert result.enqueued_at is not None and int(result.enqueued_at.timestamp() * 1000) == int(stored["enqueued_at"])
    assert where_is(r, result.id) == ["pending"]


def test_an_aenqueue_that_needs_a_check_still_goes_through_the_script(r):
    async def send() -> None:
        await tasks.noop.using(priority=1).aenqueue(0)  # the script is loaded
        before = command_calls(r, "evalsha")
        await tasks.add.using(priority=5).aenqueue(1, 2)
        await tasks.add.using(run_after=timedelta(seconds=60)).aenqueue(1, 2)
        await tasks.charge.aenqueue(7)  # an idempotency key
        assert command_calls(r, "evalsha") - before == 3

    asyncio.run(send())
    assert [where_is(r, x) for x in r.zrange(keys().scheduled, 0, -1)] == [["scheduled"]]


def test_a_pending_list_of_the_wrong_type_is_set_aside_and_the_aenqueued_task_queued(r):
    r.set(keys().pending, "written by another program")
    result = asyncio.run(tasks.add.aenqueue(1, 2))
    assert where_is(r, result.id) == ["pending"]
    assert r.get(keys().pending + ":corrupt") == "written by another program"


def test_a_connection_lost_mid_aenqueue_runs_the_task_once(r, make_worker, monkeypatch):
    """The two commands ran, then the loop's connection failed before their replies: the aenqueue still answers
    (enqueue_again.lua on a new connection), and the task runs once."""
    real = WireProtocol.call_many

    async def lost(self: WireProtocol, commands):
        await real(self, commands)
        self._abort(redis.ConnectionError, "the connection was lost before the replies")
        raise redis.ConnectionError("the connection was lost before the replies")

    monkeypatch.setattr(WireProtocol, "call_many", lost)
    result = asyncio.run(tasks.add.aenqueue(2, 3))
    monkeypatch.undo()
    pushed_twice_ran_once(r, make_worker, result, 5)


def test_a_connection_lost_before_the_aenqueue_was_sent_stores_it_once(r, make_worker, monkeypatch):
    """Nothing ran: enqueue_again.lua stores and queues it, once."""

    async def refused(self: WireProtocol, commands):
        raise redis.ConnectionError("the connection was lost before the write")

    monkeypatch.setattr(WireProtocol, "call_many", refused)
    result = asyncio.run(tasks.add.aenqueue(4, 5))
    monkeypatch.undo()
    assert r.lrange(keys().pending, 0, -1) == [result.id]
    drain(make_worker, [result])
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 9
