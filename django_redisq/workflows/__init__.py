"""Workflows: the canvas vocabulary (canvas: ``chain``, ``group``, ``chord``), what a workflow's shape must fit
(limits), enqueueing one (enqueue) and reading it back (result, steps).

The canvas sits below the store (the store reads its markers); enqueueing and reading sit above it. So this
package's ``__init__`` imports nothing at load time: importing ``workflows.canvas`` from the store must not pull
the layers above it in. ``from django_redisq.workflows import WorkflowResult`` (the documented path) resolves
on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_redisq.workflows.enqueue import WorkflowNotFound, enqueue_workflow, get_workflow
    from django_redisq.workflows.result import WorkflowResult

_PUBLIC = {"WorkflowNotFound": "enqueue", "WorkflowResult": "result", "enqueue_workflow": "enqueue", "get_workflow": "enqueue"}

__all__ = ["WorkflowNotFound", "WorkflowResult", "enqueue_workflow", "get_workflow"]


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
