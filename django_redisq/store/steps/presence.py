"""Presence: tell a dead worker process from a paused one by its connection, and reap the dead within a second.

A worker's heartbeat says "alive" every HEARTBEAT_INTERVAL, so silence alone
can only prove a worker dead after WORKER_TIMEOUT: a worker paused by SIGSTOP,
a long GC or a frozen Redis is silent too, and must not be reaped. The kernel
knows better: when a process dies its sockets are closed and the server drops
its clients at once, while a paused process keeps them. So each worker holds
one idle connection per server its queues live on (``Presence``, a *link*), and
registers ``<server run_id>:<client id>`` of it with every heartbeat (in
``P:presence``). One worker per queue at a time (the holder of a short lease,
``presence.lua``) asks the server which registered connections it no longer
has (``CLIENT LIST ID ...``, on the node that holds the queue); a worker whose
connection stays gone for ``CONFIRM`` is reaped by reap.lua, which checks that
the entry is still the one seen gone.

The edges, and why they reap nobody alive:

* an operator's ``CLIENT KILL`` or a reset connection: the worker sees its link
  dropped within ``CHECK_EVERY`` (a non-blocking read, no round trip), opens a
  new one and registers it at once, well inside ``CONFIRM``; the new entry no
  longer matches what the reaper saw gone;
* a Redis restart or failover: every client id changes, and so does the
  server's run_id; an entry of another run is never judged (its worker falls
  back to the timeout until it registers a link to the new server, which it
  does on its next beat);
* a worker that cannot prove itself (an ACL refuses ``CLIENT``, the link cannot
  be opened) registers no entry: it is reaped by the timeout only.

And the fence (DESIGN invariant 8) holds: a worker starts tasks only while its
links were seen alive within ``FRESH`` and every drop since has been
registered again (``fresh``); ``FRESH`` is well under ``CONFIRM``, so by the
time a reaper may judge it dead, a worker that lost its link has stopped
starting what it holds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import redis

from django_redisq.connection.links import ask, dropped, node_address, node_client, open_link
from django_redisq.store.scripts.runner import ScriptRunner
from django_redisq.store.steps.reaping import reap
from django_redisq.store.steps.replies import Reaped

logger = logging.getLogger("django_redisq")

CHECK_EVERY = 0.05
"""Seconds between a worker's looks at its own links (local: one non-blocking read each)."""
FRESH = 0.25
"""A worker starts tasks only while its links were seen alive this recently (seconds)."""
POLL_EVERY = 0.15
"""Seconds between the lease holder's looks at the queue's registered connections."""
CONFIRM = 0.6
"""Seconds a registered connection must stay gone before its worker is reaped: far more than a live worker
needs to see its link dropped and register a new one (about ``CHECK_EVERY`` plus a round trip)."""
LEASE_MS = 400
"""The poll lease; renewed each round by its holder, taken over once it lapses."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _run_id(info: Any) -> str:
    for line in _text(info).splitlines():
        if line.startswith("run_id:"):
            return line[7:].strip()
    return ""


class _Link:
    """One held connection to one server, with what identifies it there."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.conn = open_link(client, key)
        try:
            self.client_id = int(ask(self.conn, "CLIENT", "ID"))
            self.run_id = _run_id(ask(self.conn, "INFO", "server"))
            ask(self.conn, "CLIENT", "LIST", "ID", self.client_id)  # what the reapers will ask: refused by an ACL?
        except BaseException:
            self.close()
            raise

        self.probing = False

    @property
    def record(self) -> str:
        return f"{self.run_id}:{self.client_id}" if self.run_id else ""

    def probe(self) -> None:
        """Ask the server its role, without waiting: ``dropped`` reads the answer when it comes. A frozen server
        answers late, and the link is kept meanwhile (a round trip that timed out would close it)."""
        if not self.probing:
            self.conn.send_command("ROLE")
            self.probing = True

    def dropped(self) -> bool:
        """Whether the server closed the link, or its answer to ``probe`` says it no longer is a master (a failover
        demoted it): no round trip, one non-blocking read of the socket. An error reply (a busy or loading server)
        says nothing either way: the link is kept, and asked again at the next beat."""
        if not dropped(self.conn):
            return False
        if not self.probing:
            return True  # closed, or something unasked
        self.probing = False
        try:
            role = self.conn.read_response()
        except redis.ResponseError:
            return False
        except (redis.RedisError, OSError):
            return True
        return not (role and _text(role[0]) == "master")

    def close(self) -> None:
        try:
            self.conn.disconnect()
        except Exception:  # noqa: BLE001 - closing a broken socket
            pass


class Presence:
    """A worker's links, one per server that holds one of its queues. Owned by the heartbeat thread."""

    def __init__(self, client: redis.Redis, keys: Mapping[str, str]) -> None:
        """``client``: where the worker's queues live; ``keys``: a key of each queue (where its slot is)."""
        self.client, self.keys = client, dict(keys)
        self.links: dict[str, _Link | None] = {}  # by server address ('' on one server or through Sentinel)
        self.refused = ""  # why this worker cannot prove its presence (an ACL): then only the timeout reaps it
        self.seen_ok = 0.0
        self.dirty = True  # a link changed since the last registration

    def _where(self, queue: str) -> str:
        return node_address(self.client, self.keys[queue])

    def open(self) -> str:
        """Open every link; '' or why this worker's presence cannot be proven (said once, at start)."""
        for q in self.keys:
            self._ensure(self._where(q), q)
        return self.refused

    def _ensure(self, where: str, queue: str) -> _Link | None:
        link = self.links.get(where)
        if link is None and not self.refused:
            try:
                link = _Link(self.client, self.keys[queue])
                self.dirty = True
            except redis.ResponseError as exc:
                if refusal(exc):  # an ACL refuses CLIENT or INFO to our user: for good
                    self.refused = str(exc)
                else:  # BUSY, OOM, ...: the server cannot answer now; no proof until the next try
                    logger.debug("presence link to %s not opened (%s)", where or "Redis", exc)
            except (redis.RedisError, OSError) as exc:  # unreachable now: no proof until the next try
                logger.debug("presence link to %s not opened (%s)", where or "Redis", exc)
            if where not in self.links:
                self.dirty = True
            self.links[where] = link
        return link

    def check(self) -> bool:
        """Look at every link without a round trip; reopen a dropped one. False when one was dropped now (the
        worker registers the new one at once); while a change is not registered yet, the links are not proven."""
        dropped_now = False
        for where, link in list(self.links.items()):
            if link is not None and link.dropped():
                link.close()
                self.links[where] = None
                dropped_now = True
        if dropped_now:
            self.dirty = True
            for q in self.keys:
                self._ensure(self._where(q), q)
            return False
        if not self.dirty:
            self.seen_ok = time.monotonic()
        return True

    def verify(self) -> None:
        """Before a beat: each queue's link goes to the server that holds the queue now. On a Cluster the slot's
        node may have changed; elsewhere each link is asked its server's role (read by ``check``)."""
        wanted = {self._where(q): q for q in self.keys}
        for where, link in list(self.links.items()):
            if where not in wanted:
                if link is not None:
                    link.close()
                del self.links[where]
                self.dirty = True
            elif link is not None:
                try:
                    link.probe()
                except (redis.RedisError, OSError):
                    link.close()
                    self.links[where] = None
                    self.dirty = True
        for where, q in wanted.items():
            self._ensure(where, q)

    def records(self) -> dict[str, str]:
        """Per queue, the entry the heartbeat registers ('' when no link proves us there)."""
        out = {}
        for q in self.keys:
            link = self.links.get(self._where(q))
            out[q] = link.record if link is not None else ""
        return out

    def registered(self) -> None:
        """A heartbeat registered ``records()``: the links are proven again."""
        self.dirty = False
        self.seen_ok = time.monotonic()

    def fresh(self, now: float) -> bool:
        """Whether no reaper can have judged us dead by our connection: the links were seen alive within ``FRESH``
        and registered. Always true for a worker that registers no link (only the timeout reaps it)."""
        if self.refused or not any(self.links.values()):
            return not self.dirty
        return not self.dirty and now - self.seen_ok < FRESH

    def close(self) -> None:
        for link in self.links.values():
            if link is not None:
                link.close()
        self.links.clear()


def refusal(exc: BaseException) -> bool:
    """Whether an error reply refuses the command for good (an ACL, a server without it), not for now (BUSY, OOM)."""
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return True
    text = str(exc).upper()
    return isinstance(exc, redis.ResponseError) and text.startswith(("NOPERM", "UNKNOWN COMMAND", "UNKNOWN SUBCOMMAND",
                                                                      "ERR UNKNOWN COMMAND", "ERR UNKNOWN SUBCOMMAND"))


def gone_of(info: Any, listed: Any, records: Mapping[str, str]) -> dict[str, str]:
    """The entries of ``records`` (worker -> '<run_id>:<client id>') the server no longer has a connection for,
    given its ``INFO server`` and ``CLIENT LIST ID ...`` replies. Entries of another run of the server (a restart,
    a failover) and entries that do not parse are never judged."""
    run_id = info.get("run_id", "") if isinstance(info, dict) else _run_id(info)
    present: set[str] = set()
    if isinstance(listed, list):
        present = {str(c.get("id")) for c in listed if isinstance(c, dict)}
    else:
        for line in _text(listed).splitlines():
            head = line.split(" ", 1)[0]
            if head.startswith("id="):
                present.add(head[3:])
    out = {}
    for w, rec in records.items():
        rid, _, cid = rec.rpartition(":")
        if rid and rid == run_id and cid.isdigit() and cid not in present:
            out[w] = rec
    return out


class Lease(NamedTuple):
    """presence.lua's answer: worker -> entry of every registered worker when this worker holds the poll lease
    (``None`` when another does), and the seconds until that other's lease lapses (0 when held)."""

    records: dict[str, str] | None
    wait: float


class Holder(NamedTuple):
    """Another worker registered on a queue that holds tasks there: how long its heartbeat has been silent (Redis ms,
    against the freshest heartbeat of the queue), its presence entry ('' for none) and how many tasks it holds."""

    worker: str
    silent_ms: int
    entry: str
    held: int


class PresenceSteps:
    """The steps of the presence poll (``broker.presence``): a worker's links, the poll lease, the reaping by connection."""

    def __init__(self, runner: ScriptRunner) -> None:
        self.runner = runner

    def links(self, queues: Sequence[str]) -> Presence:
        """The presence links of a worker serving ``queues`` (not opened yet: ``Presence.open``)."""
        return Presence(self.runner.client, {q: self.runner.keys(q).presence for q in queues})

    def lease(self, queue: str, worker: str) -> Lease:
        """Take or renew the queue's poll lease (see ``Lease``)."""
        k = self.runner.keys(queue)
        out = self.runner.run("presence", keys=[k.presence, k.reaper], args=[worker, LEASE_MS])
        if int(out[0]) != 1:
            return Lease(None, int(out[1]) / 1000)
        flat = [_text(v) for v in out[1:]]
        return Lease(dict(zip(flat[::2], flat[1::2], strict=True)), 0.0)

    def connections_gone(self, queue: str, records: Mapping[str, str]) -> dict[str, str]:
        """Of ``records``, those whose connection the server that holds ``queue`` no longer has (one round trip)."""
        ids = sorted({rec.rpartition(":")[2] for rec in records.values() if rec.rpartition(":")[2].isdigit()})
        if not ids:
            return {}
        node = node_client(self.runner.client, self.runner.keys(queue).presence)
        pipe = node.pipeline(transaction=False)
        pipe.info("server")
        pipe.execute_command("CLIENT LIST", "ID", *ids)
        info, listed = pipe.execute()
        return gone_of(info, listed, records)

    def reap_gone(self, queue: str, reaper: str, gone: Mapping[str, str], max_workers: int = 10) -> Reaped:
        """Reap the workers in ``gone`` (worker -> the entry seen gone) whose entry is still that one."""
        pairs: Sequence[str] = [x for w, rec in list(gone.items())[:max_workers] for x in (w, rec)]
        return reap(self.runner, queue, reaper, max_workers, pairs)

    def holders(self, queue: str, me: str, most: int = 100) -> list[Holder]:
        """The workers but ``me`` that hold tasks of ``queue`` (of the ``most`` longest silent registered): what a
        burst worker needs to tell a dead holder, whose tasks it should reap before it leaves, from a busy one.
        Two round trips on the queue's slot; silence is measured on the Redis clock (heartbeat scores)."""
        k = self.runner.keys(queue)
        pipe = self.runner.client.pipeline(transaction=False)
        pipe.zrange(k.workers, 0, most - 1, withscores=True)
        pipe.zrange(k.workers, -1, -1, withscores=True)
        pipe.hgetall(k.presence)
        oldest, newest, entries = pipe.execute()
        others = [(_text(w), int(score)) for w, score in oldest if _text(w) != me]
        if not others:
            return []
        latest = int(newest[0][1])
        pipe = self.runner.client.pipeline(transaction=False)
        for w, _ in others:
            pipe.llen(k.processing(w))
        counts = pipe.execute()
        entries = {_text(w): _text(e) for w, e in (entries or {}).items()}
        return [Holder(w, latest - score, entries.get(w, ""), int(n)) for (w, score), n in zip(others, counts, strict=True) if n]
