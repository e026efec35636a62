"""Sentinel with passwords and TLS, end to end, "like the direct form": real servers, no plain port anywhere.

A TLS-only master (``--port 0 --tls-port``), its TLS replica and three TLS
sentinels, the master and replica behind ``requirepass`` and the sentinels
behind a password of their own, started once for this module from a throwaway
CA (tests/connection/test_security.py ``make_certificates``) and stopped by PID. TASKS
takes the documented form (README, "Scaling out: Redis Cluster and Sentinel"):
the master's password, TLS and CA in a ``rediss://`` URL naming the master,
the sentinels' password and TLS in ``SENTINEL_KWARGS``. A setting that did not
reach the sentinels or the master's connections (sync or asyncio) could not
connect at all: nothing here answers in plain text or without a password.

Skipped where ``openssl`` or a TLS-enabled ``redis-server`` is missing, but
failed when ``CI`` is set (as tests/conftest.py and the browser test do), so CI
never skips it silently.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import redis
from redis.asyncio.sentinel import SentinelManagedSSLConnection as AsyncSentinelSSLConnection
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import SentinelManagedSSLConnection

from django_redisq import connection
from django_redisq.compat import TaskResultStatus
from django_redisq.exceptions import RedisUnavailable, RedisUnreachable
from django_redisq.settings.read import build_options, get_options, validate
from django_redisq.store import server as store_server
from django_redisq.store.keys import QueueKeys
from django_redisq.testing import RedisServer, SentinelSetup, find_redis_server, free_port, redis_cli
from django_redisq.worker.worker import Worker
from tests.conftest import topology_settings
from tests.connection.test_security import ALICE_PW, PASSWORD, SECRETS, make_certificates, no_secret_in
from tests.helpers import wait_for, wires_of
from tests.testapp import tasks

pytestmark = pytest.mark.sentinel

MASTER_PW = PASSWORD  # requirepass and masterauth of the master and the replica
SENTINEL_PW = ALICE_PW  # requirepass of the sentinels
WRONG_PW = SECRETS[-1]  # no_secret_in looks for all three


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"CI is set but the Sentinel TLS test cannot run: {reason}")
    pytest.skip(reason)


def _tls_cli(certs: Path, port: int, password: str, *command: str) -> str:
    """redis-cli over TLS with AUTH (the helpers' ``redis_cli`` with the flags in front of the command)."""
    return redis_cli(port, "--tls", "--cacert", str(certs / "ca.crt"), "-a", password, "--no-auth-warning", *command)


class TlsServer(RedisServer):
    """A redis-server that listens on a TLS port only (``port`` is that port), replicates over TLS, needs MASTER_PW."""

    def __init__(self, binary: str, certs: Path, *extra: str) -> None:
        port = free_port()
        tls = [arg for name, value in _tls_settings(certs) for arg in (f"--{name}", value)]
        super().__init__(binary, port, "--port", "0", "--tls-port", str(port), *tls, "--requirepass", MASTER_PW, "--masterauth", MASTER_PW,
                         *extra)
        self.certs = certs

    def _answering(self) -> bool:
        try:
            return _tls_cli(self.certs, self.port, MASTER_PW, "ping").strip() == "PONG"
        except subprocess.TimeoutExpired:
            return False


def _tls_settings(certs: Path) -> list[tuple[str, str]]:
    """What the servers and the sentinels share: the certificate, the CA, and TLS to the master and to each other."""
    # clients need not show a certificate (as in test_security): the certificate is for serverAuth only
    return [("tls-cert-file", str(certs / "server.crt")), ("tls-key-file", str(certs / "server.key")),
            ("tls-ca-cert-file", str(certs / "ca.crt")), ("tls-auth-clients", "no"), ("tls-replication", "yes")]


class TlsSentinels(SentinelSetup):
    """SentinelSetup over TLS only: the sentinels reach the master, the replica and each other by TLS, with passwords."""

    def __init__(self, binary: str, certs: Path) -> None:
        super().__init__(binary)
        self.master.cleanup()  # the plain servers the base made (never started): their temporary directories
        self.replica.cleanup()
        self.certs = certs
        self.master = TlsServer(binary, certs)
        self.replica = TlsServer(binary, certs, "--replicaof", "127.0.0.1", str(self.master.port))

    def _cli(self, port: int, *command: str) -> str:
        return _tls_cli(self.certs, port, SENTINEL_PW if port in self.sentinel_ports else MASTER_PW, *command)

    def _sentinel_config(self, port: int) -> list[str]:
        lines = [line for line in super()._sentinel_config(port) if not line.startswith("port ")]
        # requirepass: the password clients need, and the one a sentinel gives its peers
        return ["port 0", f"tls-port {port}", *(f"{name} {value}" for name, value in _tls_settings(self.certs)),
                f"requirepass {SENTINEL_PW}", *lines, f"sentinel auth-pass {self.master_name} {MASTER_PW}"]


@pytest.fixture(scope="module")
def tls_sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsSentinels]:
    if not shutil.which("openssl"):
        _unavailable("no openssl CLI to make a test certificate")
    binary = find_redis_server("path")
    if not binary:
        _unavailable("no redis-server on PATH")
    certs = tmp_path_factory.mktemp("sentinel-tls")
    make_certificates(certs)
    setup = TlsSentinels(binary, certs)
    try:
        setup.start()  # cleans up after itself if it fails
    except RuntimeError as exc:
        if "tls" in str(exc).lower():
            _unavailable(f"this redis-server was built without TLS: {exc}")
        raise
    try:
        yield setup
    finally:
        setup.cleanup()  # every process by its PID


def direct(server: TlsServer) -> redis.Redis:
    """A client of one server at its own address (not through the sentinels), over TLS with the password."""
    return redis.Redis("127.0.0.1", server.port, password=MASTER_PW, ssl=True, ssl_ca_certs=str(server.certs / "ca.crt"),
                       decode_responses=True)


def sentinel_options(setup: TlsSentinels, master_pw: str = MASTER_PW, sentinel_pw: str = SENTINEL_PW) -> dict[str, Any]:
    """The README's form: the master by name in a rediss:// URL with its password and CA; the sentinels' own in SENTINEL_KWARGS."""
    ca = str(setup.certs / "ca.crt")
    return {
        "REDIS_URL": f"rediss://:{master_pw}@{setup.master_name}/0?ssl_ca_certs={ca}",
        "SENTINELS": setup.sentinels,
        "SENTINEL_MASTER": setup.master_name,
        "SENTINEL_KWARGS": {"password": sentinel_pw, "ssl": True, "ssl_ca_certs": ca},
    }


@pytest.fixture
def on_tls_sentinels(tls_sentinels: TlsSentinels) -> Iterator[TlsSentinels]:
    """TASKS['default'] through the TLS sentinels (fresh clients before and after), the master emptied first."""
    master = direct(tls_sentinels.master)
    master.flushall()
    master.close()
    with topology_settings(**sentinel_options(tls_sentinels)):
        connection.reset()
        yield tls_sentinels
    connection.reset()


def test_the_settings_pass_the_checks(tls_sentinels):
    assert validate("default", {"OPTIONS": sentinel_options(tls_sentinels)}) == []


def test_a_task_runs_through_tls_sentinels_and_is_stored_on_the_master_and_replicated(on_tls_sentinels):
    setup = on_tls_sentinels
    client = connection.get_client(get_options())
    pool: Any = client.connection_pool
    assert pool.connection_class is SentinelManagedSSLConnection
    assert all(s.connection_pool.connection_class is redis.SSLConnection for s in pool.sentinel_manager.sentinels)
    assert pool.get_master_address() == ("127.0.0.1", setup.master.port)
    assert store_server.check_server(get_options())["redis_version"]

    result = tasks.add.enqueue(20, 22)
    assert Worker(["default"], burst=True).run() == 1
    got = tasks.add.get_result(result.id)
    assert (got.status, got.return_value) == (TaskResultStatus.SUCCESSFUL, 42)

    key = QueueKeys("default").task(result.id)
    master, replica = direct(setup.master), direct(setup.replica)
    plain = redis.Redis("127.0.0.1", setup.master.port, password=MASTER_PW, socket_timeout=1, retry=Retry(NoBackoff(), 0))
    try:
        with pytest.raises((redis.ConnectionError, redis.TimeoutError)):  # no plain text anywhere: only TLS could have worked
            plain.ping()
        assert master.hget(key, "state") == "finished"  # stored on the master ...
        assert wait_for(lambda: replica.hget(key, "state") == "finished", 5)  # ... and replicated
    finally:
        master.close()
        replica.close()
        plain.close()


@pytest.mark.parametrize(("wrong", "expected"), [
    ("master", "refused our credentials"),
    ("sentinel", "the sentinels refused our credentials"),
])
def test_a_wrong_password_gives_a_clear_error_without_the_password(tls_sentinels, wrong, expected):
    """check_server (what runworker and the checks call), enqueue and aenqueue; no password in any text or traceback."""
    opts = sentinel_options(tls_sentinels, **{f"{wrong}_pw": WRONG_PW})
    options = build_options("default", {"OPTIONS": opts})
    try:
        with pytest.raises(RedisUnavailable) as exc:
            store_server.check_server(options)
        assert expected in str(exc.value), str(exc.value)
        assert f"Redis master {tls_sentinels.master_name!r} of sentinels 127.0.0.1:" in str(exc.value)
        assert "\n" not in str(exc.value)
        no_secret_in(str(exc.value) + repr(exc.value) + "".join(traceback.format_exception(exc.value)))
        no_secret_in(repr(connection.get_client(options)) + connection.describe(options))
    finally:
        connection.reset()
    with topology_settings(**opts):
        connection.reset()
        try:
            with pytest.raises(redis.RedisError) as raised:
                tasks.add.enqueue(1, 2)
            with pytest.raises(redis.RedisError) as araised:
                asyncio.run(tasks.add.aenqueue(1, 2))
        finally:
            connection.reset()
    for error in (raised.value, araised.value):
        assert isinstance(error, RedisUnreachable) and expected in str(error) and "\n" not in str(error), repr(error)
        no_secret_in(str(error) + repr(error) + "".join(traceback.format_exception(error)))


class DeadSentinel:
    """A port where a sentinel should be, that drops every connection at once and counts them: each retry of a
    client is one more connection."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def test_a_dead_sentinel_first_in_the_list_costs_no_retries(tls_sentinels):
    """The lookup goes on to the next sentinel at once: one connection to the dead one per lookup, not redis-py's
    retries (about 4 s of them when the sentinels' clients had redis-py's Retry). Counted, not timed: a busy machine
    slows the TLS handshakes, not the count."""
    dead = DeadSentinel()
    opts = sentinel_options(tls_sentinels)
    opts["SENTINELS"] = [("127.0.0.1", dead.port), *opts["SENTINELS"]]
    options = build_options("default", {"OPTIONS": opts})
    try:
        assert store_server.check_server(options)["redis_version"]
        assert dead.connections == 1
    finally:
        connection.reset()
        dead.close()


def test_aenqueue_and_aget_result_through_tls_sentinels(on_tls_sentinels):
    """The asyncio path builds redis.asyncio's Sentinel client from the same settings: TLS and both passwords.

    10 calls at once, not more: through a routing client each call in flight opens a connection to the master and
    one to a sentinel, and redis.asyncio makes an SSL context for each (tens of milliseconds of CPU apiece).
    """
    setup = on_tls_sentinels
    n = 10

    async def enqueue() -> list[str]:
        results = await asyncio.gather(*(tasks.add.aenqueue(i, i) for i in range(n)))
        [link] = wires_of(asyncio.get_running_loop())
        pool: Any = link.pool
        assert pool.connection_class is AsyncSentinelSSLConnection
        assert all(s.connection_pool.connection_class.__name__ == "SSLConnection" for s in pool.sentinel_manager.sentinels)
        return [r.id for r in results]

    ids = asyncio.run(enqueue())
    assert Worker(["default"], burst=True).run() == n

    async def read() -> list[tuple[object, object]]:
        results = await asyncio.gather(*(tasks.add.aget_result(i) for i in ids))
        return [(r.status, r.return_value) for r in results]

    assert asyncio.run(read()) == [(TaskResultStatus.SUCCESSFUL, 2 * i) for i in range(n)]
    master = direct(setup.master)
    try:
        assert all(master.hget(QueueKeys("default").task(i), "state") == "finished" for i in ids)
    finally:
        master.close()
