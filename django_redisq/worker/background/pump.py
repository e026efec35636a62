"""The event pump: turns each event of a subscription into one ordinary task (invariant 14 (docs/explanation/architecture.md)).

A worker that serves a subscription's queue reads the subscription's consumer
group (one thread per subscription: topic_read.lua, then a blocking XREAD past
the stream's newest id while nothing is new). Each entry becomes a task whose id
is derived from (subscription, generation, entry id) (``Subscription.task_id``);
the tasks are enqueued (enqueue.lua stores an id once: a second try is dropped
with '!') and only then are the entries acknowledged (XACK). A worker killed in
between leaves them pending; the keeper thread of every worker reclaims entries
idle longer than ``WORKER_TIMEOUT`` (XAUTOCLAIM, following the cursor over the
whole pending list) and enqueues them again, the id dropping the duplicate.

Each entry is judged on its own (``judge``). One that cannot become a task (its
payload is not a JSON object, is nested too deeply to decode, its message is too
large; any exception while its task is built, a bug included) is dead-lettered
at once with reason ``bad_event`` and the exception in its error; the rest of the
batch goes on and is acknowledged. One whose enqueue keeps failing is
dead-lettered with ``event_undeliverable`` once Redis counted ``MAX_DELIVERIES``
deliveries of it (XPENDING), a count checked before the entry is decoded, so
nothing about an entry can make it loop. An enqueue is one call per physical
queue: one that fails leaves only its own entries pending.

The keeper also trims every topic of the backend (topic_trim.lua: retention,
never past an entry a subscription has not acknowledged, but to the hard cap),
and deletes consumers of stopped workers that hold nothing. Each subscription's
reclaim and each topic's trim is a step of its own: one that fails is logged and
the others still run (a keeper that stopped trimming would leave the hard cap to
drop events).

A subscription's consumer group found missing (an operator's XGROUP DESTROY) is
recreated where the subscription stood, never at '$', logged at WARNING and
counted (store/scripts/lib/topic_group.lua; ``redisq topics``, the metric,
``redisq health``'s notes).

The generation: ``redisq topics rewind`` sets a group back and bumps it in one
step (topic_rewind.lua); each read returns it with the entries in one step
(topic_read.lua), so a replayed event gets a new task id, never a duplicate of
the first run's.

Tracing: an entry's field ``tc`` (the publisher's trace context, core/tracing.py) goes
into its task's metadata ``_trace``, so the handler's attempt continues the
publisher's trace. It is copied whether or not this process traces (the task may
run in one that does), and only what ``tracing.clean_carrier`` keeps: a damaged
or foreign ``tc`` is left out, never a reason to refuse the event.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

from django_redisq.core import partitions, tracing
from django_redisq.core.limits import task_limits
from django_redisq.core.message import encode, encode_arguments
from django_redisq.core.options import Options
from django_redisq.events.subscriptions import START_IDS, Subscription, Topic, event_kwargs, subscriptions_of, topics_of, unfit
from django_redisq.exceptions import InvalidArguments, RedisError
from django_redisq.schedules.registry import find_task
from django_redisq.store.broker import Broker
from django_redisq.store.steps.replies import NewTask
from django_redisq.store.topics import BATCH as TRIM_BATCH
from django_redisq.store.topics import Entry, NoSuchGroup, Topics
from django_redisq.worker.observability.outage import Outage

logger = logging.getLogger("django_redisq")

READ_BATCH = 200
"""Entries one read takes (one enqueue, one XACK for all of them)."""
CLAIM_WINDOW = 200
"""Entries one XAUTOCLAIM window looks at; the cursor is followed, at most CLAIM_WINDOWS windows per keep."""
CLAIM_WINDOWS = 50
MAX_DELIVERIES = 5
"""Deliveries of one entry (XPENDING) after which it is dead-lettered instead of enqueued once more."""
BLOCK_MS = 1000
KEEP_EVERY = 1.0
"""Seconds between two rounds of the keeper (reclaim; trim every TRIM_EVERY rounds; prune every PRUNE_EVERY)."""
TRIM_EVERY = 5
TRIM_CALLS = 20
"""Trim calls per topic per round at most: each removes at most store.topics.BATCH by MAX_LEN and as many by the hard
cap, so a round keeps up with 20 x BATCH / (TRIM_EVERY x KEEP_EVERY) events a second beyond MAX_LEN."""
PRUNE_EVERY = 60
BAD_EVENT, UNDELIVERABLE = "bad_event", "event_undeliverable"
BAD_EVENT_EXC = "django_redisq.events.publish.InvalidEvent"


class BadEvent(ValueError):
    """An entry that can never become its subscription's task."""


@dataclass(frozen=True, slots=True)
class Pending:
    """An entry judged fit: its task, to be enqueued into ``queue`` (a partition of the subscription's queue)."""

    queue: str
    task_id: str
    entry_id: str
    message: str


def raw_message(payload: str) -> str:
    """A dead letter's message for an entry whose own cannot be built: the payload decoded if it can be, else its text.

    Always storable: a lone surrogate (an entry that is not UTF-8) is written as its escape, never raised at the write."""
    try:
        message = encode([json.loads(payload)], {})
        message.encode("utf-8")
        return message
    except Exception:  # noqa: BLE001 - not JSON, nested too deeply, not UTF-8: the text as it came
        return encode([payload.encode("utf-8", "backslashreplace").decode("utf-8")], {})


class EventPump:
    """Feeds the subscriptions of the queues a worker serves; trims the backend's topics."""

    def __init__(self, options: Options, broker: Broker, stop: threading.Event, consumer: str, queues: list[str], *,
                 outage: Outage | None = None) -> None:
        self.options, self.broker, self.stop, self.consumer = options, broker, stop, consumer
        self.outage = outage or Outage(consumer)  # the worker's account of Redis out of reach (one line a part)
        self.topics = Topics(broker)
        self.subs: list[Subscription] = []
        self._tasks: dict[str, Any] = {}
        for sub in subscriptions_of(options):
            if sub.queue not in queues:
                continue
            task = find_task(sub.task)
            if task is None or (why := unfit(task)) is not None:
                logger.error("subscription %s is not served: %s", sub.name,
                             f"{sub.task!r} is not a registered task" if task is None else f"{sub.task} cannot take an event: {why}")
                continue
            self.subs.append(sub)
            self._tasks[sub.name] = task
        self.retention: list[Topic] = list(topics_of(options).values())
        self._holders = {t.name: [s.name for s in subscriptions_of(options) if s.topic == t.name] for t in self.retention}
        self.min_idle_ms = max(1, int(options.worker_timeout * 1000))
        self.errors: dict[str, str] = {}  # entry id -> the last enqueue error seen here (for its dead letter)
        self.enqueued = 0
        self._cursors: dict[str, str] = {}  # subscription -> where its unfinished pending walk goes on

    def threads(self) -> list[threading.Thread]:
        """A reader per subscription served and the keeper; none when the backend has no topics."""
        found = [threading.Thread(target=self.read_loop, args=(s,), name=f"redisq-events-{s.name}", daemon=True) for s in self.subs]
        if self.retention:
            found.append(threading.Thread(target=self.keep_loop, name="redisq-events-keeper", daemon=True))
        return found

    # -- reading -----------------------------------------------------------

    def join(self, sub: Subscription) -> None:
        """Make sure the subscription's group exists; one found deleted is recreated where it stood (store/topics/steps.py)."""
        self.topics.ensure_groups(sub.topic, [(sub.name, START_IDS[sub.start])])

    def read_loop(self, sub: Subscription) -> None:
        joined = False
        while not self.stop.is_set():
            try:
                if not joined:
                    self.join(sub)
                    joined = True
                if not self.pump_once(sub):
                    continue
            except NoSuchGroup:
                joined = False
            except RedisError as exc:
                self.outage.failed("events", exc, "events: reading subscription %s failed (%s: %s); retrying", sub.name,
                                   type(exc).__name__, exc)
                self.stop.wait(1.0)
            except Exception:
                logger.exception("events: subscription %s failed; retrying", sub.name)
                self.stop.wait(1.0)

    def pump_once(self, sub: Subscription, block_ms: int = BLOCK_MS) -> bool:
        """Read new entries and turn them into tasks; with none, wait up to ``block_ms`` for one. Whether it waited."""
        read = self.topics.read(sub.topic, sub.name, self.consumer, READ_BATCH)
        if read.entries:
            self.handle(sub, read.generation, read.entries)
            return False
        if block_ms > 0:
            self.topics.wait(sub.topic, read.top, block_ms)
        return True

    # -- entries to tasks --------------------------------------------------

    def handle(self, sub: Subscription, generation: int, entries: list[Entry]) -> None:
        """Enqueue each entry's task (dead-letter the ones that cannot be), then XACK what became a task or a dead letter.

        Each entry is judged on its own: whatever one raises (a payload too deeply nested to decode, bad text, a bug)
        buries that one as ``bad_event``; the rest of the batch goes on and is acknowledged."""
        task = self._tasks[sub.name]
        by_queue: dict[str, list[Pending]] = {}
        done: list[str] = []
        for e in entries:
            try:
                got = self.judge(sub, task, generation, e)
            except Exception:  # not even buried: left pending, reclaimed, counted by Redis
                logger.exception("events: entry %s of subscription %s not handled; retried after %gs", e.id, sub.name,
                                 self.min_idle_ms / 1000)
                continue
            if isinstance(got, Pending):
                by_queue.setdefault(got.queue, []).append(got)
            elif got:
                done.append(e.id)
        for queue, items in by_queue.items():
            done += self._enqueue(sub, task, queue, items)
        self.topics.ack(sub.topic, sub.name, done)

    def judge(self, sub: Subscription, task: Any, generation: int, e: Entry) -> Pending | bool:
        """The entry's task to enqueue, or whether it was settled here (True: buried; False: left pending).

        The delivery count comes first: an entry that keeps failing ends as ``event_undeliverable`` whatever
        makes it fail, even a decoding that never returns cleanly."""
        task_id = sub.task_id(generation, e.id)
        queue = self._physical(sub.queue, task_id)
        if e.deliveries > MAX_DELIVERIES:
            why = self.errors.get(e.id) or "it was delivered but never acknowledged (each worker failed or died)"
            try:
                message = self.message(sub, task, e)
            except Exception:  # noqa: BLE001 - the dead letter keeps the raw payload instead (_bury)
                message = ""
            return self._bury(sub, queue, task_id, e, UNDELIVERABLE,
                              f"the event did not become a task after {e.deliveries - 1} deliveries: {why}", message)
        try:
            return Pending(queue, task_id, e.id, self.message(sub, task, e))
        except BadEvent as exc:
            return self._bury(sub, queue, task_id, e, BAD_EVENT, str(exc))
        except Exception as exc:  # noqa: BLE001 - RecursionError, UnicodeError, TypeError, a bug: this entry only
            return self._bury(sub, queue, task_id, e, BAD_EVENT, f"entry {e.id} of topic {sub.topic!r} cannot become a task "
                              f"({type(exc).__name__}: {str(exc)[:300]})")

    def _enqueue(self, sub: Subscription, task: Any, queue: str, items: list[Pending]) -> list[str]:
        """Enqueue one queue's share of a batch: the entry ids that became tasks ([] if the enqueue failed: left pending)."""
        try:
            self.broker.enqueue(queue, [NewTask(p.task_id, p.message, sub.task, 0, "", self._priority(task), task_limits(task))
                                        for p in items])
        except Exception as exc:  # noqa: BLE001 - left pending: reclaimed after WORKER_TIMEOUT, counted by Redis
            why = f"{type(exc).__name__}: {exc}"
            if len(self.errors) > 10_000:
                self.errors.clear()
            for p in items:
                self.errors[p.entry_id] = why
            logger.warning("events: %d event(s) of subscription %s not enqueued into %s (%s); retried after %gs", len(items),
                           sub.name, queue, why, self.min_idle_ms / 1000)
            return []
        self.enqueued += len(items)
        for p in items:
            self.errors.pop(p.entry_id, None)
        return [p.entry_id for p in items]

    def message(self, sub: Subscription, task: Any, e: Entry) -> str:
        """The task message of an entry: the payload as the one argument, event_id / topic if the task takes them."""
        try:
            payload = json.loads(e.payload)
        except ValueError:
            raise BadEvent(f"entry {e.id} of topic {sub.topic!r} has no JSON payload (field 'p')") from None
        except RecursionError:
            raise BadEvent(f"entry {e.id} of topic {sub.topic!r}: the payload is nested too deeply to decode") from None
        if not isinstance(payload, dict):
            raise BadEvent(f"entry {e.id} of topic {sub.topic!r}: the payload is a {type(payload).__name__}, not a JSON object")
        kwargs = event_kwargs(task, e.id, sub.topic)
        try:
            args, kwargs, _ = encode_arguments([payload], kwargs, self.options.for_queue(sub.queue).max_message_bytes)
        except InvalidArguments as exc:
            raise BadEvent(f"entry {e.id} of topic {sub.topic!r}: {exc}") from None
        carrier = tracing.carrier_from_json(e.trace) if e.trace else None  # None for a bad one: the event goes on untraced
        return encode(args, kwargs, None, {tracing.TRACE_KEY: carrier} if carrier else None)

    def _bury(self, sub: Subscription, queue: str, task_id: str, e: Entry, reason: str, why: str, message: str = "") -> bool:
        """Dead-letter the entry as its task; whether it is settled (buried now, or the task existed)."""
        error = {"exc": BAD_EVENT_EXC, "msg": why, "tb": why, "at": 0}
        try:
            self.topics.bury(queue, task_id, message or raw_message(e.payload), sub.task, reason, error)
        except Exception as exc:  # noqa: BLE001 - left pending: buried at a later delivery, or undeliverable
            logger.warning("events: could not dead-letter entry %s of subscription %s (%s: %s); retried later", e.id, sub.name,
                           type(exc).__name__, exc)
            return False
        logger.error("events: entry %s of subscription %s dead-lettered as task %s (%s): %s", e.id, sub.name, task_id, reason, why)
        self.errors.pop(e.id, None)
        return True

    def _physical(self, queue: str, task_id: str) -> str:
        n = self.options.partitions(queue)
        return partitions.by_key(queue, n, task_id) if n > 1 else queue  # the same id, the same partition: dedup holds

    @staticmethod
    def _priority(task: Any) -> int:
        p = getattr(task, "priority", 0)
        return p if isinstance(p, int) and not isinstance(p, bool) and -100 <= p <= 100 else 0

    # -- the keeper ----------------------------------------------------------

    def keep_loop(self) -> None:
        rounds = 0
        while not self.stop.wait(KEEP_EVERY):
            rounds += 1
            self.keep_once(trim=rounds % TRIM_EVERY == 0, prune=rounds % PRUNE_EVERY == 0)

    def keep_once(self, trim: bool = True, prune: bool = False) -> int:
        """Reclaim what dead consumers left pending, trim the topics, delete stopped consumers: how many steps failed.

        Each subscription and each topic in its own step: one that fails (logged) never stops the others' reclaim
        or the trims, which a hard cap would otherwise have to make up for by dropping events."""
        failed = sum(not self._step(f"reclaiming subscription {s.name}", self._reclaim_or_join, s) for s in self.subs)
        if trim:
            failed += sum(not self._step(f"trimming topic {t.name}", self.trim, t) for t in self.retention)
        if prune:
            idle = max(60_000, 10 * self.min_idle_ms)
            failed += sum(not self._step(f"pruning subscription {s.name}", self.topics.prune, s.topic, s.name, idle)
                          for s in self.subs)
        return failed

    def _reclaim_or_join(self, sub: Subscription) -> None:
        try:
            self.reclaim(sub)
        except NoSuchGroup:
            self.join(sub)

    def _step(self, what: str, step: Any, *args: Any) -> bool:
        """Run one step of the keeper; whether it succeeded (a failure is logged, the keeper goes on)."""
        try:
            step(*args)
        except RedisError as exc:
            self.outage.failed("events keeper", exc, "events: keeper: %s failed (%s: %s); retried next round", what,
                               type(exc).__name__, exc)
            return False
        except Exception:  # a bug in one step: logged, the other steps still run
            logger.exception("events: keeper: %s failed; retried next round", what)
            return False
        return True

    def reclaim(self, sub: Subscription, min_idle_ms: int | None = None) -> int:
        """Walk the group's whole pending list (following XAUTOCLAIM's cursor), enqueue what was idle too long.

        At most CLAIM_WINDOWS windows per call; a walk left unfinished goes on from its cursor at the next call,
        so a pending list longer than that is still walked to its end, never only its head."""
        cursor, taken = self._cursors.get(sub.name, "0-0"), 0
        for _ in range(CLAIM_WINDOWS):
            got = self.topics.claim(sub.topic, sub.name, self.consumer, self.min_idle_ms if min_idle_ms is None else min_idle_ms,
                                    cursor, CLAIM_WINDOW)
            if got.trimmed:
                logger.warning("events: %d pending entr(ies) of subscription %s were trimmed by HARD_MAX_LEN before "
                               "becoming tasks", got.trimmed, sub.name)
            if got.entries:
                taken += len(got.entries)
                self.handle(sub, got.generation, got.entries)
            cursor = got.cursor
            if cursor == "0-0":
                break
        self._cursors[sub.name] = cursor
        return taken

    def trim(self, t: Topic) -> tuple[int, int]:
        """Trim ``t`` (topic_trim.lua), again at once while a call hit its batch (MAX_LEN or the hard cap far behind)."""
        removed = dropped = 0
        for _ in range(TRIM_CALLS):
            r, d = self.topics.trim(t.name, int(t.max_age * 1000), t.max_len, t.hard_max_len, self._holders.get(t.name, []))
            removed, dropped = removed + r, dropped + d
            if r < TRIM_BATCH and d < TRIM_BATCH:
                break
        if dropped:
            logger.error("events: topic %s was over HARD_MAX_LEN (%d): %d entr(ies) dropped before every subscription read "
                         "them (redisq topics shows which)", t.name, t.hard_max_len, dropped)
        return removed, dropped

