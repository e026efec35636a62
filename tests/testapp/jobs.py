"""A task outside the app's tasks.py that nothing a worker imports imports (tests/backend/test_mistakes.py).

Enqueue refuses it unless ``OPTIONS["IMPORTS"]`` names this module.
"""

from django_redisq import task


@task
def stray(x: int) -> int:
    return x * 2
