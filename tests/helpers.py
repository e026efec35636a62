"""Seed and read helpers: put a task straight into one state, and say where a task is."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis

from django_redisq.connection import async_pools
from django_redisq.connection.async_wire import AsyncWire
from django_redisq.exceptions import LeaseLost
from django_redisq.store.broker import Broker
from django_redisq.store.keys import QueueKeys
from django_redisq.worker.worker import Worker

T = TypeVar("T")


def node_of(r: Any, key: str) -> redis.Redis:
    """The client of the one server holding ``key``: ``r`` itself, or on a Redis Cluster the node of its slot
    (for what only a node can answer: INFO, CONFIG RESETSTAT, TIME as the scripts see it)."""
    from redis.cluster import RedisCluster

    if isinstance(r, RedisCluster):
        return r.get_redis_connection(r.get_node_from_key(key))
    return r


def keys(queue: str = "default") -> QueueKeys:
    return QueueKeys(queue)


def message(task: str = "tests.testapp.tasks.add", args: list | None = None, queue: str = "default") -> str:
    return json.dumps({"v": 1, "task": task, "args": args if args is not None else [1, 2], "kwargs": {},
                       "queue": queue, "backend": "default", "priority": 0})


def seed_hash(r: redis.Redis, task_id: str, state: str, queue: str = "default", **fields: object) -> None:
    k = keys(queue)
    data = {"msg": message(queue=queue), "task": "tests.testapp.tasks.add", "state": state,
            "enqueued_at": 1, "deliveries": 0, "failures": 0, "idem": ""}
    data.update(fields)
    r.hset(k.task(task_id), mapping=data)  # type: ignore[arg-type]


def seed_pending(r: redis.Redis, task_id: str, queue: str = "default", **fields: object) -> None:
    seed_hash(r, task_id, "pending", queue, **fields)
    r.lpush(keys(queue).pending, task_id)


def seed_scheduled(r: redis.Redis, task_id: str, due_in_ms: int, queue: str = "default") -> None:
    """Due ``due_in_ms`` after Redis's own clock (negative: overdue)."""
    seed_hash(r, task_id, "scheduled", queue)
    sec, usec = r.time()
    r.zadd(keys(queue).scheduled, {task_id: sec * 1000 + usec // 1000 + due_in_ms})


def seed_processing(r: redis.Redis, task_id: str, worker: str, queue: str = "default", claim: bool = True) -> None:
    k = keys(queue)
    seed_hash(r, task_id, "running", queue, deliveries=1, workers=worker)
    r.lpush(k.processing(worker), task_id)
    if claim:
        r.set(k.status(task_id), f"running:{worker}", px=60_000)


def seed_dead(r: redis.Redis, task_id: str, queue: str = "default", died_at: int = 1000) -> None:
    seed_hash(r, task_id, "dead", queue, died_at=died_at, failures=2,
              errors=json.dumps([{"exc": "builtins.ValueError", "msg": "boom", "tb": "tb", "at": 1}]))
    r.zadd(keys(queue).dead, {task_id: died_at})


def redis_ms(r: redis.Redis) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000


def set_heartbeat_age(r: redis.Redis, worker: str, age_ms: int, queue: str = "default") -> None:
    r.zadd(keys(queue).workers, {worker: redis_ms(r) - age_ms})


def where_is(r: redis.Redis, task_id: str, queue: str = "default") -> list[str]:
    """Every place the id is found: a correct queue always answers with exactly one."""
    k = keys(queue)
    places = []
    if task_id in r.lrange(k.pending, 0, -1):
        places.append("pending")
    if r.zscore(k.prioritized, task_id) is not None:  # pending too, of a priority other than 0
        places.append("pending")
    for blist in r.scan_iter(match=f"{k.prefix}blocked*", count=1000):  # waiting for a fleet-wide slot
        if r.type(blist) == "list" and task_id in r.lrange(blist, 0, -1):
            places.append("blocked")
    if r.zscore(k.scheduled, task_id) is not None:
        places.append("scheduled")
    if r.zscore(k.dead, task_id) is not None:
        places.append("dead")
    for plist in r.scan_iter(match=f"{k.prefix}processing:*", count=1000):
        if task_id in r.lrange(plist, 0, -1):
            places.append("processing:" + plist.rsplit(":", 1)[1])
    if r.type(k.task(task_id)) == "hash" and r.hget(k.task(task_id), "state") == "finished" and not places:
        places.append("finished")
    return places


def held_by(r: redis.Redis, name: str, queue: str = "default") -> list[str]:
    """The ids in the processing lists of the worker(s) started with ``--name name`` (ids are ``name.<incarnation>``)."""
    k = keys(queue)
    return [i for plist in sorted(r.scan_iter(match=f"{k.prefix}processing:{name}.*", count=1000)) for i in r.lrange(plist, 0, -1)]


@dataclass
class BurstRun:
    """How a burst worker's run ended (``run_burst``)."""

    finished: bool
    """Whether it returned within its time (else it was force-stopped)."""
    crashed: list[str] = field(default_factory=list)
    """The threads that died with an exception meanwhile, as ``name: Type: message``."""


def run_burst(worker: Any, timeout: float = 30.0) -> BurstRun:
    """Run a burst worker in a thread for at most ``timeout`` seconds (force-stopped past it); how that ended."""
    run = BurstRun(finished=False)
    old_hook = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        run.crashed.append(f"{args.thread.name if args.thread else '?'}: {args.exc_type.__name__}: {args.exc_value}")

    threading.excepthook = hook
    try:
        t = threading.Thread(target=worker.run, name="burst", daemon=True)
        t.start()
        t.join(timeout)
        run.finished = not t.is_alive()
        if not run.finished:
            worker.request_force_stop()
            t.join(30)
    finally:
        threading.excepthook = old_hook
    return run


def run_in_thread(worker: Any, timeout: float = 30.0) -> None:
    """Run a burst worker; fail (instead of hanging) if it does not finish."""
    if not run_burst(worker, timeout).finished:
        raise AssertionError(f"the worker did not finish within {timeout} s")


def drain(make_worker: Callable[..., Any], results: Iterable[Any], rounds: int = 50, **kwargs: Any) -> None:
    """Burst-run workers until every result settled (retries are scheduled a moment ahead)."""
    results = list(results)
    for _ in range(rounds):
        run_in_thread(make_worker(**kwargs))
        for res in results:
            res.refresh()
        if all(res.is_finished for res in results):
            return
        time.sleep(0.02)
    raise AssertionError("tasks did not settle")


@dataclass
class FailoverRun:
    """What a producer saw while the master died under it (``failover_run``)."""

    acked: list[tuple[str, str, float]] = field(default_factory=list)
    """(task id, mark key, when) of every enqueue that returned."""
    refused: dict[str, int] = field(default_factory=dict)
    """How many enqueues raised, by exception type: the caller saw the outage, nothing was acknowledged."""
    killed_at: float = 0.0
    back_at: float | None = None
    """When the first enqueue after the kill returned (``time.monotonic()``), None if none did."""

    def report(self, what: str, lost: Iterable[str]) -> str:
        """One line for the test's output and its failure messages."""
        back = f"producers back {self.back_at - self.killed_at:.1f} s after the kill" if self.back_at else "producers never came back"
        return (f"{what}: {len(self.acked)} enqueues acknowledged, refused during the outage: {self.refused or 'none'}, "
                f"{len(list(lost))} acknowledged but lost, {back}")


@contextlib.contextmanager
def failover_run(kill: Callable[[], None], enqueue: Callable[[str], Any], n: int, kill_at: int, gap: float,
                 hang_after: float = 120.0) -> Iterator[FailoverRun]:
    """Enqueue ``n`` marks ``f0``.. one after another (``gap`` s apart), calling ``kill`` before the ``kill_at``-th,
    while a 4-thread worker serves "default"; yields once the producer finished, the worker still serving (so the
    body can wait for the tasks to run), and stops the worker after the body."""

    run = FailoverRun()

    def produce() -> None:
        for i in range(n):
            if i == kill_at:
                run.killed_at = time.monotonic()
                kill()
            try:
                run.acked.append((enqueue(f"f{i}").id, f"f{i}", time.monotonic()))
                if run.killed_at and run.back_at is None:
                    run.back_at = time.monotonic()
            except redis.RedisError as exc:  # NotDurable or a lost connection: the caller sees it, nothing acknowledged
                run.refused[type(exc).__name__] = run.refused.get(type(exc).__name__, 0) + 1
                time.sleep(0.05)
            time.sleep(gap)

    worker = Worker(["default"], concurrency=4)
    serving = threading.Thread(target=worker.run, daemon=True)
    serving.start()
    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        producer.join(hang_after)
        assert not producer.is_alive(), "the producer hung"
        yield run
    finally:
        worker.request_stop()
        serving.join(20)


def wait_for(predicate: Callable[[], T], timeout: float = 15.0, step: float = 0.02) -> T:
    """Poll ``predicate`` until it answers something true or ``timeout`` seconds pass; its last answer (so
    ``assert wait_for(...)`` fails on a timeout, and ``found = wait_for(...)`` gets what was found)."""
    deadline = time.monotonic() + timeout
    while not (answer := predicate()) and time.monotonic() < deadline:
        time.sleep(step)
    return answer


def proc_stat(path: str) -> list[str]:
    """The fields of a ``/proc/.../stat`` file after the command's name (which may hold spaces and parentheses):
    ``[0]`` the state, ``[1]`` the parent's pid, ``[11]`` and ``[12]`` user and system CPU in clock ticks."""
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def parent_pid(pid: int) -> int:
    return int(proc_stat(f"/proc/{pid}/stat")[1])


def frozen(pid: int) -> bool:
    """Whether every thread of process ``pid`` has stopped (SIGSTOP takes effect after ``kill`` returns)."""
    states = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            states.append(proc_stat(f"/proc/{pid}/task/{tid}/stat")[0])
    return bool(states) and all(s in ("T", "t") for s in states)


def freeze(r: Any, pid: int) -> None:
    """SIGSTOP ``pid``, then wait until it has stopped and Redis has run what it sent before: a state read after
    this is the frozen one (without the wait, an effect or an ack it sent just before could land after the read)."""
    os.kill(pid, signal.SIGSTOP)
    assert wait_for(lambda: frozen(pid), 10), f"process {pid} did not stop"
    for _ in range(2):  # Redis serves every socket readable in a round before answering a later round's PING
        r.ping()


def reaped_by_connection(log: str, queue: str) -> bool:
    """Whether a worker's ``log`` says it reaped a worker of ``queue`` by its closed connection (not by the timeout).

    The way a reap happened, read from the reaper's own line: a verdict that does not ride on how busy the machine
    was, where the time since the kill (about 1 s, or WORKER_TIMEOUT's 10 s) does.
    """
    return any("(their connection closed)" in line and line.rstrip().endswith(f"of queue {queue} back to pending")
               for line in log.splitlines() if "reaped worker(s)" in line)


def blocked_in(r, command: str) -> int:
    """Clients blocked in ``command`` (e.g. ``blmove``) on one server, or on every master of a cluster, where each
    node answers CLIENT LIST for its own clients only."""
    from redis.cluster import RedisCluster

    if isinstance(r, RedisCluster):
        replies = r.client_list(target_nodes=RedisCluster.PRIMARIES)
        lists = list(replies.values()) if isinstance(replies, dict) else [replies]
    else:
        lists = [r.client_list()]
    return sum(c.get("cmd") == command for clients in lists for c in clients)


def by_kind(exporter: Any, kind: Any) -> list[Any]:
    """The finished spans of one ``SpanKind`` in an in-memory exporter (the ``spans`` fixture)."""
    return [s for s in exporter.get_finished_spans() if s.kind == kind]


def ack(broker: Broker, queue: str, worker: str, task_id: str, result_json: str) -> None:
    """Ack one task as the settler does in a batch (``ack_many``); ``LeaseLost`` if the worker no longer held it."""
    if broker.ack_many(queue, worker, [(task_id, result_json)]):
        raise LeaseLost(f"task {task_id} was no longer held by worker {worker} at ack")


def reap(broker: Broker, queue: str, reaper: str = "", max_workers: int = 10) -> tuple[int, list[str]]:
    """``Broker.reap_detail`` without what was given back: (tasks, workers)."""
    tasks, workers, _ = broker.reap_detail(queue, reaper, max_workers)
    return tasks, workers


def wires_of(loop: asyncio.AbstractEventLoop) -> list[AsyncWire]:
    """The asyncio wires made for ``loop`` (connection/async_pools.py), none before its first or after it closed."""
    pools = async_pools.holdings(loop)
    return list(pools.wires.values()) if pools else []


def command_calls(client: Any, command: str) -> int:
    """How often ``command`` (as INFO commandstats names it: ``wait``, ``client|list``) ran on ``client``'s server since
    its start: a round of a component that sends it (a presence poll, a durable step's WAIT) is one more."""
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def heartbeats(r: Any, worker: str, rounds: int, queue: str = "default", timeout: float = 15.0) -> bool:
    """Wait until the worker ``worker`` (its id, or the ``--name`` it was started with) beat ``rounds`` more times on
    ``queue``: its score in the queue's workers set moved that often. A window in which something must not happen
    measured in the worker's own rounds, not in seconds, so a slow machine stretches it instead of failing it."""
    def score() -> float | None:
        found = [s for m, s in r.zrange(keys(queue).workers, 0, -1, withscores=True) if m == worker or m.startswith(worker + ".")]
        return found[0] if found else None

    seen = [score()]

    def moved() -> bool:
        now = score()
        if now is not None and now != seen[-1]:
            seen.append(now)
        return len(seen) > rounds

    return bool(wait_for(moved, timeout, step=0.01))


def local_ports(pid: int) -> set[int]:
    """The local ports of process ``pid``'s TCP sockets (Linux: /proc), to tell its clients apart in CLIENT LIST."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in list(f)[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def blocked_of(r: redis.Redis, pid: int, command: str) -> int:
    """Clients of process ``pid`` blocked in ``command`` (e.g. ``blmove``) on ``r``'s server now (flag ``b``: ``cmd`` alone
    is the last command, which an idle client whose BLMOVE ended still shows)."""
    ports = local_ports(pid)
    return sum(c.get("cmd") == command and "b" in c.get("flags", "") and int(c["addr"].rsplit(":", 1)[1]) in ports
               for c in r.client_list())
