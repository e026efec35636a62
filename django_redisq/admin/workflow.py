"""The admin's workflows: the list of the newest, and the page of one (its status, counts, graph and steps).

The list (``workflows_view``) reads the store's index of workflows, newest
first, ``PAGE`` a page, with each one's own record (status, steps done of all,
failed): no step is read. The index keeps the newest ``INDEX_KEPT``
(store/workflows/store.py).

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
from django.template.response import TemplateResponse

from django_redisq.admin.common import AdminPage, plural
from django_redisq.admin.graph import LEGEND, colour, svg
from django_redisq.ops.graph import graph
from django_redisq.ops.inspector import backend_aliases
from django_redisq.ops.workflows import PAGE, WorkflowNotFound, describe, newest, repair


def _offset(request: HttpRequest) -> int:
    try:
        return max(0, int(request.GET.get("offset", "0")))
    except ValueError:
        return 0


def workflows_view(model_admin: AdminPage, request: HttpRequest) -> TemplateResponse:
    """The newest workflows of each backend (``?backend=`` one of them, ``?offset=`` a page), each linked to its page."""
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    alias = model_admin.inspector_for(request.GET.get("backend")).options.alias
    listing = newest(alias, offset=_offset(request), limit=PAGE)
    context = model_admin.page_context(request, "Workflows", alias=alias, listing=listing,
                                       others=[a for a in backend_aliases() if a != alias])
    return model_admin.render_page(request, "workflows.html", context)


def workflow_view(model_admin: AdminPage, request: HttpRequest, alias: str, workflow_id: str) -> HttpResponse:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied
    model_admin.inspector_for(alias)  # 404 for a backend the settings do not name
    if request.method == "POST":
        return _repair(model_admin, request, alias, workflow_id)
    try:
        view = describe(workflow_id, alias, offset=_offset(request), limit=PAGE)
    except WorkflowNotFound:
        raise Http404(f"no workflow {workflow_id!r} (never created, or expired after it ended)") from None
    rows = [(s, (s.finished_at - s.started_at).total_seconds() if s.finished_at and s.started_at else None) for s in view.steps]
    picture = graph(view)
    context = model_admin.page_context(request, f"Workflow {view.id}", alias=alias, workflow=view, rows=rows,
                                       can_repair=model_admin.has_change_permission(request),
                                       graph=svg(picture, alias) if picture else None, legend=[(colour(k), w) for k, w in LEGEND])
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
