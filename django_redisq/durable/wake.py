"""A publish wakes the durable tasks waiting for it (``context.wait_for``), within the publisher's call.

``topic_publish.lua`` answers how many waiters the topic has; only then does the publisher
read them, match the payload, and wake each match in its task's slot (wait_wake.lua: the
event recorded as the wait's result, the task made ready, so a worker blocked on the queue
takes it at once), then drop the woken and the stale from the topic's waiters. Two slots,
so two steps: a crash between them leaves a waiter whose next wake takes nothing.
"""

from __future__ import annotations

import json
import logging

from django_redisq.store.broker import Broker
from django_redisq.store.topics.steps import Topics
from django_redisq.store.topics.waiters import Waiters

logger = logging.getLogger("django_redisq")


def wake_waiters(broker: Broker, topic: str, entry_id: str, payload_json: str) -> int:
    """Wake the tasks waiting on ``topic`` whose match the payload holds; how many were woken or recorded."""
    waiters = Waiters(Topics(broker))
    found, drop = waiters.read(topic)
    payload = json.loads(payload_json)
    event_ms = int(entry_id.split("-", 1)[0])
    woken = 0
    for w in found:
        if w.due <= event_ms:
            drop.append(w.field)  # past its timeout: the task raises WaitTimeout when it runs
        elif w.matches(payload):
            if broker.durable.wake(w.queue, w.task_id, w.step, payload_json, entry_id):
                woken += 1
            drop.append(w.field)  # woken, or its task no longer waits: either way it is done here
    waiters.drop(topic, drop)
    if woken:
        logger.debug("event %s on %s woke %d waiting task(s)", entry_id, topic, woken)
    return woken
