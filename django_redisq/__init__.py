"""django-redisq: a reliable, fast task queue for Django on Redis."""

from .exceptions import InvalidArguments, LeaseLost, RedisQError, Retry, TaskTimeout
from .task import RedisTask, task

__all__ = ["InvalidArguments", "LeaseLost", "RedisQError", "RedisTask", "Retry", "TaskTimeout", "task"]
