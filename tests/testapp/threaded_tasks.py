"""A task module that starts a thread when imported (as a tracing or error-reporting library may at set-up):
a process-pool template that imports it has threads, so its children are started afresh, never forked."""

from __future__ import annotations

import os
import threading

from django_redisq import task

_started = threading.Event()
threading.Thread(target=_started.wait, name="threaded-tasks-module", daemon=True).start()


@task
def parent_pid() -> int:
    """The parent process of the process that ran it."""
    return os.getppid()
