"""Task lifecycle events: with ``OPTIONS["LIFECYCLE_EVENTS"] = True``, every task's transitions become events.

Each transition is published to the built-in topic ``redisq.tasks`` as
``{"task_id", "task", "queue", "backend", "state"}``, ``state`` one of
``enqueued``, ``started``, ``succeeded``, ``failed`` (an attempt raised),
``retried``, ``dead_lettered``, ``recovered`` (handed back after its worker
died), and ``progress`` (a report the task stored with ``report_progress``, with
its ``done``, ``total``, ``message`` and ``attempt``). A subscription on ``redisq.tasks`` (webhooks, an audit trail, a live
page) gets each once, as every subscription does. Off by default: it costs one
XADD per transition (``bench/events.py`` measures it).

Published from the receivers of the signals the backend and the worker send
already, so nothing is added to a task's path when the setting is off. A
receiver never raises (a failed publish is logged and dropped: these events
are a record, not a part of the task's contract). The tasks a subscription of
``redisq.tasks`` makes publish no lifecycle events of their own, or each would
feed the next.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django_redisq import signals
from django_redisq.compat import task_enqueued, task_finished, task_started
from django_redisq.events.subscriptions import LIFECYCLE_TOPIC, publish_plan
from django_redisq.store.topics import Topics
from django_redisq.workflows.port import find_backend

logger = logging.getLogger("django_redisq")
UID = "django_redisq.events.lifecycle"


def _publish(alias: str, task_id: str, task: str, queue: str, state: str, extra: dict[str, Any] | None = None) -> None:
    try:
        be = find_backend(alias)
        if be is None or not be.conf.lifecycle_events:
            return
        plan = publish_plan(be.conf)
        if plan.lifecycle_bases and task_id.startswith(plan.lifecycle_bases):
            return  # a lifecycle subscription's own task: no event, or each would make the next
        payload = json.dumps({**(extra or {}), "task_id": task_id, "task": task, "queue": queue, "backend": alias, "state": state},
                             separators=(",", ":"), ensure_ascii=False)
        Topics(be.broker).publish(LIFECYCLE_TOPIC, payload, plan.groups.get(LIFECYCLE_TOPIC, []))
    except Exception as exc:  # noqa: BLE001 - a record, never a reason for a task or an enqueue to fail
        logger.warning("lifecycle event %s of task %s not published: %s: %s", state, task_id, type(exc).__name__, exc)


def progress(alias: str, task_id: str, task: str, queue: str, report_json: str) -> None:
    """A stored progress report (progress.py) as the event ``progress``, with its ``done``, ``total``, ``message``
    and ``attempt``: at most as often as reports are stored (twice a second per task). Called by the worker."""
    try:
        extra = json.loads(report_json)
    except (ValueError, RecursionError):
        return
    _publish(alias, task_id, task, queue, "progress", extra if isinstance(extra, dict) else None)


def _from_result(state: str) -> Any:
    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        s = state
        if state == "finished":
            s = "succeeded" if str(getattr(task_result.status, "value", task_result.status)) == "SUCCESSFUL" else "failed"
        _publish(task_result.backend, task_result.id, task_result.task.module_path, task_result.task.queue_name, s)

    return receiver


def _from_worker(state: str) -> Any:
    def receiver(sender: Any, backend: str, queue: str, task_id: str, task_name: str, **kwargs: Any) -> None:
        _publish(backend, task_id, task_name, queue, state)

    return receiver


RECEIVERS = [(task_enqueued, _from_result("enqueued")), (task_started, _from_result("started")),
             (task_finished, _from_result("finished")), (signals.task_retried, _from_worker("retried")),
             (signals.task_dead_lettered, _from_worker("dead_lettered")), (signals.task_recovered, _from_worker("recovered"))]


def connect() -> None:
    """Connect the receivers (once per process, whatever calls it; each checks its backend's setting)."""
    for signal, receiver in RECEIVERS:
        signal.connect(receiver, dispatch_uid=f"{UID}.{id(signal)}", weak=False)
