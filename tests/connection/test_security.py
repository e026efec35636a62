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
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

import django_redisq
from django_redisq import connection
from django_redisq.compat import TaskResultStatus
from django_redisq.exceptions import RedisUnavailable, RedisUnreachable
from django_redisq.settings.read import build_options, get_options
from django_redisq.store import server as store_server
from django_redisq.testing import RedisServer, free_port
from tests.conftest import WorkerProcess
from tests.helpers import keys, wait_for
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
    with pytest.raises(RedisUnreachable, match="refused our credentials") as exc:
        tasks.add.enqueue(1, 2)
    assert isinstance(exc.value.cause, redis.AuthenticationError)
    no_secret_in(str(exc.value) + repr(exc.value) + "".join(traceback.format_exception(exc.value)))


def _runworker(url: str, *args: str, stop_after: float | None = None, during=None, serving=None) -> tuple[int, str]:
    """``serving``: a predicate true once the worker serves; ``stop_after`` counts from then, not from its start
    (setting Django up can take seconds on a loaded machine); ``during(wp)`` runs after it, before the SIGTERM."""
    wp = WorkerProcess(url, *args)
    try:
        if serving is not None and not wait_for(lambda: serving() or wp.proc.poll() is not None, 60):
            raise AssertionError("the worker did not start serving within 60 s")
        if stop_after is not None:
            time.sleep(stop_after)
            if during:
                during(wp)
            wp.proc.send_signal(signal.SIGTERM)
        wp.proc.wait(60)
    finally:
        if wp.proc.poll() is None:
            wp.proc.kill()
            wp.proc.wait(10)
    return wp.proc.returncode, wp.output()


def test_runworker_with_a_wrong_password_exits_3_with_one_line_and_no_password(auth_server):
    code, out = _runworker(url_for(auth_server, ":wrong-Secret-pw-0000"), "--burst", "-v", "3")
    assert code == 3
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("CommandError: Redis at redis://127.0.0.1:"), out
    assert "refused our credentials" in out
    no_secret_in(out)


def log_of(wp: WorkerProcess) -> str:
    wp.log.seek(0)
    return wp.log.read()


def _serving_again(client: redis.Redis) -> bool:
    """The restarted server has the worker's heartbeat again (it came back empty)."""
    try:
        return client.zcard(keys().workers) > 0
    except redis.ConnectionError:
        return False


def test_worker_logs_never_show_the_password_even_when_redis_fails(auth_server, r):
    """A worker at full verbosity, its Redis restarted and its connections killed while it runs."""
    flush(auth_server)
    url = url_for(auth_server, f":{PASSWORD}")
    producer = redis.Redis.from_url(url, decode_responses=True)

    def trouble(wp: WorkerProcess) -> None:
        producer.client_kill_filter(_type="normal", skipme=True)
        time.sleep(0.5)
        auth_server.stop()
        # down until the worker logged the outage (past redis-py's own retries), then up until it serves again
        assert wait_for(lambda: "Connection refused" in log_of(wp), 30), log_of(wp)
        auth_server.start()
        again = redis.Redis.from_url(url, decode_responses=True)
        assert wait_for(lambda: _serving_again(again), 30), log_of(wp)
        again.close()

    # the trouble starts once the worker serves (its heartbeat is in Redis): seen under parallel load, a fixed 1.5 s
    # from the process's start stopped Redis before the worker had connected, and it exited 3 at its start check
    code, out = _runworker(url, "default", "-v", "3", stop_after=0.5, during=trouble,
                           serving=lambda: producer.zcard(keys().workers) > 0)
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
    from django_redisq.settings.read import validate

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
    from django_redisq.core.message import encode

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


# -- no credential in a settings message: every check that can show one (django_redisq/core/redact.py) -----------

SETTING_PW = "Setting-Secret-pw-5150"
SENTINEL_OPTS = {"SENTINELS": [("10.0.0.1", 26379), ("10.0.0.2", 26379)], "SENTINEL_MASTER": "mymaster"}
REDIS_CACHE = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": f"redis://:{SETTING_PW}@10.0.0.5:6379/0",
               "OPTIONS": {"PASSWORD": SETTING_PW}}
URLS = {  # every way a REDIS_URL carries a password
    "userinfo": f"redis://user:{SETTING_PW}@10.0.0.9:6379/0",
    "rediss": f"rediss://:{SETTING_PW}@10.0.0.9:6380/0",
    "unix-query": f"unix:///run/redis.sock?db=0&password={SETTING_PW}",
    "query": f"redis://10.0.0.9:6379/0?password={SETTING_PW}",
    "at-in-password": f"redis://:{SETTING_PW}@x/y@10.0.0.9:6379/0",
}


def bad_settings() -> list:
    """(check id, OPTIONS, CACHES) of invalid settings that hold SETTING_PW, one for each check that could show it."""
    cases = [(f"E067-{name}", "E067", {**SENTINEL_OPTS, "REDIS_URL": url}, None) for name, url in URLS.items()]
    cases += [
        ("E067-port", "E067", {**SENTINEL_OPTS, "REDIS_URL": f"redis://:{SETTING_PW}@mymaster:6379/0"}, None),
        ("E067-bad-port", "E067", {**SENTINEL_OPTS, "REDIS_URL": f"redis://:{SETTING_PW}@mymaster:port/0"}, None),
        ("E067-master", "E067", {**SENTINEL_OPTS, "SENTINEL_MASTER": f"redis://:{SETTING_PW}@mymaster",
                                 "REDIS_URL": "redis://10.0.0.9:6379/0"}, None),
        ("E067-cache", "E067", {**SENTINEL_OPTS, "CACHE_ALIAS": "c"}, {"c": REDIS_CACHE}),
        ("E062-db", "E062", {"CLUSTER": True, "REDIS_URL": f"redis://:{SETTING_PW}@10.0.0.1:7000/3"}, None),
        ("E062-unix", "E062", {"CLUSTER": True, "REDIS_URL": f"unix:///tmp/r.sock?password={SETTING_PW}"}, None),
        ("E061-cache", "E061", {"CLUSTER": True, "EMBEDDED": True, "CACHE_ALIAS": "c"}, {"c": REDIS_CACHE}),
        ("E005-url", "E005", {"REDIS_URL": URLS["userinfo"], "CACHE_ALIAS": "c"}, {"c": REDIS_CACHE}),
        ("E006-scheme", "E006", {"REDIS_URL": f"http://:{SETTING_PW}@10.0.0.9/0"}, None),
        ("E006-unparsable", "E006", {"REDIS_URL": f"redis://:{SETTING_PW}@[::1/0"}, None),
        ("E007-url", "E007", {"CACHE_ALIAS": URLS["userinfo"]}, {"c": REDIS_CACHE}),
        ("E008-location", "E008", {"CACHE_ALIAS": "c"}, {"c": {**REDIS_CACHE, "BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}),
        ("E063-url", "E063", {**SENTINEL_OPTS, "SENTINELS": [f"redis://:{SETTING_PW}@10.0.0.1:26379"]}, None),
        ("E064-pair", "E064", {**SENTINEL_OPTS, "SENTINEL_MASTER": ("mymaster", f"password={SETTING_PW}")}, None),
        ("E065-kwargs", "E065", {"REDIS_URL": URLS["rediss"], "SENTINEL_KWARGS": {"password": SETTING_PW}}, None),
        ("E066-unknown-key", "E066", {**SENTINEL_OPTS, "SENTINEL_KWARGS": {"password": SETTING_PW, "db": 3}}, None),
        ("E066-pairs", "E066", {**SENTINEL_OPTS, "SENTINEL_KWARGS": [("password", SETTING_PW)]}, None),
        ("E066-text", "E066", {**SENTINEL_OPTS, "SENTINEL_KWARGS": f"password={SETTING_PW}"}, None),
        ("E066-dict-in-list", "E066", {**SENTINEL_OPTS, "SENTINEL_KWARGS": [{"PASSWORD": SETTING_PW}]}, None),
        ("E012-misplaced", "E012", {"MAX_RETRIES": URLS["rediss"]}, None),
        ("E068-misplaced", "E068", {"DURABLE_REPLICAS": {"password": SETTING_PW}}, None),
        ("E069-misplaced", "E069", {"DURABLE_TIMEOUT": f"password={SETTING_PW}"}, None),
    ]
    return [pytest.param(cid, opts, caches, id=name) for name, cid, opts, caches in cases]


@pytest.mark.parametrize(("check_id", "options", "caches"), bad_settings())
def test_no_settings_check_shows_a_credential(check_id, options, caches):
    """conf.validate, the system checks (manage.py check, run before every command) and build_options' error
    (a 500's log) name the problem without the password, whichever setting holds it."""
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    from django_redisq.settings.read import validate

    params = {"BACKEND": "django_redisq.backend.RedisQueueBackend", "QUEUES": ["default"], "OPTIONS": options}
    with override_settings(CACHES=caches or settings.CACHES):
        problems = validate("default", params)
        assert check_id in [cid for cid, _, _ in problems]
        for _, msg, hint in problems:
            assert SETTING_PW not in msg and SETTING_PW not in hint, (msg, hint)
        with pytest.raises(ImproperlyConfigured) as raised:
            build_options("default", params)
        assert f"[{check_id}]" in str(raised.value) and SETTING_PW not in str(raised.value)
        with override_settings(TASKS={"default": params}), pytest.raises(SystemCheckError) as checked:
            call_command("check")
        assert f"django_redisq.{check_id}" in str(checked.value) and SETTING_PW not in str(checked.value)


def test_redact_masks_every_form_a_credential_takes():
    from django_redisq.core.redact import redact, shown

    pw = SETTING_PW
    texts = {
        f"redis://user:{pw}@10.0.0.9:6379/0": "redis://***@10.0.0.9:6379/0",
        f"rediss://:{pw}@10.0.0.9/0": "rediss://***@10.0.0.9/0",
        f"unix:///run/redis.sock?password={pw}&db=2": "unix:///run/redis.sock?password=***&db=2",
        f"redis://10.0.0.9/0?ssl_password={pw}": "redis://10.0.0.9/0?ssl_password=***",
        f"{{'password': '{pw}', 'db': 3}}": "{'password': '***', 'db': 3}",
        f"[('PASSWORD', '{pw}')]": "[('PASSWORD', '***')]",
        f'{{"password": "{pw}"}}': '{"password": "***"}',
    }
    for text, expected in texts.items():
        assert redact(text) == expected
    # our own words and placeholders are left alone
    for text in ('"redis://:<password>@mymaster/0"', "check the password/username", "only its credentials, TLS and database"):
        assert redact(text) == text
    values = [f"redis://:a b{pw}@h/0", {"password": pw, "x": [("token", pw)]}, (f"password={pw}",), {f"auth_token={pw}"},
              {"LOCATION": f"redis://:{pw}@h/0", "OPTIONS": {"PASSWORD": pw}}, b"redis://:" + pw.encode() + b"@h/0"]
    for value in values:
        assert pw not in shown(value) and "***" in shown(value), shown(value)
    assert shown(1.5) == "1.5" and shown("mymaster") == "'mymaster'"


def test_redact_masks_headers_and_yaml_style_secrets():
    """``Authorization: Bearer <token>`` (an HTTP client's error) and unquoted ``key: value`` lines (a YAML or .env dump)."""
    from django_redisq.core.redact import redact, shown

    pw = SETTING_PW
    texts = {
        f"Authorization: Bearer {pw}": "Authorization: Bearer ***",
        f"request failed, headers={{'Authorization': 'Bearer {pw}'}}": "request failed, headers={'Authorization': 'Bearer ***'}",
        f"authorization: Basic {pw}==": "authorization: Basic ***",
        f"Authorization: {pw}": "Authorization: ***",
        f"401 for token Bearer {pw}.x-y_z": "401 for token Bearer ***",
        f"secret: {pw}": "secret: ***",
        f"client_secret: {pw}\nport: 6379": "client_secret: ***\nport: 6379",
        f"PASSWORD:{pw}": "PASSWORD:***",
        f'api_token: "{pw} with spaces"': 'api_token: "***"',
    }
    for text, expected in texts.items():
        assert redact(text) == expected, redact(text)
    for text in ("MAX_AGE: seconds; MAX_LEN, HARD_MAX_LEN, HEALTH_MAX_LAG: entries.", "check the password/username"):
        assert redact(text) == text
    assert pw not in shown({"headers": {"Authorization": f"Bearer {pw}"}, "note": f"secret: {pw}"})


def test_describe_never_shows_a_credential():
    cases = [{"REDIS_URL": url} for url in URLS.values()]
    cases += [{**SENTINEL_OPTS, "REDIS_URL": f"redis://:{SETTING_PW}@mymaster/0", "SENTINEL_KWARGS": {"password": SETTING_PW}},
              {"REDIS_URL": f"redis://:{SETTING_PW}@10.0.0.1:7000/0", "CLUSTER": True}]
    for options in cases:
        where = connection.describe(build_options("default", {"OPTIONS": options}))
        assert SETTING_PW not in where and ("10.0.0" in where or "mymaster" in where or "redis.sock" in where), where
    with override_settings(CACHES={"c": REDIS_CACHE}):
        assert connection.describe(build_options("default", {"OPTIONS": {"CACHE_ALIAS": "c"}})) == "the Redis of cache 'c'"


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/metrics/", "/admin/django_redisq/deadletter/"])
def test_a_500_of_bad_settings_logs_no_credential(path, caplog, admin_client):
    """Settings E067 refuses, met at request time: the 500's log names the problem, not the password."""
    from django.test import Client

    tasks_setting = copy.deepcopy(settings.TASKS)
    tasks_setting["default"]["OPTIONS"].update(SENTINEL_OPTS, REDIS_URL=URLS["userinfo"])
    client = Client(raise_request_exception=False)
    client.cookies = admin_client.cookies
    with override_settings(TASKS=tasks_setting), caplog.at_level(logging.ERROR):
        response = client.get(path)
    assert response.status_code == 500
    assert "E067" in caplog.text and SETTING_PW not in caplog.text
    assert SETTING_PW not in response.content.decode(errors="replace")


def test_a_tls_master_behind_clear_text_sentinels_is_a_check_warning():
    """W060: rediss:// to the master, nothing for the sentinels: their answers (and password) cross the network clear."""
    from django_redisq.settings.read import check_errors

    base = {"BACKEND": "django_redisq.backend.RedisQueueBackend", "QUEUES": ["default"]}
    clear = {"REDIS_URL": "rediss://:hunter2@mymaster/0", "SENTINELS": [("10.0.0.1", 26379)], "SENTINEL_MASTER": "mymaster"}
    found = check_errors("default", {**base, "OPTIONS": clear})
    assert [(m.id, m.level) for m in found] == [("django_redisq.W060", 30)]  # a warning, not an error
    assert "hunter2" not in found[0].msg + (found[0].hint or "")
    tls = {**clear, "SENTINEL_KWARGS": {"ssl": True}}
    assert check_errors("default", {**base, "OPTIONS": tls}) == []
    assert check_errors("default", {**base, "OPTIONS": {**clear, "REDIS_URL": "redis://:hunter2@mymaster/0"}}) == []
