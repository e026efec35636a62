"""Events' Redis steps: a topic's stream and its subscriptions' consumer groups, one method per step.

Every key of a topic lives in its own slot (``{topic:<name>}``, store/keys.py), apart
from the queues, so the two halves of "an entry becomes a task" are two steps:
enqueue (in the queue's slot, enqueue.lua drops a task id it already has) and only
then XACK (in the topic's slot). The scripts here never touch a queue's keys, except
``bury_event`` which lives wholly in the queue's slot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from django_redisq.store.broker.broker import Broker
from django_redisq.store.keys import TopicKeys
from django_redisq.store.topics.shapes import Entry, GroupStats, NoSuchGroup, Read, Regrouped, Trimmed

logger = logging.getLogger("django_redisq")
NOGROUP = -1
BATCH = 2000
"""Entries the MAX_LEN rule and the hard cap remove per trim call at most (the next call goes on)."""
LAG_SCAN_MAX = 100_000
"""Entries counted at most for a lag Redis does not report itself (6.2; 7 after some trims): then shown as at least."""


def _regrouped(rows: Sequence[Any]) -> list[Regrouped]:
    return [Regrouped(_text(rows[i]), _text(rows[i + 1])) for i in range(0, len(rows) - 1, 2)]


def warn_regrouped(topic: str, found: list[Regrouped]) -> None:
    """Say, at WARNING, that a group was missing and recreated (also counted: ``redisq topics``, the metric, health)."""
    for g in found:
        logger.warning("events: the consumer group of subscription %s on topic %s was missing (deleted?); recreated at "
                       "%s: the events it had not acknowledged are delivered again, none skipped", g.group, topic, g.at)


class Topics:
    """The Redis steps of events for one backend (a Broker gives the client and the scripts)."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._keys: dict[str, TopicKeys] = {}

    def keys(self, topic: str) -> TopicKeys:
        k = self._keys.get(topic)
        if k is None:
            k = self._keys[topic] = TopicKeys(topic, self.broker.options.key_prefix)
        return k

    # -- producing -------------------------------------------------------

    def publish(self, topic: str, payload_json: str, groups: Sequence[tuple[str, str]] = (), trace_json: str = "") -> str:
        """XADD one event (after creating ``groups`` ``(name, '$' or '0')`` that do not exist); its entry id.

        ``trace_json``: the publisher's trace context, stored as the entry's field ``tc`` (``""``: no field).
        A group that existed and was deleted is recreated where its subscription stood (``Regrouped``, logged)."""
        keys, argv = self.publish_call(topic, payload_json, groups, trace_json)
        return self.published(topic, self.broker.scripts.run("topic_publish", keys=keys, args=argv))

    async def apublish(self, topic: str, payload_json: str, groups: Sequence[tuple[str, str]] = (), trace_json: str = "") -> str:
        """``publish`` on the running event loop's own connection: the same script, KEYS, ARGV and reading of the
        reply, so the two paths cannot drift."""
        from django_redisq.store.scripts.async_runner import AsyncScriptRunner  # a sync process never loads the async steps

        return (await self.apublish_counted(topic, payload_json, groups, trace_json, AsyncScriptRunner(self.broker.options)))[0]

    async def apublish_counted(self, topic: str, payload_json: str, groups: Sequence[tuple[str, str]] = (),
                               trace_json: str = "", runner: Any = None) -> tuple[str, int]:
        """``apublish``, and how many durable tasks wait on the topic (as ``publish_counted``)."""
        if runner is None:
            from django_redisq.store.scripts.async_runner import AsyncScriptRunner  # as in apublish

            runner = AsyncScriptRunner(self.broker.options)
        keys, argv = self.publish_call(topic, payload_json, groups, trace_json)
        reply = await runner.run("topic_publish", keys, argv)
        return self.published(topic, reply), int(reply[1])

    def publish_call(self, topic: str, payload_json: str, groups: Sequence[tuple[str, str]], trace_json: str) -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of topic_publish.lua for one event."""
        k = self.keys(topic)
        argv: list[Any] = [payload_json, trace_json, len(groups)]
        for name, start in groups:
            argv += [name, start]
        return [k.stream, k.gen, k.meta, k.waiters], argv

    def publish_counted(self, topic: str, payload_json: str, groups: Sequence[tuple[str, str]] = (),
                        trace_json: str = "") -> tuple[str, int]:
        """``publish``, and how many durable tasks wait on the topic (store/topics/waiters.py): matched only if any."""
        keys, argv = self.publish_call(topic, payload_json, groups, trace_json)
        reply = self.broker.scripts.run("topic_publish", keys=keys, args=argv)
        return self.published(topic, reply), int(reply[1])

    @staticmethod
    def published(topic: str, reply: Any) -> str:
        """The entry id in topic_publish.lua's reply (then the topic's waiters, then the groups it recreated: logged)."""
        warn_regrouped(topic, _regrouped(reply[2:]))
        return _text(reply[0])

    def ensure_groups(self, topic: str, groups: list[tuple[str, str]]) -> list[Regrouped]:
        """Create the missing consumer groups ``(name, '$' or '0')``: the ones that existed before and were deleted
        are recreated where their subscription stood, counted, logged and returned."""
        k = self.keys(topic)
        argv: list[Any] = [len(groups)]
        for name, start in groups:
            argv += [name, start]
        found = _regrouped(self.broker.scripts.run("topic_groups", keys=[k.stream, k.gen, k.meta], args=argv)[1:])
        warn_regrouped(topic, found)
        return found

    # -- consuming -------------------------------------------------------

    def read(self, topic: str, group: str, consumer: str, count: int) -> Read:
        """New entries for ``consumer`` of ``group`` with the group's generation; ``NoSuchGroup`` if it is missing."""
        k = self.keys(topic)
        reply = self.broker.scripts.run("topic_read", keys=[k.stream, k.gen], args=[group, consumer, count])
        if int(reply[0]) == NOGROUP:
            raise NoSuchGroup(group)
        rows = reply[2:]
        entries = [Entry(_text(rows[i]), _text(rows[i + 1]), trace=_text(rows[i + 2])) for i in range(0, len(rows), 3)]
        return Read(int(reply[0]), entries, top=_text(reply[1]))

    def wait(self, topic: str, after: str, timeout_ms: int) -> None:
        """Block until the stream has an entry after ``after`` (or the timeout): a plain XREAD, no group state."""
        self.broker.client.xread({self.keys(topic).stream: after}, count=1, block=max(1, timeout_ms))

    def claim(self, topic: str, group: str, consumer: str, min_idle_ms: int, cursor: str, count: int) -> Read:
        """One XAUTOCLAIM window of ``group``'s entries idle at least ``min_idle_ms``, with their delivery counts."""
        k = self.keys(topic)
        reply = self.broker.scripts.run("topic_claim", keys=[k.stream, k.gen], args=[group, consumer, min_idle_ms, cursor, count])
        if int(reply[0]) == NOGROUP:
            raise NoSuchGroup(group)
        rows = reply[3:]
        entries = [Entry(_text(rows[i]), _text(rows[i + 1]), int(rows[i + 3]), _text(rows[i + 2])) for i in range(0, len(rows), 4)]
        return Read(int(reply[0]), entries, cursor=_text(reply[1]), trimmed=int(reply[2]))

    def ack(self, topic: str, group: str, ids: list[str]) -> int:
        """XACK: the entries have become tasks (or dead letters)."""
        return int(self.broker.client.xack(self.keys(topic).stream, group, *ids)) if ids else 0

    def prune(self, topic: str, group: str, idle_ms: int) -> int:
        """Delete the group's consumers with nothing pending, idle longer than ``idle_ms``."""
        return int(self.broker.scripts.run("topic_prune", keys=[self.keys(topic).stream], args=[group, idle_ms]))

    def bury(self, queue: str, task_id: str, message: str, path: str, reason: str, error: dict[str, Any]) -> bool:
        """Dead-letter an event that cannot become its task; False if the task exists already."""
        k = self.broker.keys(queue)
        o = self.broker.options.for_queue(queue)
        argv = [k.prefix, task_id, message, path, reason, json.dumps(error), error.get("msg", ""), error.get("exc", ""),
                int(o.dead_letter_ttl * 1000), o.dead_letter_max]
        return bool(self.broker.scripts.run("bury_event", keys=[k.dead, k.task(task_id)], args=argv))

    # -- retention and replay ---------------------------------------------

    def trim(self, topic: str, max_age_ms: int, max_len: int, hard_max_len: int, groups: list[str]) -> Trimmed:
        """Trim by retention, never past what a group in ``groups`` has not acknowledged (but to the hard cap)."""
        k = self.keys(topic)
        reply = self.broker.scripts.run("topic_trim", keys=[k.stream, k.meta], args=[max_age_ms, max_len, hard_max_len, BATCH, *groups])
        return Trimmed(int(reply[0]), int(reply[1]))

    def rewind(self, topic: str, group: str, last_delivered: str) -> int:
        """Set ``group`` to deliver what follows ``last_delivered`` again and bump its generation: the new generation."""
        k = self.keys(topic)
        gen = int(self.broker.scripts.run("topic_rewind", keys=[k.stream, k.gen, k.meta], args=[group, last_delivered]))
        if gen == NOGROUP:
            raise NoSuchGroup(group)
        return gen

    # -- reading -----------------------------------------------------------

    def length(self, topic: str) -> int:
        return int(self.broker.client.xlen(self.keys(topic).stream))

    def first_at_or_after(self, topic: str, ms: int) -> str | None:
        """The id of the first entry made at ``ms`` or later (None: none is)."""
        rows = self.broker.client.xrange(self.keys(topic).stream, min=f"{max(0, ms)}-0", max="+", count=1)
        return _text(rows[0][0]) if rows else None

    def stats(self, topic: str, groups: list[str]) -> dict[str, GroupStats]:
        """Each of ``groups``: lag, pending, oldest pending id, last delivered, generation, dropped (bounded reads)."""
        c = self.broker.client
        k = self.keys(topic)
        out = {g: GroupStats(exists=False) for g in groups}
        if not c.exists(k.stream):
            return out
        info = {_text(g["name"]): g for g in c.xinfo_groups(k.stream)}
        gens = c.hgetall(k.gen)
        meta = c.hgetall(k.meta)
        for g in groups:
            row = info.get(g)
            if row is None:
                continue
            s = out[g] = GroupStats(exists=True, pending=int(row.get("pending", 0)), consumers=int(row.get("consumers", 0)),
                                    last_delivered=_text(row.get("last-delivered-id", "0-0")),
                                    generation=int(gens.get(g, 0) or 0), dropped=int(meta.get(f"dropped:{g}", 0) or 0),
                                    regrouped=int(meta.get(f"regrouped:{g}", 0) or 0))
            lag = row.get("lag")
            if lag is not None:
                s.lag = int(lag)
            else:  # not reported (6.2, or 7 after a trim past the group): count, bounded
                rows = c.xrange(k.stream, min="(" + s.last_delivered, max="+", count=LAG_SCAN_MAX) or []
                s.lag, s.lag_exact = len(rows), len(rows) < LAG_SCAN_MAX
            if s.pending:
                summary = c.xpending(k.stream, g)
                s.oldest_pending_id = _text(summary.get("min") or "")
        return out


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)
