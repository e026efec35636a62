"""The suite's own redis-server helper: the server a test talks to is the one it started.

``free_port`` hands out a port that another process can take before our server
binds it (two sessions, a parallel run). The helper used to accept whatever
answered PING on the port, so two tests could share one server without
noticing. Here another process holds the port, answering PING as Redis would,
when ours starts: ours must notice, move to another port, and be the one that
answers there.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator

import pytest

from django_redisq import testing
from django_redisq.testing import RedisServer, SentinelSetup, find_redis_server, redis_cli


@pytest.fixture
def impostor() -> Iterator[int]:
    """A loopback port where something else answers every request with ``+PONG``."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(1)
                try:
                    if conn.recv(64):
                        conn.sendall(b"+PONG\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(2)
    listener.close()


def test_a_server_whose_port_was_taken_starts_on_another_and_is_the_one_answering(impostor, monkeypatch):
    ports = iter([impostor])
    real_free_port = testing.free_port
    monkeypatch.setattr(testing.server, "free_port", lambda: next(ports, None) or real_free_port())
    with RedisServer() as srv:
        assert srv.port != impostor  # it noticed the port was taken and moved
        info = redis_cli(srv.port, "info", "server")
        assert f"process_id:{srv.proc.pid}" in info  # the server answering is the process it started


def test_a_port_given_by_the_caller_that_is_taken_is_an_error_not_someone_elses_server(impostor):
    srv = RedisServer(None, impostor)
    try:
        with pytest.raises(RuntimeError, match="taken"):
            srv.start()
    finally:
        srv.cleanup()


@pytest.mark.sentinel
def test_a_sentinel_whose_port_was_taken_starts_on_another_and_the_setup_settles(impostor):
    """A connection's local port can take the number ``free_port`` chose for a sentinel before it binds it (a
    fresh-clone CI once waited 30 s for three sentinels of which one had exited): the setup moves that one."""
    binary = find_redis_server("path")
    if not binary:
        pytest.skip("no redis-server on PATH to run sentinels with")
    setup = SentinelSetup(binary)
    setup.sentinel_ports[0] = impostor
    with setup:
        assert impostor not in setup.sentinel_ports
        assert setup.master_port() == setup.master.port  # the three found each other and the master
        pids = {proc.pid for proc in setup.procs}
        for port in setup.sentinel_ports:
            info = redis_cli(port, "info", "server")
            assert "redis_mode:sentinel" in info
            assert int(re.search(r"process_id:(\d+)", info).group(1)) in pids  # ours, not someone else's
