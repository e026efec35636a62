"""Which modules a worker imports, so that enqueue can tell whether a worker will find a task.

A worker runs only registered tasks, and a task registers when its module is
imported. ``runworker`` (and each child of the process pool, and a result read
back by the backend) imports, through ``load``: the ``tasks`` module of every
installed app, then each module of the backend's ``OPTIONS["IMPORTS"]``. A task
defined anywhere else (``shop/jobs.py``) is accepted by Django at enqueue and
then dead-lettered as ``unknown_task`` by every worker, so the backend asks
``Reach.covers`` at enqueue and refuses the call with both fixes.

What a worker imports is the modules ``load`` names and what they import in
turn: ``Reach`` follows, from each of them, the modules, functions, classes and
tasks in its namespace to the modules that define them, and on from those
that are the project's (in an app's package, or outside the standard library
and site-packages: a project installed as a package is followed within its
apps' packages). It is computed once per process and set of imports; after
that ``covers`` is a set lookup.
"""

from __future__ import annotations

import sys
import sysconfig
from collections.abc import Iterable
from importlib import import_module
from types import FunctionType, ModuleType
from typing import Any

from django.apps import apps
from django.utils.module_loading import autodiscover_modules, module_has_submodule

from django_redisq.compat import Task

IMPORTS = "IMPORTS"
"""``TASKS[alias]["OPTIONS"]["IMPORTS"]``: more modules whose tasks a worker loads, besides the apps' ``tasks``."""

_LIBRARY_DIRS = tuple(
    {p for p in (sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")) if p}
)


def imports_of(params: Any) -> tuple[str, ...]:
    """The ``IMPORTS`` of one ``TASKS`` entry (empty when absent or malformed: the system check reports that)."""
    opts = params.get("OPTIONS") if isinstance(params, dict) else None
    found = opts.get(IMPORTS, ()) if isinstance(opts, dict) else ()
    return tuple(m for m in found if isinstance(m, str)) if isinstance(found, (list, tuple)) else ()


def load(imports: Iterable[str] = ()) -> None:
    """Import what a worker runs tasks from: every app's ``tasks`` module, then each of ``imports``."""
    autodiscover_modules("tasks")
    for module in imports:
        import_module(module)


def roots(imports: Iterable[str] = ()) -> list[str]:
    """The modules ``load`` imports by name (an app without a ``tasks`` module has none)."""
    found = [f"{app.name}.tasks" for app in apps.get_app_configs() if module_has_submodule(app.module, "tasks")]
    return found + [m for m in imports if m not in found]


def _project(module: ModuleType) -> bool:
    """A module of the project (its namespace is followed), not of Python or an installed package."""
    path = getattr(module, "__file__", None)
    return bool(path) and not str(path).startswith(_LIBRARY_DIRS)


def _defined_in(value: Any) -> str | None:
    """The module that defines ``value``, where that says something was imported."""
    if isinstance(value, ModuleType):
        return value.__name__
    if isinstance(value, Task):
        return getattr(value.func, "__module__", None)
    if isinstance(value, (FunctionType, type)):
        return getattr(value, "__module__", None)
    return None


class Reach:
    """The modules a worker has imported once ``load(imports)`` ran (see the module docstring)."""

    def __init__(self, imports: Iterable[str] = ()) -> None:
        self.imports = tuple(imports)
        load(self.imports)
        self.roots = roots(self.imports)
        seen: set[str] = set()
        stack = list(self.roots)
        packages = {name.split(".", 1)[0] for name in self.roots}  # the apps' own, wherever they are installed
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            module = sys.modules.get(name)
            if module is None or not (name.split(".", 1)[0] in packages or _project(module)):
                continue
            for value in list(vars(module).values()):
                found = _defined_in(value)
                if found and found not in seen:
                    stack.append(found)
        self.modules = frozenset(seen)

    def covers(self, module: str) -> bool:
        return module in self.modules

    def refusal(self, task_path: str, module: str, alias: str) -> str:
        """Why a task of ``module`` cannot be enqueued, with both fixes."""
        app = module.rsplit(".", 1)[0] if "." in module else "<your app>"
        return (
            f"Task {task_path!r} is defined in module {module!r}, which runworker does not import: a worker loads the "
            f"tasks.py of each installed app and the modules in TASKS[{alias!r}]['OPTIONS']['IMPORTS'], and would "
            f"dead-letter this task as unknown_task. Fix: move it into an installed app's tasks.py (e.g. {app}.tasks), "
            f"or add {module!r} to TASKS[{alias!r}]['OPTIONS']['IMPORTS']."
        )
