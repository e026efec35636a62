"""The event loop's pipelined line to Redis (connection/async_wire.py), against real redis-servers.

Replies matched to their callers in order under concurrency, on one socket;
redis-py's error classes; a cancelled caller that leaves the stream in step;
a lost connection reopened and the call sent again; a server frozen past
``socket_timeout`` failing the wait in time; big writes under flow control;
and the client fallback giving the same replies.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import NoScriptError, ResponseError

from django_redisq.connection.async_wire import AsyncWire
from tests.helpers import blocked_in


def link_to(url: str, **kwargs: object) -> AsyncWire:
    """A link as connection/async_pools.py makes one: its pool allows as many connections as ours (the fallback client opens one per call in flight)."""
    kwargs.setdefault("max_connections", 1000)
    return AsyncWire(aioredis.ConnectionPool.from_url(url, decode_responses=True, encoding_errors="surrogateescape", protocol=2, **kwargs))


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request):  # type: ignore[no-untyped-def]
    """Run a coroutine on the stock event loop, and on uvloop (uvicorn's when installed): its transports differ."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.run
    return asyncio.run


@pytest.mark.parametrize("takes_socket", [True, False], ids=["channel", "client-fallback"])
def test_concurrent_calls_share_one_socket_and_each_gets_its_own_reply(r, redis_url, takes_socket, run):
    async def calls() -> tuple[list[object], int, object, object]:
        link = link_to(redis_url)
        link.takes_socket = takes_socket
        await link.execute("CLIENT", "SETNAME", "achannel-probe")
        replies = await asyncio.gather(*(link.execute("ECHO", str(i)) for i in range(300)))
        await link.execute("HSET", "h", "a", "1", "b", b"\xff")  # a byte that is not UTF-8
        flat = await link.execute("HGETALL", "h")
        clients = sum(1 for c in r.client_list() if c.get("name") == "achannel-probe")  # connections that ran the calls
        await link.aclose()
        return replies, clients, flat, await asyncio.sleep(0)

    replies, clients, flat, _ = run(calls())
    assert replies == [str(i) for i in range(300)]  # each caller got the reply to its own command
    assert dict(zip(flat[::2], flat[1::2], strict=True)) == {"a": "1", "b": "\udcff"}  # type: ignore[index]  # read back as a lone surrogate
    if takes_socket:
        assert clients == 1


def test_error_replies_raise_redis_pys_classes_and_the_next_call_is_in_step(r, redis_url, run):
    async def calls() -> str:
        link = link_to(redis_url)
        with pytest.raises(NoScriptError):
            await link.execute("EVALSHA", "0" * 40, 0)
        await link.execute("SET", "s", "x")
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await link.execute("LPUSH", "s", "y")
        out = await link.execute("GET", "s")
        await link.aclose()
        return out

    assert run(calls()) == "x"


def test_a_cancelled_caller_leaves_the_replies_in_step(r, redis_url, run):
    async def calls() -> list[object]:
        link = link_to(redis_url)
        slow = asyncio.ensure_future(link.execute("BLPOP", "nothing", "0.3"))
        await asyncio.sleep(0.05)
        slow.cancel()
        after = await asyncio.gather(link.execute("ECHO", "mine"), link.execute("INCR", "k"))
        await link.aclose()
        return after

    assert run(calls()) == ["mine", 1]  # not the BLPOP's nil, which came first


def test_a_killed_connection_is_reopened_and_the_call_sent_again(own_server, run):
    plain = redis.Redis.from_url(own_server.url, decode_responses=True)

    async def calls() -> tuple[object, object]:
        link = link_to(own_server.url)
        await link.execute("SET", "a", "1")
        killed = plain.client_kill_filter(_type="normal", skipme=True)
        assert killed >= 1
        await asyncio.sleep(0.05)  # the loop sees the close
        again = await link.execute("GET", "a")
        in_flight = asyncio.ensure_future(link.execute("BLPOP", "q", "2"))
        await asyncio.sleep(0.1)
        plain.client_kill_filter(_type="normal", skipme=True)  # kills the blocked call's socket
        await asyncio.sleep(0.1)
        plain.rpush("q", "v")  # the call, sent again on a new socket, gets it
        got = await asyncio.wait_for(in_flight, 5)
        await link.aclose()
        return again, got

    assert run(calls()) == ("1", ["q", "v"])
    plain.close()


def test_a_frozen_server_fails_the_wait_after_socket_timeout_then_serves_again(own_server, run):
    pid = own_server.proc.pid

    async def calls() -> tuple[float, object]:
        link = link_to(own_server.url, socket_timeout=0.3)
        link.retries = 0
        assert await link.execute("PING") == "PONG"
        os.kill(pid, signal.SIGSTOP)
        try:
            start = time.monotonic()
            with pytest.raises(redis.TimeoutError):
                await link.execute("PING")
            waited = time.monotonic() - start
        finally:
            os.kill(pid, signal.SIGCONT)
        back = await link.execute("PING")
        await link.aclose()
        return waited, back

    waited, back = run(calls())
    assert 0.25 <= waited < 5.0 and back == "PONG"  # at the 0.3 s timeout; a hang would not end (room for a loaded machine)


def test_big_writes_go_whole_under_flow_control(r, redis_url, run):
    big = "x" * (8 << 20)

    async def calls() -> list[object]:
        link = link_to(redis_url)
        await asyncio.gather(*(link.execute("SET", f"big{i}", big) for i in range(4)))
        out = await asyncio.gather(*(link.execute("STRLEN", f"big{i}") for i in range(4)))
        await link.aclose()
        return out

    assert run(calls()) == [8 << 20] * 4


def test_a_closed_link_fails_its_waiting_calls_with_connection_error(r, redis_url, run):
    async def calls() -> None:
        link = link_to(redis_url)
        waiting = asyncio.ensure_future(link.execute("BLPOP", "nothing", "5"))
        while not blocked_in(r, "blpop"):  # the call is on the server, waiting (a fixed 50 ms was too short under load)
            await asyncio.sleep(0.01)
        link.retries = 0
        await link.aclose()
        with pytest.raises(redis.ConnectionError):
            await waiting

    run(calls())
