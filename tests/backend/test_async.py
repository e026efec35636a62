"""Native async: aenqueue / aget_result / arefresh on the event loop, equal to the sync API field by field."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import threading
from datetime import timedelta
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from django.test import override_settings
from django.utils import timezone

from django_redisq import connection
from django_redisq.compat import BaseTaskBackend, TaskResult, TaskResultDoesNotExist, TaskResultStatus, task_backends, task_enqueued
from django_redisq.connection import async_pools as aconnection
from django_redisq.connection import async_wire as achannel
from django_redisq.connection.embedded import EmbeddedServer
from django_redisq.exceptions import RedisUnreachable
from django_redisq.settings.read import get_options
from django_redisq.testing import RedisServer
from tests.helpers import keys, wires_of
from tests.testapp import tasks

FIELDS = ("id", "status", "enqueued_at", "started_at", "finished_at", "last_attempted_at", "args", "kwargs",
          "backend", "errors", "worker_ids")


def same(a: TaskResult, b: TaskResult) -> None:
    """Two results agree on every field Django's TaskResult has, the task and the return value included."""
    for name in FIELDS:
        assert getattr(a, name) == getattr(b, name), name
    assert a.task.module_path == b.task.module_path and a.task.queue_name == b.task.queue_name
    assert a.task == b.task
    if a.status == TaskResultStatus.SUCCESSFUL:
        assert a.return_value == b.return_value


def tasks_setting(**options: Any) -> dict[str, Any]:
    from django.conf import settings

    value = copy.deepcopy(settings.TASKS)
    value["default"]["OPTIONS"] = {k: v for k, v in value["default"]["OPTIONS"].items() if k != "REDIS_URL"} | options
    return value


@pytest.fixture
def fresh_pools():
    connection.reset()
    yield
    connection.reset()


def test_aenqueue_returns_what_get_result_reads(r):
    result = asyncio.run(tasks.add.aenqueue(2, 3))
    assert result.status == TaskResultStatus.READY and result.enqueued_at is not None
    same(result, tasks.add.get_result(result.id))  # enqueued_at as stored by the script, to the millisecond
    sync = tasks.add.enqueue(2, 3)
    assert {f: getattr(sync, f) for f in FIELDS if f not in ("id", "enqueued_at")} == \
        {f: getattr(result, f) for f in FIELDS if f not in ("id", "enqueued_at")}


def test_aget_result_and_arefresh_equal_the_sync_ones_through_a_life(r, make_worker):
    ok = tasks.add.enqueue(1, 2)
    bad = tasks.always_fails.enqueue("bad thing")
    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(5, 6)
    for result in (ok, bad, later):
        backend = task_backends["default"]
        same(asyncio.run(backend.aget_result(result.id)), backend.get_result(result.id))
    for _ in range(20):
        make_worker().run()
        if tasks.always_fails.get_result(bad.id).is_finished:
            break
    for result in (ok, bad):
        synced = dataclasses.replace(result)
        synced.refresh()
        asyncio.run(result.arefresh())
        same(result, synced)
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 3
    assert bad.status == TaskResultStatus.FAILED and len(bad.errors) == 2
    assert bad.errors[0].exception_class_path == "builtins.ValueError" and "bad thing" in bad.errors[-1].traceback
    assert asyncio.run(tasks.add.aget_result(later.id)).status == TaskResultStatus.READY


def test_aget_result_of_an_unknown_id_raises_as_get_result_does(r):
    for bad in ("x" * 32, "x" * 100, ""):
        with pytest.raises(TaskResultDoesNotExist):
            asyncio.run(tasks.noop.aget_result(bad))


def test_aenqueue_honours_the_priority(r):
    """The async path builds the same enqueue call: a priority lands in the prioritized set, and the result keeps it."""
    result = asyncio.run(tasks.add.using(priority=25).aenqueue(1, 1))
    assert r.zscore(keys().prioritized, result.id) is not None and r.hget(keys().task(result.id), "prio") == "25"
    assert asyncio.run(tasks.add.aget_result(result.id)).task.priority == 25


def test_a_delayed_aenqueue_is_scheduled_as_enqueue_is(r):
    result = asyncio.run(tasks.add.using(run_after=timezone.now() + timedelta(minutes=5)).aenqueue(1, 1))
    assert r.zscore(keys().scheduled, result.id) is not None and r.llen(keys().pending) == 0


def test_idempotency_keys_answer_the_same_on_both_paths(r, make_worker):
    first = asyncio.run(tasks.charge.aenqueue(42))
    again_async = asyncio.run(tasks.charge.aenqueue(42))
    again_sync = tasks.charge.enqueue(42)
    assert again_async.id == again_sync.id == first.id
    same(again_async, again_sync)
    assert r.llen(keys().pending) == 1
    make_worker().run()
    same(asyncio.run(tasks.charge.aenqueue(42)), tasks.charge.enqueue(42))  # the holder, finished
    r.delete(keys().task(first.id))  # its result expired; the key is still held (IDEMPOTENCY_TTL)
    gone_async, gone_sync = asyncio.run(tasks.charge.aenqueue(42)), tasks.charge.enqueue(42)
    assert gone_async.id == first.id and gone_async.status == TaskResultStatus.SUCCESSFUL and gone_async.enqueued_at is None
    same(gone_async, gone_sync)


def test_concurrent_aenqueues_with_one_key_store_one_task(r):
    async def many() -> list[TaskResult]:
        return await asyncio.gather(*(tasks.charge.aenqueue(7) for _ in range(30)))

    results = asyncio.run(many())
    assert len({x.id for x in results}) == 1 and r.llen(keys().pending) == 1


@pytest.mark.parametrize("plain", [True, False], ids=["plain", "script"])
def test_concurrent_aenqueues_go_in_few_round_trips_and_each_gets_its_own_result(r, plain):
    """Group commit on both ways: plain tasks as one HSET each and one LPUSH a group (no script), the others (here a
    priority) in one enqueue.lua call a group."""
    task = tasks.add if plain else tasks.add.using(priority=3)

    async def many() -> list[TaskResult]:
        await task.aenqueue(0, 0)  # the pool and the script are loaded
        r.config_resetstat()
        return await asyncio.gather(*(task.aenqueue(i, 1) for i in range(200)))

    results = asyncio.run(many())
    stats = r.info("commandstats")
    sends = {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("evalsha", "lpush", "hset")}
    if plain:
        assert sends["evalsha"] == 0 and sends["hset"] == 200, sends
        assert sends["lpush"] < 20, sends  # group commit: the ones waiting for a round trip go together in the next
        assert r.llen(keys().pending) == 201
    else:
        assert 0 < sends["evalsha"] < 20, sends
        assert r.zcard(keys().prioritized) == 201
    assert len({x.id for x in results}) == 200
    for i, result in enumerate(results):
        assert result.args == [i, 1]
        same(result, tasks.add.get_result(result.id))


def test_aenqueue_many(r):
    results = asyncio.run(tasks.add.get_backend().aenqueue_many(tasks.add, [((i, i), {}) for i in range(5)]))
    assert [x.args for x in results] == [[i, i] for i in range(5)] and r.llen(keys().pending) == 5


# -- the event loop: no thread, one pool per loop ------------------------------------------


@pytest.fixture
def recording(monkeypatch, fresh_pools):
    """Every command the loop's channel sends, with the thread and the running loop it was sent from."""
    seen: list[tuple[int, asyncio.AbstractEventLoop, bytes]] = []
    send = achannel.WireProtocol.call

    async def call(self: achannel.WireProtocol, args: Any) -> Any:
        seen.append((threading.get_ident(), asyncio.get_running_loop(), str(args[0]).encode()))
        return await send(self, args)

    async def call_many(self: achannel.WireProtocol, commands: Any) -> Any:
        seen.extend((threading.get_ident(), asyncio.get_running_loop(), str(args[0]).encode()) for args in commands)
        return await send_many(self, commands)

    send_many = achannel.WireProtocol.call_many
    monkeypatch.setattr(achannel.WireProtocol, "call", call)
    monkeypatch.setattr(achannel.WireProtocol, "call_many", call_many)
    return seen


def test_aenqueue_and_aget_result_run_on_the_callers_loop_and_thread(r, recording):
    async def calls() -> asyncio.AbstractEventLoop:
        result = await tasks.add.aenqueue(1, 2)
        await tasks.add.aget_result(result.id)
        await result.arefresh()
        return asyncio.get_running_loop()

    loop = asyncio.run(calls())
    sent = [(thread, lp) for thread, lp, cmd in recording]
    assert len(sent) >= 3 and set(sent) == {(threading.get_ident(), loop)}
    # a plain task: no script (store/broker/plain.py); TIME first when the broker's Redis clock was due
    assert [cmd for _, _, cmd in recording if cmd != b"TIME"][:2] == [b"HSET", b"LPUSH"]
    assert any(b"HGETALL" in cmd for _, _, cmd in recording)


def test_the_check_sees_the_thread_hop_of_djangos_default(r, recording):
    """The same check fails for Django's BaseTaskBackend.aenqueue (sync_to_async): it can fail."""
    backend = task_backends["default"]
    result = asyncio.run(BaseTaskBackend.aenqueue(backend, tasks.add, (1, 2), {}))
    assert r.lindex(keys().pending, 0) == result.id and recording == []  # enqueued, by the sync client in a thread


def test_only_the_frameworks_log_receiver_stays_on_the_loop(r):
    where: dict[str, int] = {}

    def sync_receiver(sender: Any, task_result: TaskResult, **kwargs: Any) -> None:
        where["sync"] = threading.get_ident()

    async def async_receiver(sender: Any, task_result: TaskResult, **kwargs: Any) -> None:
        where["async"] = threading.get_ident()

    task_enqueued.connect(async_receiver)
    try:
        asyncio.run(tasks.noop.aenqueue(1))
        assert where == {"async": threading.get_ident()}
        task_enqueued.connect(sync_receiver)
        asyncio.run(tasks.noop.aenqueue(1))  # a receiver of yours may use the ORM: Django's asend, with its thread
        assert where["async"] == threading.get_ident() and where["sync"] != threading.get_ident()
    finally:
        task_enqueued.disconnect(async_receiver)
        task_enqueued.disconnect(sync_receiver)


def test_each_loop_has_its_own_link_and_a_closed_loops_link_is_closed_and_never_reused(r, fresh_pools):
    async def use() -> tuple[asyncio.AbstractEventLoop, Any]:
        await tasks.noop.aenqueue(1)
        loop = asyncio.get_running_loop()
        (link,) = wires_of(loop)
        assert link.connected
        return loop, link

    found: dict[str, Any] = {}

    def in_thread(name: str) -> None:
        found[name] = asyncio.run(use())

    threads = [threading.Thread(target=in_thread, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    loop_c, link_c = asyncio.run(use())
    links = [found["a"][1], found["b"][1], link_c]
    assert len({id(p) for p in links}) == 3 and r.llen(keys().pending) == 3
    for loop, link in (found["a"], found["b"], (loop_c, link_c)):
        assert loop.is_closed() and wires_of(loop) == []
        assert not link.connected  # closed with its loop
    assert async_to_sync(use)()[1] not in links  # asgiref's loop per call (an async view under WSGI) too


def test_a_loop_closed_without_shutting_down_is_forgotten(r, fresh_pools):
    loop = asyncio.new_event_loop()
    loop.run_until_complete(tasks.noop.aenqueue(1))
    loop.close()  # no shutdown_asyncgens: its pools were not closed
    asyncio.run(tasks.noop.aenqueue(2))
    assert wires_of(loop) == [] and r.llen(keys().pending) == 2


# -- failures --------------------------------------------------------------------------------


def test_redis_down_raises_what_the_sync_call_raises(r, fresh_pools):
    with override_settings(TASKS=tasks_setting(REDIS_URL="redis://127.0.0.1:1/0")):
        with pytest.raises(redis.ConnectionError) as sync_error:
            tasks.noop.enqueue(1)
        with pytest.raises(redis.ConnectionError) as async_error:
            asyncio.run(tasks.noop.aenqueue(1))
        with pytest.raises(redis.ConnectionError):
            asyncio.run(tasks.noop.aget_result("x" * 32))
    assert type(async_error.value) is type(sync_error.value) is RedisUnreachable and "127.0.0.1:1" in str(async_error.value)


def test_noscript_after_script_flush_loads_it_again(r):
    async def twice() -> list[TaskResult]:
        first = await tasks.noop.aenqueue(1)
        r.script_flush()
        return [first, await tasks.noop.aenqueue(2)]

    results = asyncio.run(twice())
    assert r.lrange(keys().pending, 0, -1) == [x.id for x in reversed(results)]


def test_a_password_is_used_and_a_wrong_one_refused_as_on_the_sync_path(fresh_pools):
    with RedisServer(None, None, "--requirepass", "s3cret") as srv:
        good, bad = srv.url.replace("redis://", "redis://:s3cret@"), srv.url.replace("redis://", "redis://:wrong@")
        with override_settings(TASKS=tasks_setting(REDIS_URL=good)):
            result = asyncio.run(tasks.noop.aenqueue(1))
            same(asyncio.run(tasks.noop.aget_result(result.id)), tasks.noop.get_result(result.id))
        connection.reset()
        with override_settings(TASKS=tasks_setting(REDIS_URL=bad)):
            with pytest.raises(RedisUnreachable, match="refused our credentials") as sync_error:
                tasks.noop.enqueue(1)
            with pytest.raises(RedisUnreachable, match="refused our credentials") as async_error:
                asyncio.run(tasks.noop.aenqueue(1))
        for error in (sync_error.value, async_error.value):
            assert isinstance(error.cause, redis.AuthenticationError) and "wrong" not in str(error)
        connection.reset()


def test_the_async_pool_connects_as_the_sync_pool_tls_and_timeouts_included():
    o = dataclasses.replace(get_options("default"), redis_url="rediss://u:pw@10.9.8.7:6390/3?ssl_cert_reqs=required&socket_timeout=4")
    sync, asynchronous = connection.pool_kwargs(o), aconnection.async_pool_kwargs(o)
    assert asynchronous["connection_class"] is aconnection.SSLConnection and sync["connection_class"] is redis.SSLConnection
    for name in ("host", "port", "db", "username", "password", "ssl_cert_reqs", "socket_timeout", "socket_connect_timeout",
                 "protocol", "decode_responses", "encoding_errors", "max_connections", "retry_on_error"):
        assert asynchronous[name] == sync[name], name
    assert asynchronous["retry"].get_retries() == sync["retry"].get_retries()


def test_a_setting_redis_asyncio_cannot_honour_is_an_error_not_dropped():
    from django.core.exceptions import ImproperlyConfigured

    o = dataclasses.replace(get_options("default"), redis_url="rediss://10.9.8.7:6390/0?ssl_validate_ocsp=true")
    with pytest.raises(ImproperlyConfigured, match="ssl_validate_ocsp"):
        aconnection.async_pool_kwargs(o)


def test_cache_alias(r, redis_url, fresh_pools):
    caches = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url}}
    with override_settings(CACHES=caches, TASKS=tasks_setting(CACHE_ALIAS="default")):
        connection.reset()
        result = asyncio.run(tasks.noop.aenqueue(1))
        assert r.lindex(keys().pending, 0) == result.id
        same(asyncio.run(tasks.noop.aget_result(result.id)), tasks.noop.get_result(result.id))
    connection.reset()


def test_embedded(tmp_path, make_worker, fresh_pools):
    with override_settings(TASKS=tasks_setting(EMBEDDED=True, EMBEDDED_PATH=str(tmp_path / "q.rdb"))):
        connection.reset()
        try:
            assert aconnection.async_pool_kwargs(get_options("default"))["connection_class"] is aconnection.EmbeddedConnection
            result = asyncio.run(tasks.add.aenqueue(20, 22))
            make_worker().run()
            asyncio.run(result.arefresh())
            assert result.return_value == 42
            same(result, tasks.add.get_result(result.id))
        finally:
            connection.reset()
            EmbeddedServer.of(str(tmp_path / "q.rdb")).stop()  # it outlives its process by design: not the suite's


def test_aclose_closes_the_running_loops_links_and_the_next_call_opens_new_ones(r, fresh_pools):
    async def run() -> tuple[Any, Any]:
        await tasks.noop.aenqueue(1)
        (before,) = wires_of(asyncio.get_running_loop())
        await aconnection.aclose()
        assert wires_of(asyncio.get_running_loop()) == []
        await tasks.noop.aenqueue(2)
        (after,) = wires_of(asyncio.get_running_loop())
        assert after.connected and not before.connected
        return before, after

    before, after = asyncio.run(run())
    assert before is not after and not after.connected  # closed with the loop
    assert r.llen(keys().pending) == 2


def test_a_call_cancelled_before_its_batch_is_sent_is_not_enqueued(r):
    import json

    async def run() -> None:
        await tasks.noop.aenqueue(0)
        leader = asyncio.ensure_future(tasks.noop.aenqueue(1))
        await asyncio.sleep(0)  # the leader's script call is in flight
        follower = asyncio.ensure_future(tasks.noop.aenqueue(2))
        await asyncio.sleep(0)  # the follower waits for the next batch
        follower.cancel()
        await leader
        with pytest.raises(asyncio.CancelledError):
            await follower
        await tasks.noop.aenqueue(3)

    asyncio.run(run())
    stored = [json.loads(r.hget(keys().task(i), "msg"))["args"] for i in reversed(r.lrange(keys().pending, 0, -1))]
    assert stored == [[0], [1], [3]]


def test_aenqueue_and_aget_result_on_uvloop(r, make_worker):
    """uvicorn runs on uvloop when it is installed: its transports are not asyncio's classes."""
    uvloop = pytest.importorskip("uvloop")

    async def enqueue() -> list[TaskResult]:
        return list(await asyncio.gather(*(tasks.add.aenqueue(i, 1) for i in range(30))))

    results = uvloop.run(enqueue())
    assert make_worker().run() == 30

    async def read() -> list[Any]:
        return [(await tasks.add.aget_result(x.id)).return_value for x in results]

    assert uvloop.run(read()) == [i + 1 for i in range(30)]
