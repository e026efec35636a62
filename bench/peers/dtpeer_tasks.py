"""The no-op task the Django Tasks peers enqueue (a module of its own: a task's function must be importable)."""

from django.tasks import task


@task
def noop(x: int) -> int:
    return x
