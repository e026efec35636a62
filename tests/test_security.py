"""Connections and security: AUTH (password and ACL user), TLS, no pickle, no password in any output.

Each test starts its own redis-server on a loopback port (``requirepass``, ACL
users from the command line, or a TLS port with a throwaway CA made by the
``openssl`` CLI). Debian's redis-server 7.0 here is built with TLS (it links
libssl), so ``rediss://`` is tested for real; the TLS tests skip only where
the binary or ``openssl`` lacks it.
"""

from __future__ import annotations

import copy
import logging
import re
import shutil
import signal
import subprocess
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.test import override_settings

import django_redisq
from django_redisq import connection
from django_redisq.compat import TaskResultStatus
from django_redisq.conf import build_options, get_options
from django_redisq.exceptions import RedisUnavailable
from django_redisq.store import server as store_server
from django_redisq.testing import RedisServer, free_port
from tests.conftest import WorkerProcess
from tests.testapp import tasks

PASSWORD = "Sup3r-Secret-pw-7781"
ALICE_PW = "alice-Secret-pw-4242"
BOB_PW = "bob-Secret-pw-9090"
SECRETS = (PASSWORD, ALICE_PW, BOB_PW, "wrong-Secret-pw-0000")


def no_secret_in(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"a password appears in: {text[:500]!r}"


@pytest.fixture(scope="module")
def auth_server() -> Iterator[RedisServer]:
    """requirepass for the default user; 'alice' may do anything; 'bob' only our keys, no admin commands."""
    with RedisServer(
        None, None, "--requirepass", PASSWORD,
        "--user", "alice", "on", f">{ALICE_PW}", "~*", "&*", "+@all",
        "--user", "bob", "on", f">{BOB_PW}", "~redisq:*", "~test:*", "+@all", "-@admin", "-@dangerous", "+info",
    ) as server:
        yield server


def url_for(server: RedisServer, userinfo: str = "", scheme: str = "redis", port: int | None = None, query: str = "") -> str:
    at = f"{userinfo}@" if userinfo else ""
    return f"{scheme}://{at}127.0.0.1:{port or server.port}/0{query}"


@pytest.fixture
def use_url(r):
    """Point TASKS['default'] at another URL for the test (fresh clients before and after)."""
    stack = []

    def point(url: str) -> None:
        tasks_setting = copy.deepcopy(settings.TASKS)
        tasks_setting["default"]["OPTIONS"]["REDIS_URL"] = url
        ctx = override_settings(TASKS=tasks_setting)
        ctx.enable()
        stack.append(ctx)
        connection.reset()

    yield point
    for ctx in reversed(stack):
        ctx.disable()
    connection.reset()


def flush(server: RedisServer, port: int | None = None) -> None:
    c = redis.Redis(host="127.0.0.1", port=port or server.port, username="alice", password=ALICE_PW)
    c.flushall()
    c.close()


def round_trip(make_worker) -> None:
    """Enqueue through the public API, run it in a worker, read the result back."""
    result = tasks.add.enqueue(20, 22)
    assert make_worker().run() == 1
    assert tasks.add.get_result(result.id).status == TaskResultStatus.SUCCESSFUL
    assert tasks.add.get_result(result.id).return_value == 42


@pytest.mark.parametrize("userinfo", [f":{PASSWORD}", f"default:{PASSWORD}", f"alice:{ALICE_PW}", f"bob:{BOB_PW}"])
def test_auth_with_password_and_acl_users(auth_server, use_url, make_worker, userinfo):
    flush(auth_server)
    use_url(url_for(auth_server, userinfo))
    info = store_server.check_server(get_options())
    assert info["redis_version"]
    round_trip(make_worker)


def test_a_least_privilege_acl_user_is_enough(auth_server, use_url, make_worker):
    """'bob' cannot CONFIG, FLUSHALL or KEYS and sees only redisq:* / test:* keys; the queue still works."""
    flush(auth_server)
    use_url(url_for(auth_server, f"bob:{BOB_PW}"))
    bob = connection.get_client(get_options())
    with pytest.raises(redis.exceptions.NoPermissionError):
        bob.config_get("save")
    assert store_server.durability_warnings(get_options()) is not None  # degrades, does not raise
    round_trip(make_worker)
    results = tasks.counted.enqueue("k")
    assert make_worker("emails").run() == 1
    assert tasks.counted.get_result(results.id).return_value == 1


@pytest.mark.parametrize(("userinfo", "expected"), [
    ("", "refused our credentials"),  # NOAUTH
    (":wrong-Secret-pw-0000", "refused our credentials"),
    ("alice:wrong-Secret-pw-0000", "refused our credentials"),
    ("mallory:wrong-Secret-pw-0000", "refused our credentials"),
])
def test_wrong_credentials_give_a_clear_error_without_the_password(auth_server, userinfo, expected):
    options = build_options("default", {"OPTIONS": {"REDIS_URL": url_for(auth_server, userinfo)}})
    try:
        with pytest.raises(RedisUnavailable) as exc:
            store_server.check_server(options)
        text = str(exc.value) + repr(exc.value) + "".join(traceback.format_exception(exc.value))
        assert expected in str(exc.value)
        assert f"127.0.0.1:{auth_server.port}" in str(exc.value)
        no_secret_in(text)
        no_secret_in(repr(connection.get_client(options)) + connection.describe(options))
    finally:
        connection.reset()


def test_enqueue_with_a_wrong_password_raises_without_the_password(auth_server, use_url):
    use_url(url_for(auth_server, ":wrong-Secret-pw-0000"))
    with pytest.raises(redis.AuthenticationError) as exc:
        tasks.add.enqueue(1, 2)
    no_secret_in(str(exc.value) + repr(exc.value) + "".join(traceback.format_exception(exc.value)))


def _runworker(url: str, *args: str, stop_after: float | None = None, during=None) -> tuple[int, str]:
    wp = WorkerProcess(url, *args)
    try:
        if stop_after is not None:
            time.sleep(stop_after)
            if during:
                during()
            wp.proc.send_signal(signal.SIGTERM)
        wp.proc.wait(60)
    finally:
        if wp.proc.poll() is None:
            wp.proc.kill()
            wp.proc.wait(10)
    return wp.proc.returncode, wp.output()


def test_runworker_with_a_wrong_password_exits_1_with_one_line_and_no_password(auth_server):
    code, out = _runworker(url_for(auth_server, ":wrong-Secret-pw-0000"), "--burst", "-v", "3")
    assert code == 1
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("CommandError: Redis at redis://127.0.0.1:"), out
    assert "refused our credentials" in out
    no_secret_in(out)


def test_worker_logs_never_show_the_password_even_when_redis_fails(auth_server, r):
    """A worker at full verbosity, its Redis restarted and its connections killed while it runs."""
    flush(auth_server)
    url = url_for(auth_server, f":{PASSWORD}")
    producer = redis.Redis.from_url(url, decode_responses=True)

    def trouble() -> None:
        producer.client_kill_filter(_type="normal", skipme=True)
        time.sleep(0.5)
        auth_server.stop()
        time.sleep(4)  # longer than redis-py's own retries: the worker logs connection errors
        auth_server.start()
        time.sleep(1.5)

    code, out = _runworker(url, "default", "-v", "3", stop_after=1.5, during=trouble)
    producer.close()
    assert code == 0, out
    assert "Connection refused" in out, "the outage should have been logged"
    no_secret_in(out)


def test_no_pickle_anywhere():
    root = Path(django_redisq.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"^\s*(import|from)\s+(c?pickle|marshal|shelve|dill)\b", text, re.M), path
        assert "pickle." not in text and "loads(" not in text.replace("json.loads(", "").replace("_loads(", ""), path


def test_describe_and_client_repr_never_show_the_password():
    for url in (f"redis://:{PASSWORD}@127.0.0.1:6390/0", f"rediss://alice:{ALICE_PW}@127.0.0.1:6390/1"):
        options = build_options("default", {"OPTIONS": {"REDIS_URL": url}})
        try:
            no_secret_in(connection.describe(options) + repr(connection.get_client(options)))
        finally:
            connection.reset()


def test_settings_errors_never_show_the_password():
    from django_redisq.conf import validate

    for url in (f"http://:{PASSWORD}@127.0.0.1/0", f"redis//:{PASSWORD}@127.0.0.1"):
        no_secret_in(repr(validate("default", {"OPTIONS": {"REDIS_URL": url}})))


def test_the_engine_logs_through_its_own_logger_without_secrets(caplog, auth_server, use_url, make_worker):
    flush(auth_server)
    use_url(url_for(auth_server, f"alice:{ALICE_PW}"))
    with caplog.at_level(logging.DEBUG):
        round_trip(make_worker)
    no_secret_in(caplog.text)


# -- TLS ---------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(d: Path) -> None:
    """A throwaway CA (``d/ca.crt``) and a certificate for 127.0.0.1 it signed (``d/server.crt``, ``d/server.key``)."""
    # a CA with key usage and basic constraints: Python 3.13 verifies strictly (VERIFY_X509_STRICT)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=redisq-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-addext", "subjectKeyIdentifier=hash", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\nauthorityKeyIdentifier=keyid\n"
    )
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.crt", "-days", "2", "-extfile", "ext.cnf", cwd=d)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory) -> Iterator[tuple[RedisServer, int, Path]]:
    if not shutil.which("openssl"):
        pytest.skip("no openssl CLI to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    make_certificates(d)
    tls_port = free_port()
    server = RedisServer(
        None, None, "--tls-port", str(tls_port), "--tls-cert-file", str(d / "server.crt"),
        "--tls-key-file", str(d / "server.key"), "--tls-ca-cert-file", str(d / "ca.crt"),
        "--tls-auth-clients", "no", "--requirepass", PASSWORD,
        "--user", "alice", "on", f">{ALICE_PW}", "~*", "&*", "+@all",
    )
    try:
        server.start()
    except RuntimeError as exc:
        if "tls" in str(exc).lower():
            pytest.skip(f"this redis-server was built without TLS: {exc}")
        raise
    try:
        yield server, tls_port, d
    finally:
        server.cleanup()


def test_rediss_with_password_works(tls_server, use_url, make_worker):
    server, tls_port, d = tls_server
    flush(server)
    url = url_for(server, f":{PASSWORD}", "rediss", tls_port, f"?ssl_ca_certs={d / 'ca.crt'}")
    use_url(url)
    client = connection.get_client(get_options())
    assert client.connection_pool.connection_class is redis.SSLConnection
    assert store_server.check_server(get_options())["redis_version"]
    round_trip(make_worker)


def test_aenqueue_and_aget_result_over_tls_with_an_acl_user(tls_server, use_url, make_worker):
    """The event loop's channel takes over a socket redis.asyncio opened: TLS handshake and AUTH included."""
    import asyncio

    server, tls_port, d = tls_server
    flush(server)
    use_url(url_for(server, f"alice:{ALICE_PW}", "rediss", tls_port, f"?ssl_ca_certs={d / 'ca.crt'}"))

    async def enqueue() -> str:
        results = await asyncio.gather(*(tasks.add.aenqueue(i, i) for i in range(20)))
        return results[-1].id

    last = asyncio.run(enqueue())
    assert make_worker().run() == 20

    async def read() -> tuple[object, object]:
        result = await tasks.add.aget_result(last)
        return result.status, result.return_value

    assert asyncio.run(read()) == (TaskResultStatus.SUCCESSFUL, 38)


def test_runworker_over_tls_with_an_acl_user(tls_server, r):
    server, tls_port, d = tls_server
    flush(server)
    url = url_for(server, f"alice:{ALICE_PW}", "rediss", tls_port, f"?ssl_ca_certs={d / 'ca.crt'}")
    producer = redis.Redis.from_url(url, decode_responses=True)
    from django_redisq.message import encode

    producer.hset("redisq:{default}:t:tls-1", mapping={
        "msg": encode([2, 3], {}), "task": "tests.testapp.tasks.add",
        "state": "pending", "deliveries": 0, "failures": 0, "idem": "", "enqueued_at": 1})
    producer.lpush("redisq:{default}:pending", "tls-1")
    code, out = _runworker(url, "default", "--burst", "-v", "2")
    assert code == 0, out
    assert producer.hget("redisq:{default}:t:tls-1", "state") == "finished"
    assert producer.hget("redisq:{default}:t:tls-1", "result") == "5"
    producer.close()
    no_secret_in(out)


def test_plain_redis_on_the_tls_port_fails_and_tls_without_the_ca_is_refused(tls_server):
    server, tls_port, _ = tls_server
    for url in (url_for(server, f":{PASSWORD}", "redis", tls_port),  # plaintext to a TLS port
                url_for(server, f":{PASSWORD}", "rediss", tls_port)):  # certificate not trusted
        options = build_options("default", {"OPTIONS": {"REDIS_URL": url}})
        try:
            with pytest.raises(RedisUnavailable) as exc:
                store_server.check_server(options)
        finally:
            connection.reset()
        assert "\n" not in str(exc.value)
        no_secret_in(str(exc.value))
