"""The sync script calls' line to Redis (connection/wire.py), against real redis-servers.

Replies and error classes as ``execute_command`` gives them, threads sharing
idle connections, a killed connection replaced and the call sent again, a pool
that does not retry (the heartbeat's) failing at once, a frozen server failing
after ``socket_timeout``, a forked child never touching the parent's sockets,
and pools that are not one server's keeping their client's own routing.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError, ResponseError
from redis.retry import Retry

from django_redisq.connection import wire as line


def client_for(url: str, **kwargs: object) -> redis.Redis:
    kwargs.setdefault("retry", Retry(NoBackoff(), 3))
    kwargs.setdefault("retry_on_error", [redis.ConnectionError, redis.TimeoutError])
    pool = redis.ConnectionPool.from_url(url, decode_responses=True, encoding_errors="surrogateescape", protocol=2, **kwargs)
    return redis.Redis(connection_pool=pool)


def test_replies_and_errors_are_execute_commands(r, redis_url):
    client = client_for(redis_url)
    execute = line.wire_for(client)
    assert execute != client.execute_command
    r.hset("h", mapping={"a": "1"})
    r.execute_command("SET", "raw", b"\xff")
    for args in (("HGET", "h", "a"), ("GET", "raw"), ("EVAL", "return {1, 'x', {2}}", 0), ("ECHO", b"\xfe")):
        assert execute(*args) == client.execute_command(*args)
    with pytest.raises(NoScriptError):
        execute("EVALSHA", "0" * 40, 0)
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        execute("LPUSH", "h", "x")
    assert execute("ECHO", "ok") == "ok"  # in step after the errors


def test_threads_share_the_idle_connections(r, redis_url):
    client = client_for(redis_url)
    execute = line.wire_for(client)
    out: dict[int, list[str]] = {}

    def work(n: int) -> None:
        out[n] = [execute("ECHO", f"{n}:{i}") for i in range(200)]

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(out[n] == [f"{n}:{i}" for i in range(200)] for n in range(8))
    (ln,) = [x for x in line._wires if x.pool is client.connection_pool]
    assert 1 <= len(ln._idle) <= 8  # at most one connection per thread that was using it at once
    assert line.wire_for(client).__self__ is ln  # type: ignore[attr-defined]  # one wire per pool


def test_a_killed_connection_is_replaced_and_the_call_sent_again(own_server):
    client = client_for(own_server.url)
    execute = line.wire_for(client)
    assert execute("SET", "a", "1")
    plain = redis.Redis.from_url(own_server.url)
    assert plain.client_kill_filter(_type="normal", skipme=True) >= 1
    assert execute("GET", "a") == "1"
    plain.close()


def test_a_pool_that_does_not_retry_fails_at_once(own_server):
    client = client_for(own_server.url, retry=Retry(NoBackoff(), 0))
    execute = line.wire_for(client)
    execute("PING")
    plain = redis.Redis.from_url(own_server.url)
    plain.client_kill_filter(_type="normal", skipme=True)
    with pytest.raises(redis.ConnectionError):
        execute("PING")
    assert execute("ECHO", "back") == "back"  # the next call makes a new connection
    plain.close()


def test_a_frozen_server_fails_the_call_after_socket_timeout(own_server):
    client = client_for(own_server.url, socket_timeout=0.3, retry=Retry(NoBackoff(), 0))
    execute = line.wire_for(client)
    execute("PING")
    os.kill(own_server.proc.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(redis.TimeoutError):
            execute("PING")
        waited = time.monotonic() - start
    finally:
        os.kill(own_server.proc.pid, signal.SIGCONT)
    assert 0.25 <= waited < 5.0  # at the 0.3 s timeout, not before; a hang would not end (room for a loaded machine)
    assert execute("ECHO", "again") == "again"


def test_a_forked_child_makes_its_own_connections(r, redis_url):
    client = client_for(redis_url)
    execute = line.wire_for(client)
    execute("CLIENT", "SETNAME", "parent")
    parent_id = execute("CLIENT", "ID")
    pid = os.fork()
    if pid == 0:  # the child: a new connection, never the parent's socket
        try:
            ok = execute("CLIENT", "ID") != parent_id and execute("CLIENT", "GETNAME") is None
            os._exit(0 if ok else 1)
        except BaseException:  # noqa: BLE001 - the child must never return into pytest
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert execute("CLIENT", "ID") == parent_id and execute("CLIENT", "GETNAME") == "parent"  # untouched by the child


class OwnPool(redis.ConnectionPool):
    pass


def test_pools_that_are_not_one_servers_keep_their_clients_routing(redis_url):
    own = redis.Redis(connection_pool=OwnPool.from_url(redis_url))
    assert line.wire_for(own) == own.execute_command
    assert line.wire_for(redis.Redis.from_url(redis_url)) != redis.Redis.from_url(redis_url).execute_command
