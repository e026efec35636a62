"""Every import path the documentation (docs/) documents, and the ones earlier releases documented, still import.

The package moved from flat modules to layers (connection/, store/, worker/,
ops/, admin/); user code, settings (``BACKEND``) and URLconfs name these
paths, so a move that broke one would break an upgrade. Each is imported in a
fresh interpreter, so a path that only worked because another test had already
imported its module fails here.
"""

from __future__ import annotations

import os

from tests.conftest import ROOT
from tests.project.forked import run_forked

PATHS = [
    ("django_redisq", "task"),
    ("django_redisq", "cancel"),
    ("django_redisq", "RedisTask"),
    ("django_redisq", "Retry"),
    ("django_redisq.task", "task"),
    ("django_redisq.backend", "RedisQueueBackend"),
    ("django_redisq.views", "metrics"),
    ("django_redisq.schedules.registry", "periodic"),
    ("django_redisq.signals", "task_retried"),
    ("django_redisq.signals", "task_dead_lettered"),
    ("django_redisq.signals", "task_recovered"),
    ("django_redisq.exceptions", "NotDurable"),
    ("django_redisq.exceptions", "WorkerLost"),
    ("django_redisq.exceptions", "TaskTimeout"),
    ("django_redisq.exceptions", "TaskCancelled"),
    ("django_redisq.exceptions", "RedisUnavailable"),
    ("django_redisq.testing", "RedisServer"),
    ("django_redisq.testing", "find_redis_server"),
    ("django_redisq.worker.worker", "Worker"),  # docs/howto/testing.md: in-process burst workers
    ("django_redisq.connection.async_pools", "aclose"),
    ("django_redisq.aconnection", "aclose"),  # the path earlier releases documented
    ("django_redisq.admin", "site"),  # what the admin's autodiscovery imports
    ("django_redisq", "get_workflow"),
    ("django_redisq", "get_progress"),
    ("django_redisq", "aget_progress"),
    ("django_redisq", "chain"),
    ("django_redisq.flow", "chord"),  # the path earlier releases documented; its home is workflows/canvas.py
    ("django_redisq.flow", "Signature"),
    ("django_redisq.workflows", "WorkflowResult"),  # docs/reference/api.md
    ("django_redisq.workflows", "get_workflow"),
    ("django_redisq.events", "publish"),  # docs/howto/events.md
    ("django_redisq.events", "publish_on_commit"),
    ("django_redisq.events", "InvalidEvent"),
    ("django_redisq.progress", "report_progress"),  # docs/reference/api.md
    ("django_redisq.progress", "Progress"),
    ("django_redisq.compat", "TaskResultDoesNotExist"),  # docs/howto/progress.md
    ("django_redisq.backend", "cancel"),
    ("django_redisq.backend", "get_progress"),
    ("django_redisq.testing", "captured_tasks"),  # docs/howto/testing.md
    ("django_redisq.testing", "free_port"),
]


def test_every_documented_path_imports_in_a_fresh_interpreter() -> None:
    """Each module imported first in a process of its own (``manage.py shell -c``), its documented names read from it.

    The processes are forked from one interpreter that set Django up (tests/project/forked.py): the same start as an
    interpreter per module (``django.setup()`` then the import), for one start-up instead of one per module.
    """
    by_module: dict[str, list[str]] = {}
    for module, name in PATHS:
        by_module.setdefault(module, []).append(name)
    checks = list(by_module.items())
    env = {"DJANGO_SETTINGS_MODULE": "tests.settings", **os.environ}
    done = run_forked([("shell", "-c", f"import importlib; loaded = importlib.import_module({module!r}); "
                                       f"[getattr(loaded, name) for name in {names!r}]") for module, names in checks],
                      env, ROOT)
    failed = [f"{module} {names}: {p.stderr.strip().splitlines()[-1:]}"
              for (module, names), p in zip(checks, done, strict=True) if p.returncode != 0]
    assert not failed, failed
