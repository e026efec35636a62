"""Publishing events: ``publish`` appends one to a topic, ``apublish`` from async code, ``publish_on_commit`` once the
transaction commits.

An event is a JSON object on a topic (a Redis stream, store/topics/steps.py). Every
subscription of the topic (``OPTIONS["SUBSCRIPTIONS"]``, events/subscriptions.py) turns
each event into one ordinary task of its own (worker/background/pump.py), so retries, time
limits, dead letters and the admin apply to event handlers unchanged.

``publish`` is one round trip: one script that makes sure the topic's
subscription groups exist (so a ``latest`` subscription configured before the
first worker started still gets this event) and XADDs the event. ``apublish``
sends the same script on the running event loop's own connection (as
``aenqueue`` does), not through a thread: an async view waits for Redis only.

Traced (a tracer provider configured, core/tracing.py), the publish is a PRODUCER span
``send <topic>`` whose context goes into the entry (field ``tc``) and from there
into each subscriber task's metadata, so every handler's attempt continues the
publisher's trace. ``publish_on_commit`` keeps the context of its call for the
publish at the commit. Off, the entry is as it always was.
"""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction

from django_redisq.core import tracing
from django_redisq.core.message import encode_arguments
from django_redisq.core.options import NAME_RE, Options
from django_redisq.durable.wake import wake_waiters
from django_redisq.events.subscriptions import publish_plan
from django_redisq.exceptions import InvalidArguments, RedisQError
from django_redisq.store.server import reaching
from django_redisq.store.topics import Topics
from django_redisq.workflows.port import Backend, find_backend

__all__ = ["InvalidEvent", "apublish", "publish", "publish_on_commit"]


class InvalidEvent(RedisQError, ValueError):
    """An event that cannot be published: a bad or unconfigured topic, or a payload that is not a JSON object."""


def _backend(alias: str) -> Backend:
    be = find_backend(alias)
    if be is None:
        raise InvalidEvent(f"TASKS[{alias!r}] is not a django_redisq RedisQueueBackend; events need one.")
    return be


def _checked(options: Options, topic: Any, payload: Any) -> tuple[str, list[tuple[str, str]]]:
    if not isinstance(topic, str) or not NAME_RE.match(topic):
        raise InvalidEvent(f"topic {topic!r} is not a valid topic name: use 1-100 letters, digits, '_', '-' or '.'.")
    groups = publish_plan(options).groups.get(topic)
    if groups is None:
        raise InvalidEvent(f"topic {topic!r} is not configured: name it in OPTIONS['TOPICS'] or subscribe to it in "
                           "OPTIONS['SUBSCRIPTIONS'] (a topic nobody configured would never be trimmed).")
    if not isinstance(payload, dict):
        raise InvalidEvent(f"an event's payload must be a JSON object (a dict), got {type(payload).__name__}.")
    try:
        (arrives,), _, _ = encode_arguments([payload], {}, options.max_message_bytes)
    except InvalidArguments as exc:
        raise InvalidEvent(f"the payload of an event on {topic!r} cannot be published: {exc}") from None
    return json.dumps(arrives, separators=(",", ":"), ensure_ascii=False), groups


def publish(topic: str, payload: dict[str, Any], *, backend: str = "default") -> str:
    """Append an event to ``topic``; its id (``<Redis ms>-<seq>``). Each subscription of the topic gets it once.

    Raises ``InvalidEvent`` (a ``ValueError``) for a bad or unconfigured topic or a
    payload that is not a JSON object, before anything is written; ``RedisUnreachable``
    when Redis cannot be reached.
    """
    be = _backend(backend)
    text, groups = _checked(be.conf, topic, payload)
    return _send(be, topic, text, groups)


async def apublish(topic: str, payload: dict[str, Any], *, backend: str = "default") -> str:
    """``publish`` for async code (an async view, a consumer): the event's id, the same checks and errors.

    Raises ``InvalidEvent`` before anything is written, ``RedisUnreachable`` when Redis cannot be reached.
    """
    be = _backend(backend)
    text, groups = _checked(be.conf, topic, payload)
    with tracing.publish(topic) as span, reaching(be.conf):
        entry_id, waiting = await Topics(be.broker).apublish_counted(topic, text, groups, tracing.carrier_json(span.carrier))
        if waiting:  # durable tasks wait on this topic: woken as publish does, on a thread (a few round trips)
            await sync_to_async(wake_waiters, thread_sensitive=False)(be.broker, topic, entry_id, text)
        span.identify([entry_id])
        return entry_id


def _send(be: Backend, topic: str, text: str, groups: list[tuple[str, str]], parent: Any = None) -> str:
    with tracing.publish(topic, parent) as span, reaching(be.conf):  # reaching: Redis out of reach is one clear error
        entry_id, waiting = Topics(be.broker).publish_counted(topic, text, groups, tracing.carrier_json(span.carrier))
        if waiting:  # durable tasks wait on this topic (context.wait_for): wake the ones it matches
            wake_waiters(be.broker, topic, entry_id, text)
        span.identify([entry_id])
        return entry_id


def publish_on_commit(topic: str, payload: dict[str, Any], *, backend: str = "default", using: str | None = None) -> None:
    """Publish once the current transaction of database ``using`` commits; nothing if it rolls back.

    The topic and payload are checked and encoded now, so a bad event raises here, inside the
    transaction, and never fails silently after the commit. Outside a transaction
    (autocommit) it publishes at once, as ``transaction.on_commit`` does.
    """
    be = _backend(backend)
    text, groups = _checked(be.conf, topic, payload)  # the payload as it is now, not as it may be at the commit
    parent = tracing.current_context()  # the publish span's parent: this call's span, not whatever runs the commit
    transaction.on_commit(lambda: _send(be, topic, text, groups, parent), using=using)
