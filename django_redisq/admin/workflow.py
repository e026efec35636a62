"""The admin page of one workflow: its status, counts by state and one page of steps, and a link to each task.

A GET is a bounded read that writes nothing, with the view permission: the
data is ``ops.workflows.describe``'s, the same as ``manage.py redisq
workflow``, ``PAGE`` steps a page (``?offset=``), the counts from the
workflow's own record (no step read for them). A POST of ``repair``, with the
change permission, runs the one write (``ops.workflows.repair``: a step settled
or dead-lettered where no workflow hook saw it) and comes back to the page. A
step's own page (its task, or its dead letter with Replay and edit-then-replay)
links back here.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect

from django_redisq.admin.common import AdminPage, plural
from django_redisq.ops.workflows import PAGE, WorkflowNotFound, describe, repair


def workflow_view(model_admin: AdminPage, request: HttpRequest, alias: str, workflow_id: str) -> HttpResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    model_admin.inspector_for(alias)  # 404 for a backend the settings do not name
    if request.method == "POST":
        return _repair(model_admin, request, alias, workflow_id)
    try:
        offset = max(0, int(request.GET.get("offset", "0")))
    except ValueError:
        offset = 0
    try:
        view = describe(workflow_id, alias, offset=offset, limit=PAGE)
    except WorkflowNotFound:
        raise Http404(f"no workflow {workflow_id!r} (never created, or expired after it ended)") from None
    rows = [(s, (s.finished_at - s.started_at).total_seconds() if s.finished_at and s.started_at else None) for s in view.steps]
    context = model_admin.page_context(request, f"Workflow {view.id}", alias=alias, workflow=view, rows=rows,
                                       can_repair=model_admin.has_change_permission(request))
    return model_admin.render_page(request, "workflow.html", context)


def _repair(model_admin: AdminPage, request: HttpRequest, alias: str, workflow_id: str) -> HttpResponse:
    """Repair, with the change permission: log it, say how many steps it recorded, show the page again."""
    if not model_admin.has_change_permission(request):
        raise PermissionDenied
    try:
        fixed = repair(workflow_id, alias)
    except WorkflowNotFound:
        raise Http404(f"no workflow {workflow_id!r} (never created, or expired after it ended)") from None
    if fixed:
        model_admin.log_ids(request, [f"{alias}/workflow:{workflow_id}"], CHANGE, f"Repaired workflow {workflow_id}")
        messages.success(request, f"Repaired {plural(fixed, 'step', 'steps')} settled where no workflow hook saw them.")
    else:
        messages.info(request, "Nothing to repair: every settled step is recorded in its workflow.")
    return HttpResponseRedirect(request.path)
