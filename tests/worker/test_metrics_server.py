"""The worker's metrics endpoint (worker/observability/metrics_server.py) in-process: what it answers, and its bounds.

The attacks themselves (slow half requests, a process out of descriptors, made-up task paths) run against real
runworker processes in tests/worker/test_observability.py.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from django_redisq.worker.observability.metrics_server import MAX_REQUEST, MetricsServer

HALF = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-a: "


@pytest.fixture
def registry() -> CollectorRegistry:
    reg = CollectorRegistry()
    Counter("redisq_worker_tasks", "Task attempts.", ["queue", "task", "outcome"], registry=reg).labels("default", "t", "success").inc(3)
    return reg


@pytest.fixture
def server(registry: CollectorRegistry) -> Iterator[MetricsServer]:
    srv = MetricsServer("127.0.0.1", 0, lambda: generate_latest(registry), max_connections=4, timeout=1.0)
    yield srv
    srv.stop()


def exchange(port: int, request: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def split(response: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    return status, {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}, body


def test_it_serves_the_text_exposition_whatever_the_scraper_accepts(server, registry):
    openmetrics_first = b"Accept: application/openmetrics-text;version=1.0.0;q=0.9,text/plain;version=0.0.4;q=0.5\r\n"
    status, headers, body = split(exchange(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + openmetrics_first + b"\r\n"))
    assert status == "HTTP/1.1 200 OK"
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8" and headers["connection"] == "close"
    assert body == generate_latest(registry) and int(headers["content-length"]) == len(body)
    assert b'redisq_worker_tasks_total{outcome="success",queue="default",task="t"} 3.0' in body
    status, headers, body = split(exchange(server.port, b"HEAD /metrics HTTP/1.0\r\n\r\n"))
    assert status == "HTTP/1.1 200 OK" and body == b"" and int(headers["content-length"]) > 0


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 405 Method Not Allowed"),
    (b"nonsense\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    (b"GET /metrics HTTP/1.1\r\nX-a: " + b"a" * MAX_REQUEST + b"\r\n\r\n", "HTTP/1.1 431 Request Header Fields Too Large"),
])
def test_other_requests_get_an_error_and_no_metrics(server, request_bytes, status):
    got, _, body = split(exchange(server.port, request_bytes))
    assert got == status and b"redisq_worker" not in body


def test_a_half_request_is_closed_after_the_timeout(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(HALF)
        start = time.monotonic()
        assert s.recv(100) == b""  # closed, unanswered (never closed: the recv times out after 10 s and fails)
        assert 0.8 < time.monotonic() - start < 5.0  # at the 1 s timeout, not before


def test_a_new_connection_takes_the_place_of_the_oldest_still_waiting(server):
    slow = []
    for _ in range(4):  # max_connections
        s = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        s.sendall(HALF)
        slow.append(s)
    time.sleep(0.05)
    assert split(exchange(server.port, b"GET /metrics HTTP/1.1\r\n\r\n"))[0] == "HTTP/1.1 200 OK"
    assert slow[0].recv(100) == b""  # the oldest made room
    slow[1].settimeout(0.1)
    with pytest.raises(TimeoutError):
        slow[1].recv(100)  # the others still wait (until their timeout)
    for s in slow:
        s.close()


def test_a_token_is_required_when_given(registry):
    srv = MetricsServer("127.0.0.1", 0, lambda: generate_latest(registry), token="s3cret")
    try:
        status, headers, body = split(exchange(srv.port, b"GET /metrics HTTP/1.1\r\n\r\n"))
        assert status == "HTTP/1.1 401 Unauthorized" and headers["www-authenticate"] == 'Bearer realm="metrics"'
        assert b"redisq_worker" not in body
        ok = split(exchange(srv.port, b"GET /metrics HTTP/1.1\r\nauthorization: Bearer s3cret\r\n\r\n"))
        assert ok[0] == "HTTP/1.1 200 OK" and b"redisq_worker_tasks_total" in ok[2]
    finally:
        srv.stop()


def test_a_render_that_fails_answers_500_and_the_endpoint_goes_on(caplog):
    calls = []

    def render() -> bytes:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("collector bug")
        return b"# ok\n"

    srv = MetricsServer("127.0.0.1", 0, render)
    try:
        assert split(exchange(srv.port, b"GET / HTTP/1.1\r\n\r\n"))[0] == "HTTP/1.1 500 Internal Server Error"
        assert split(exchange(srv.port, b"GET / HTTP/1.1\r\n\r\n"))[2] == b"# ok\n"
    finally:
        srv.stop()
    assert "rendering the metrics failed" in caplog.text


def test_stop_closes_the_port(registry):
    srv = MetricsServer("127.0.0.1", 0, lambda: generate_latest(registry))
    srv.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=1)
