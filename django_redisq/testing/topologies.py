"""Throwaway deployments for the topology tests: a Redis Cluster, and a master and replica watched by sentinels.

Each is built of ``RedisServer`` processes (server.py) on loopback ports and
stopped by PID; each is ready only once the servers agree (every node
``cluster_state:ok``; every sentinel knows the others and sees the replica).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from django_redisq.testing.server import AddressInUse, RedisServer, await_start, find_redis_server, free_port, log_tail, redis_cli, wait_until


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
            except (AddressInUse, RuntimeError):
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
        wait_until("cluster_state:ok on every node", lambda: all(
            "cluster_state:ok" in redis_cli(n.port, "cluster", "info") for n in self.nodes), 30)

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
        return redis_cli(port, *command)

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
                started = await_start(proc, log, 0, f"redis-sentinel on port {port}", lambda text: "Sentinel ID is" in text)
            except AddressInUse:
                if attempt < 2:
                    self.sentinel_ports[index] = free_port()
                    continue
                raise
            if not started:
                proc.kill()
                proc.wait(10)
                raise RuntimeError(f"redis-sentinel on port {port} did not start: {log_tail(log, 0)[-2000:]}")
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

    def restore(self, timeout: float = 60, fail_back: bool = True) -> None:
        """Sentinels that name a master again, with the other server its replica in sync (after a failover test).

        A master stopped by a test is started again (the sentinels make it a
        replica of whichever server they promoted). With ``fail_back`` (the
        default) one of them is then asked to fail over back to ``master``, which
        takes a failover's time again; without it, a promoted ``replica`` simply
        becomes ``master`` here (the two swap), which is all a suite that reads
        ``master`` after each test needs.
        """
        if self.master.proc is None or self.master.proc.poll() is not None:
            self.master.start()
            promoted = self.master_port()
            if promoted is not None and promoted != self.master.port:
                # the sentinels would make it a replica of the promoted server only when they next ask it for INFO
                # (every 10 s, which made this wait 15 s); it is told at once instead, as they would tell it
                self._cli(self.master.port, "replicaof", "127.0.0.1", str(promoted))
        if not fail_back and self.master_port() == self.replica.port:
            self.master, self.replica = self.replica, self.master
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
        wait_until("the replica in sync", lambda: "master_link_status:up" in self._cli(self.replica.port, "info", "replication"),
                  max(1.0, deadline - time.monotonic()))
        wait_until("sentinels that know each other and the replica", self._settled, max(1.0, deadline - time.monotonic()))

    def start(self) -> SentinelSetup:
        try:
            self.master.start()
            self.replica.start()
            wait_until("the replica in sync", lambda: "master_link_status:up" in self._cli(self.replica.port, "info", "replication"), 20)
            for index in range(len(self.sentinel_ports)):
                self._start_sentinel(index)
            wait_until("sentinels that know each other and the replica", self._settled, 30)
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
