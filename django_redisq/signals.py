"""Signals of django_redisq, beside Django's own ``task_enqueued``, ``task_started`` and ``task_finished``.

Sent by the worker (never by the web process), with ``send_robust``: a
receiver that raises is logged and does not disturb the worker. ``sender`` is
the backend class (``RedisQueueBackend``), as for Django's task signals.

- ``task_retried``: an attempt failed and Redis scheduled another one.
  Arguments: ``backend`` (alias), ``queue``, ``task_id``, ``task_name``
  (dotted path), ``attempt`` (the delivery that failed, from 1), ``error``
  (``{"exc", "msg", "tb"}``), ``delay_ms`` (until the next attempt), ``worker``.
- ``task_dead_lettered``: the task went to the dead-letter queue. The
  arguments of ``task_retried`` without ``delay_ms``, plus ``reason``
  (``failed``, ``not_retryable``, ``timeout``, ``cancelled``, ``bad_message``, ...).
- ``task_recovered``: the task's worker died (no heartbeat for WORKER_TIMEOUT)
  and this worker's reaper handed it back to pending; once per task.
  Arguments: ``backend``, ``queue``, ``task_id``, ``task_name`` ('' when the
  task data is gone), ``deliveries`` (the one that died included),
  ``dead_worker``, ``worker`` (the reaper).

Each is sent after the step it reports has landed in Redis, exactly once per
step: a settle step that lost its lease (another worker holds the task now)
sends nothing.
"""

from __future__ import annotations

from django.dispatch import Signal

__all__ = ["task_dead_lettered", "task_recovered", "task_retried"]

task_retried = Signal()
task_dead_lettered = Signal()
task_recovered = Signal()
