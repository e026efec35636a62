"""A workflow's Redis steps and reads (``WorkflowStore``, store.py) and the shapes they hand back (shapes.py)."""

from django_redisq.store.workflows.shapes import (
    HEADER_FIELDS,
    Adopted,
    DoneReply,
    Failed,
    Released,
    WorkflowHeader,
    WorkflowState,
)
from django_redisq.store.workflows.store import FAILED_KEPT, INDEX_KEPT, PROVISIONAL_MS, WorkflowStore

__all__ = ["FAILED_KEPT", "HEADER_FIELDS", "INDEX_KEPT", "PROVISIONAL_MS", "Adopted", "DoneReply", "Failed", "Released",
           "WorkflowHeader", "WorkflowState", "WorkflowStore"]
