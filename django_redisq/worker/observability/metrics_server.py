"""The HTTP endpoint of ``runworker --metrics-port``: one thread, a bounded number of sockets.

Whoever can reach the port must not be able to harm the worker behind it. A
client that sends half a request and waits (a slowloris), or thousands of them,
gets no thread of its own and cannot hold a socket for long:

* one thread serves every connection (a selector over non-blocking sockets);
* at most ``max_connections`` (16) connections are open at once. One more
  arriving takes the place of the oldest still waiting for its request, so
  clients that never finish a request cannot lock out the scraper, and the
  endpoint never holds more than ``max_connections`` + 4 file descriptors
  (the listening socket, a wake-up pair, the selector's own);
* a connection has ``timeout`` (5) seconds to send its request, at most
  ``MAX_REQUEST`` bytes of it, and then as long again to take the answer;
* when ``accept()`` fails because the process has run out of file descriptors
  (``EMFILE``; something else in the worker holds them), the endpoint stops
  accepting for ``PAUSE`` seconds and gives back the sockets still waiting for a
  request, instead of spinning on a listening socket that stays readable; the
  connections it leaves waiting sit in the kernel's backlog, holding no
  descriptor of the worker's.

It answers ``GET`` and ``HEAD`` on any path with the body ``render()`` returns
(Prometheus' text exposition format), ``Connection: close`` each time. With a
``token``, only requests with ``Authorization: Bearer <token>`` (compared in
constant time); others get 401.
"""

from __future__ import annotations

import errno
import hmac
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable

logger = logging.getLogger("django_redisq")

MAX_CONNECTIONS = 16
TIMEOUT = 5.0
MAX_REQUEST = 8192
"""Bytes of a request line and headers; a longer request is refused (431)."""
PAUSE = 1.0
"""Seconds without accepting after the process ran out of file descriptors."""
BACKLOG = 128
ACCEPTS_PER_WAKE = 64
LOG_EVERY = 60.0
"""At most one warning a minute about connections closed unanswered."""
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}

_WAKE = object()
_LISTENER = object()


class _Conn:
    __slots__ = ("deadline", "out", "request", "sock")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.request = bytearray()
        self.out: memoryview | None = None  # the answer, once the request is in


def _response(status: str, body: bytes, *headers: str, head: bool = False) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Type: {CONTENT_TYPE if status.startswith('200') else 'text/plain; charset=utf-8'}",
             f"Content-Length: {len(body)}", "Connection: close", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (b"" if head else body)


class MetricsServer:
    """Serves ``render()`` on ``host:port`` from a daemon thread until ``stop()``."""

    def __init__(self, host: str, port: int, render: Callable[[], bytes], token: str | None = None, *,
                 max_connections: int = MAX_CONNECTIONS, timeout: float = TIMEOUT) -> None:
        self.render, self.token = render, token
        self.max_connections, self.timeout = max_connections, timeout
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        self._listener = socket.socket(family, kind, proto)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind(address)
            self._listener.listen(BACKLOG)
            self._listener.setblocking(False)
            self.port: int = self._listener.getsockname()[1]
            self._wake_r, self._wake_w = socket.socketpair()
        except BaseException:
            self._listener.close()
            raise
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, _LISTENER)
        self._sel.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        self._conns: dict[socket.socket, _Conn] = {}  # in the order they were accepted
        self._paused_until = 0.0
        self._starved = False
        self._stopping = False
        self._unanswered = 0
        self._logged_at = 0.0
        self._thread = threading.Thread(target=self._serve, name="redisq-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(5)

    # -- the loop --------------------------------------------------------

    def _serve(self) -> None:
        try:
            while not self._stopping:
                for key, events in self._sel.select(self._wait()):
                    if key.data is _LISTENER:
                        self._accept()
                    elif key.data is _WAKE:
                        try:
                            self._wake_r.recv(64)
                        except OSError:
                            pass
                    else:
                        self._handle(key.data, events)
                self._expire()
        except Exception:
            logger.exception("the metrics endpoint stopped")
        finally:
            for conn in list(self._conns.values()):
                self._close(conn)
            self._sel.close()
            for sock in (self._listener, self._wake_r, self._wake_w):
                sock.close()

    def _wait(self) -> float | None:
        """Seconds until the next deadline (a connection's, the end of a pause); None: none."""
        now = time.monotonic()
        due = [c.deadline for c in self._conns.values()]
        if self._paused_until:
            due.append(self._paused_until)
        return max(0.0, min(due) - now) if due else None

    def _expire(self) -> None:
        now = time.monotonic()
        for conn in [c for c in self._conns.values() if c.deadline <= now]:
            self._unanswered += conn.out is None
            self._close(conn)
        if self._paused_until and now >= self._paused_until:
            self._paused_until = 0.0
            self._sel.register(self._listener, selectors.EVENT_READ, _LISTENER)
        if self._unanswered and now - self._logged_at >= LOG_EVERY:
            logger.warning("metrics endpoint: closed %d connection(s) that sent no complete request within %g s or made room "
                           "for newer ones (at most %d at once)", self._unanswered, self.timeout, self.max_connections)
            self._unanswered, self._logged_at = 0, now

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in OUT_OF_DESCRIPTORS:
                    self._out_of_descriptors(exc)
                    return
                continue  # that one connection failed (ECONNABORTED, ...): the next
            sock.setblocking(False)
            if self._starved:
                self._starved = False
                logger.warning("metrics endpoint: accepting connections again")
            if len(self._conns) >= self.max_connections:
                self._make_room()
            conn = self._conns[sock] = _Conn(sock, time.monotonic() + self.timeout)
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _make_room(self) -> None:
        """Close the oldest connection still waiting for its request (else the oldest)."""
        waiting = next((c for c in self._conns.values() if c.out is None), None)
        victim = waiting or next(iter(self._conns.values()))
        self._unanswered += victim.out is None
        self._close(victim)

    def _out_of_descriptors(self, exc: OSError) -> None:
        """Stop accepting for PAUSE seconds and give back what waits for a request: the worker needs the descriptors."""
        self._sel.unregister(self._listener)
        self._paused_until = time.monotonic() + PAUSE
        for conn in [c for c in self._conns.values() if c.out is None]:
            self._close(conn)
        if not self._starved:  # once until an accept succeeds again: a long shortage logs two lines, not one a second
            self._starved = True
            logger.warning("metrics endpoint: cannot accept connections, the process is out of file descriptors or memory "
                           "(%s); trying again every %g s", exc.strerror, PAUSE)

    def _close(self, conn: _Conn) -> None:
        self._conns.pop(conn.sock, None)
        try:
            self._sel.unregister(conn.sock)
        except (KeyError, ValueError):
            pass
        conn.sock.close()

    # -- one connection --------------------------------------------------

    def _handle(self, conn: _Conn, events: int) -> None:
        try:
            if conn.out is None:
                self._read(conn)
            else:
                self._write(conn)
        except Exception:  # a bug here must cost one connection, not the endpoint
            logger.exception("metrics endpoint: a connection failed")
            self._close(conn)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # the client went away
            self._close(conn)
            return
        conn.request += data
        end = conn.request.find(b"\r\n\r\n")
        if end < 0:
            end = conn.request.find(b"\n\n")
        if end < 0:
            if len(conn.request) > MAX_REQUEST:
                self._answer(conn, _response("431 Request Header Fields Too Large", b"request too large\n"))
            return
        if end > MAX_REQUEST:
            self._answer(conn, _response("431 Request Header Fields Too Large", b"request too large\n"))
            return
        self._answer(conn, self._respond(bytes(conn.request[:end]).decode("latin-1")))

    def _respond(self, head: str) -> bytes:
        lines = head.splitlines()
        parts = lines[0].split() if lines else []
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response("400 Bad Request", b"bad request\n")
        method = parts[0]
        if method not in ("GET", "HEAD"):
            return _response("405 Method Not Allowed", b"GET or HEAD\n", "Allow: GET, HEAD")
        if self.token is not None and not self._authorized(lines[1:]):
            return _response("401 Unauthorized", b"a bearer token is required\n", 'WWW-Authenticate: Bearer realm="metrics"',
                             head=method == "HEAD")
        try:
            body = self.render()
        except Exception:
            logger.exception("metrics endpoint: rendering the metrics failed")
            return _response("500 Internal Server Error", b"rendering the metrics failed\n", head=method == "HEAD")
        return _response("200 OK", body, head=method == "HEAD")

    def _authorized(self, header_lines: list[str]) -> bool:
        assert self.token is not None
        for line in header_lines:
            name, _, value = line.partition(":")
            if name.strip().lower() == "authorization":
                scheme, _, given = value.strip().partition(" ")
                return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode("latin-1"), self.token.encode())
        return False

    def _answer(self, conn: _Conn, response: bytes) -> None:
        conn.out = memoryview(response)
        conn.deadline = time.monotonic() + self.timeout
        self._sel.modify(conn.sock, selectors.EVENT_WRITE, conn)
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        assert conn.out is not None
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        conn.out = conn.out[sent:]
        if not conn.out:
            try:
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            self._close(conn)
