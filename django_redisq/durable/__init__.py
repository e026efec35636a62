"""Durable tasks: steps recorded once across retries, sleeps and waits that hold no worker.

``RedisQueueBackend.context_class`` is ``DurableContext``: a task declared
``@task(takes_context=True)`` calls ``context.step(...)``, ``context.sleep(...)`` and
``context.wait_for(...)`` (docs/howto/durable.md). The journal (``journal.py``) keeps
the rules; the records live in the task hash (store/steps/durable.py).
"""

from django_redisq.durable.context import DurableContext
from django_redisq.exceptions import StepError, WaitTimeout

__all__ = ["DurableContext", "StepError", "WaitTimeout"]
