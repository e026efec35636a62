"""The admin page of one workflow: its status and each step's state, timing, attempts and a link to its task.

Read-only, with the view permission; the data is ``ops.workflows.describe``'s,
the same as ``manage.py redisq workflow``. A step's own page (its task, or its
dead letter with Replay and edit-then-replay) links back here.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest
from django.template.response import TemplateResponse

from django_redisq.admin.common import AdminPage
from django_redisq.ops.workflows import WorkflowNotFound, describe


def workflow_view(model_admin: AdminPage, request: HttpRequest, alias: str, workflow_id: str) -> TemplateResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    model_admin.inspector_for(alias)  # 404 for a backend the settings do not name
    try:
        view = describe(workflow_id, alias)
    except WorkflowNotFound:
        raise Http404(f"no workflow {workflow_id!r} (never created, or expired after it ended)") from None
    rows = [(s, (s.finished_at - s.started_at).total_seconds() if s.finished_at and s.started_at else None) for s in view.steps]
    context = model_admin.page_context(request, f"Workflow {view.id}", alias=alias, workflow=view, rows=rows)
    return model_admin.render_page(request, "workflow.html", context)
