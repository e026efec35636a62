"""Tasks the test suite runs. Effects are recorded in Redis (``effects`` hash)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, cast

import redis

from django_redisq import Retry, TaskTimeout, task

EFFECTS = "test:effects"


_topology_clients: dict[str, Any] = {}


def _effects() -> redis.Redis:
    """A client of where the tests' tasks run: one Redis, or the cluster or sentinels of a topology pass (conftest)."""
    from django.conf import settings

    options = settings.TASKS["default"]["OPTIONS"]
    if not (options.get("CLUSTER") or options.get("SENTINELS")):
        return redis.Redis.from_url(options["REDIS_URL"], decode_responses=True)
    key = repr(sorted(options.items()))
    client = _topology_clients.get(key)
    if client is None:  # discovering the topology takes round trips: once per process
        if options.get("CLUSTER"):
            from redis.cluster import RedisCluster

            client = RedisCluster.from_url(options["REDIS_URL"], decode_responses=True)
        else:
            from redis.sentinel import Sentinel

            client = Sentinel(options["SENTINELS"]).master_for(options["SENTINEL_MASTER"], decode_responses=True)
        client = _topology_clients.setdefault(key, client)
    return cast("redis.Redis", client)


def record(key: str) -> int:
    return int(_effects().hincrby(EFFECTS, key, 1))


@task
def noop(x: int) -> int:
    return x


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails")
def counted(key: str) -> int:
    """Counts each run under ``key``: proves how often a task's effect happened."""
    return record(key)


@task(max_retries=3)
def flaky(key: str, fail_times: int) -> str:
    """Fails ``fail_times`` times, then succeeds."""
    n = record(key)
    if n <= fail_times:
        raise RuntimeError(f"flaky failure {n}")
    return f"ok after {n}"


@task(max_retries=1)
def always_fails(message: str = "boom") -> None:
    raise ValueError(message)


@task(max_retries=5, no_retry_on=KeyError)
def not_retryable() -> None:
    raise KeyError("missing")


@task(max_retries=2)
def asks_retry(key: str) -> str:
    if record(key) == 1:
        raise Retry(delay=0.01)
    return "second time"


@task
def slow(key: str, seconds: float) -> str:
    record(key + ":start")
    time.sleep(seconds)
    record(key)
    return key


@task(takes_context=True)
def takes_context(context, x: int) -> dict:  # type: ignore[no-untyped-def]
    return {"attempt": context.attempt, "id": context.task_result.id, "x": x}


@task(idempotency_key=lambda order_id: f"order-{order_id}")
def charge(order_id: int) -> int:
    record(f"charge:{order_id}")
    return order_id


@task
def returns_object() -> object:
    return object()


@task
def pid() -> int:
    return os.getpid()


@task(queue_name="emails", max_retries=0)
def work(key: str) -> str:
    """A short task recording when it started and that it finished (for crash tests)."""
    client = _effects()
    sec, usec = client.time()
    client.hsetnx("test:first_start", key, sec * 1000 + usec // 1000)
    client.hset("test:last_start", key, sec * 1000 + usec // 1000)
    time.sleep(0.003)
    client.hincrby(EFFECTS, key, 1)
    return key

from tests.testapp import chaos_tasks as chaos_tasks  # noqa: E402  (fault-injection tasks, registered in every worker)
from tests.testapp import topology_tasks as topology_tasks  # noqa: E402  (Cluster and Sentinel tests)


@task(queue_name="emails", max_retries=5)
def work_retrying(key: str) -> str:
    """``work`` with retries: its own effect store may be briefly down (Redis restart tests)."""
    return work.func(key)


RUNS: dict[str, int] = {}
"""Runs of ``sleeper`` in this process (in-process worker tests; no Redis write in the task)."""


@task
def sleeper(key: str, seconds: float) -> float:
    """Sleeps, counts its run in RUNS, returns the time it finished (ms): for settle-latency tests."""
    time.sleep(seconds)
    RUNS[key] = RUNS.get(key, 0) + 1
    return time.time() * 1000


@task(max_retries=3)
def interrupts(kind: str) -> None:
    """Raises what a worker thread must survive: KeyboardInterrupt or SystemExit."""
    raise KeyboardInterrupt if kind == "keyboard" else SystemExit(3)


@task(max_retries=0)
def kills_its_worker() -> None:
    """SIGKILLs the process running it (a segfault, an OOM kill): a crash-looping task."""
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


@task(queue_name="emails", max_retries=0)
def work_slowly(key: str, seconds: float) -> str:
    """Counts its effect under ``key`` after ``seconds``: a short task a frozen worker may hold."""
    time.sleep(seconds)
    record(key)
    return key


STOPS: dict[str, list[float]] = {}
"""Seconds each run of a looping task lasted (in-process worker tests of time limits)."""


def _loop(key: str, seconds: float) -> str:
    """Python code in small C calls (``time.sleep(0.01)``) for ``seconds``: a time limit can stop it."""
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            time.sleep(0.01)
    finally:
        STOPS.setdefault(key, []).append(time.monotonic() - start)
    return key


@task(max_retries=0)
def loops(key: str, seconds: float) -> str:
    """No time limit of its own: the queue's or OPTIONS' applies."""
    return _loop(key, seconds)


@task(timeout=0.3, max_retries=2)
def loops_past_its_limit(key: str, seconds: float = 5.0) -> str:
    return _loop(key, seconds)


@task(timeout=0.15, max_retries=0)
def loops_with_own_limit(key: str, seconds: float) -> str:
    return _loop(key, seconds)


@task(timeout=0, max_retries=0)
def loops_without_limit(key: str, seconds: float) -> str:
    return _loop(key, seconds)


@task(timeout=0.3, max_retries=3, no_retry_on=TaskTimeout)
def loops_not_retried(key: str, seconds: float = 5.0) -> str:
    return _loop(key, seconds)


@task(timeout=0.2, max_retries=0)
def swallows_exceptions(key: str) -> str:
    """``except Exception`` around the work: TaskTimeout is a BaseException and passes through."""
    start = time.monotonic()
    try:
        while time.monotonic() - start < 5:
            time.sleep(0.01)
    except Exception:  # noqa: BLE001 - the point of the test
        record(key + ":swallowed")
    except TaskTimeout:
        record(key + ":cleanup")
        raise
    return "ran to the end"


@task(timeout=0.2, max_retries=0)
def catches_its_timeout(key: str) -> str:
    """Catches TaskTimeout by name and returns: the return value stands."""
    try:
        while True:
            time.sleep(0.01)
    except TaskTimeout:
        return "stopped early"


@task(timeout=0.03, max_retries=5)
def busy_just_under_limit(seconds: float) -> float:
    """Busy for ``seconds`` in Python bytecode, a little under its limit."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return seconds


@task(timeout=0.2, max_retries=0)
async def async_loops(key: str, seconds: float) -> str:
    import asyncio

    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            await asyncio.sleep(0.01)
    finally:
        STOPS.setdefault(key, []).append(time.monotonic() - start)
    return key


TICKS = "test:ticks"


@task
def on_tick(key: str, periodic_tick: str = "", seconds: float = 0.0) -> str:
    """A periodic task: counts its runs per tick under ``key`` in TICKS (``<key>|<tick>`` -> runs)."""
    if seconds:
        time.sleep(seconds)
    _effects().hincrby(TICKS, f"{key}|{periodic_tick}", 1)
    return periodic_tick


@task
def no_tick(key: str) -> None:
    """A periodic task that does not take its tick."""
    record(key)


# -- execution pools (tests/worker/test_pools.py): effects go to Redis, children are other processes --


@task
def whose_pid(key: str) -> int:
    """The pid of the process that ran it, also recorded under ``key:<pid>``."""
    record(f"{key}:{os.getpid()}")
    return os.getpid()


@task
def open_descriptors() -> dict[str, int]:
    """What the process that ran it holds open, by kind (``socket``, ``pipe``, ``file``...), and its parent's pid."""
    kinds: dict[str, int] = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        kind = target.split(":", 1)[0] if ":" in target else "file"
        kinds[kind] = kinds.get(kind, 0) + 1
    kinds["ppid"] = os.getppid()
    return kinds


@task
def import_path() -> list[str]:
    """``sys.path`` of the process that ran it."""
    return list(sys.path)


@task
def cpu_bound(n: int) -> int:
    """A pure-Python loop: holds the GIL for its whole run."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


@task(timeout=0.5, max_retries=1)
def blocks_in_c(key: str, seconds: float = 30.0) -> str:
    """One blocking C call past its limit: only a process pool can stop it at the limit."""
    record(key)
    time.sleep(seconds)
    return "slept"


@task(max_retries=1)
def dies_once(key: str) -> int:
    """SIGKILLs its own process on the first run (a segfault, an OOM kill); succeeds on the next."""
    import signal

    if record(key) == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return os.getpid()


HOARD: list[bytes] = []


@task
def hoards_memory(key: str, mib: int) -> int:
    """Keeps ``mib`` MiB alive in its process (a leak): a child above its memory limit is recycled."""
    HOARD.append(os.urandom(mib * 2**20))
    record(f"{key}:{os.getpid()}")
    return os.getpid()


def _recorded_loop(key: str, seconds: float) -> None:
    """Python code in small C calls for ``seconds``, recording its start and its clean-up (``finally``) in Redis.

    The start is recorded inside the ``try``: a test that cancels on seeing it may interrupt the return from
    ``record``, and the clean-up must still run.
    """
    try:
        record(key + ":started")
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(0.01)
    finally:
        record(key + ":finally")


@task(max_retries=3)
def waits_to_be_cancelled(key: str, seconds: float = 30.0) -> str:
    """Python code in small steps for ``seconds``; records its start and a clean-up (``finally``)."""
    _recorded_loop(key, seconds)
    return "not cancelled"


@task(max_retries=3)
async def async_waits(key: str, seconds: float) -> str:
    """Awaits ``seconds`` (I/O-bound); records its start and its end or cancellation."""
    import asyncio

    from asgiref.sync import sync_to_async

    try:  # the start inside: a cancel on seeing it may land before ``record``'s await returns
        await sync_to_async(record)(key + ":started")
        await asyncio.sleep(seconds)
    finally:
        await sync_to_async(record)(key + ":finally")
    return key


@task(timeout=0.4, max_retries=1)
def loops_recorded(key: str, seconds: float = 30.0) -> str:
    """Python code in small C calls past its limit; records each start and each clean-up in Redis."""
    _recorded_loop(key, seconds)
    return "ran to the end"


@task
async def async_nap(seconds: float) -> float:
    import asyncio

    await asyncio.sleep(seconds)
    return seconds


@task(max_retries=0)
async def async_uses_orm_unsafely() -> int:
    """Calls the ORM straight from async code: Django refuses (SynchronousOnlyOperation)."""
    from django.contrib.auth.models import User

    return User.objects.count()


@task
def slow_first_time(key: str, seconds: float) -> str:
    """Sleeps ``seconds`` on its first run only: a worker can be killed during it, and the redelivery ends at once."""
    if record(key + ":start") == 1:
        time.sleep(seconds)
    record(key)
    return key


ORDER = "test:order"


@task
def in_order(key: str) -> str:
    """Appends ``key`` to the ``test:order`` list: the order tasks ran in."""
    _effects().rpush(ORDER, key)
    return key


LIMIT_SPANS = "test:limit-spans"


def _span(key: str, seconds: float) -> str:
    c = _effects()
    c.rpush(LIMIT_SPANS, f"+|{key}|{time.time():.6f}")
    time.sleep(seconds)
    c.rpush(LIMIT_SPANS, f"-|{key}|{time.time():.6f}")
    return key


@task(max_running=3, max_retries=2)
def limited(key: str, seconds: float) -> str:
    """At most 3 run at once, fleet-wide; each records its start and end in ``test:limit-spans``."""
    return _span(key, seconds)


@task(rate_limit="20/s", max_retries=0)
def rated(key: str) -> str:
    """At most 20 starts a second, fleet-wide; each records its start time in ``test:rated``."""
    _effects().rpush("test:rated", f"{time.time():.6f}")
    return key


SPANS = "test:spans"
"""A list of ``tag|start|end`` (time.time()) of each run of ``span``: when runs overlapped, and in what order they started."""


@task
def span(tag: str, seconds: float = 0.0) -> str:
    """Records its start (in the order runs start) and end; sleeps ``seconds`` between."""
    client = _effects()
    start = time.time()
    slot = client.rpush(SPANS, f"{tag}|{start}|")
    if seconds:
        time.sleep(seconds)
    client.lset(SPANS, slot - 1, f"{tag}|{start}|{time.time()}")
    return tag


@task
def holds_every_descriptor(key: str, seconds: float) -> int:
    """Opens files until its process has no descriptor left, holds them ``seconds``, closes them; records ``key``
    afterwards and returns how many it held (what a leaky task does to the worker it runs in)."""
    held: list[int] = []
    try:
        while True:
            try:
                held.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        time.sleep(seconds)
    finally:
        for fd in held:
            os.close(fd)
    record(key)
    return len(held)


def _newer(**options: Any) -> dict[str, Any]:
    """Options a newer library has: an older one (a rolling deploy's old worker loads this module too,
    tests/worker/test_rolling_deploy.py) gets none of them, and never runs the tasks that use them."""
    import importlib

    known = getattr(importlib.import_module("django_redisq.task"), "USING_OPTIONS", ())
    return {k: v for k, v in options.items() if k in known}


TENANT_STARTS = "test:tenant-starts"
"""A list of ``<tenant>|<n>|<time.time()>``, one per start of ``tenant_job`` (issue 40's fair queue)."""


@task(queue_name="emails", max_retries=0, **_newer(fair_key=lambda tenant, n: tenant))
def tenant_job(tenant: str, n: int) -> None:
    """Records its start; the queue is FAIR in the tests that use it (REDISQ_QUEUE_OPTIONS)."""
    _effects().rpush(TENANT_STARTS, f"{tenant}|{n}|{time.time():.6f}")


ACCOUNT_SPANS = "test:account-spans"
"""``+|<account>|<n>|<time>`` at each start of ``per_account``, ``-|...`` at each end."""


@task(max_running=2, max_retries=3, **_newer(limit_key=lambda account, n, seconds: account))
def per_account(account: str, n: int, seconds: float) -> str:
    """At most 2 run at once per account, fleet-wide; records its start and end."""
    c = _effects()
    c.rpush(ACCOUNT_SPANS, f"+|{account}|{n}|{time.time():.6f}")
    time.sleep(seconds)
    c.rpush(ACCOUNT_SPANS, f"-|{account}|{n}|{time.time():.6f}")
    return account


WINDOW_RUNS = "test:window-runs"
"""``<n>|<time.time()>`` per run of ``windowed``."""


@task(max_retries=0)
def windowed(n: int) -> int:
    """Records each run: debounced or throttled with ``using(idempotency_key=..., debounce=... / throttle=...)``."""
    _effects().rpush(WINDOW_RUNS, f"{n}|{time.time():.6f}")
    return n


# -- durable tasks (django_redisq/durable/; tests/durable/) ---------------------------------------------


def _effect(key: str, pause: float = 0.0) -> int:
    """A step's effect: counted at once (so a kill during ``pause`` shows as a run that was not recorded)."""
    n = record(key)
    time.sleep(pause)
    return n


def _flaky_effect(key: str, fail_times: int) -> int:
    n = record(key)
    if n <= fail_times:
        raise ValueError(f"step failure {n} of {fail_times}")
    return n


@task(takes_context=True, max_retries=5, backoff_base=0.01, backoff_max=0.02)
def three_steps(context: Any, key: str, fail_third: int, pause: float = 0.0) -> list[int]:
    """Three steps, the third failing ``fail_third`` times; ``pause`` seconds inside each step and between them."""
    one = context.step("one", _effect, f"{key}:one", pause)
    time.sleep(pause)
    two = context.step("two", _effect, f"{key}:two", pause)
    time.sleep(pause)
    three = context.step("three", _flaky_effect, f"{key}:three", fail_third)
    return [one, two, three]


@task(takes_context=True)
async def three_steps_async(context: Any, key: str, fail_third: int) -> list[int]:
    one = await context.astep("one", _effect, f"{key}:one")
    two = await context.astep("two", _effect, f"{key}:two")
    three = await context.astep("three", _flaky_effect, f"{key}:three", fail_third)
    return [one, two, three]


@task(takes_context=True, max_retries=0)
def durable_sleeper(context: Any, key: str, seconds: float) -> int:
    context.step("before", _effect, f"{key}:before")
    context.sleep(seconds)
    return cast("int", context.step("after", _effect, f"{key}:after"))


@task(takes_context=True, max_retries=0)
def durable_waiter(context: Any, key: str, topic: str, timeout: float) -> Any:
    context.step("before", _effect, f"{key}:before")
    event = context.wait_for(topic, match={"key": key}, timeout=timeout)
    context.step("after", _effect, f"{key}:after")
    return event


@task(takes_context=True, max_retries=0)
def reuses_a_step_name(context: Any, key: str) -> None:
    context.step("same", _effect, f"{key}:a")
    context.step("same", _effect, f"{key}:b")


@task(takes_context=True, max_retries=2, backoff_base=0.01, backoff_max=0.02)
def reorders_its_steps(context: Any, key: str) -> None:
    """The first attempt runs a then fails; the second runs b first: the order changed."""
    first = record(f"{key}:attempt") == 1
    for name in ("a", "b") if first else ("b", "a"):
        context.step(name, _effect, f"{key}:{name}")
    if first:
        raise ValueError("fail once")
