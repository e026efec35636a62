"""The tasks the Django Tasks peers run (a module of its own: a task's function must be importable)."""

from common import record_start, rpush_one, sleep_one
from django.tasks import task


@task
def noop(x: int) -> int:
    return x


@task
def rpush(x: int) -> int:
    return rpush_one(x)


@task
def sleep_io(x: int) -> int:
    return sleep_one(x)


@task
def stamp(x: int) -> int:
    return record_start(x)
