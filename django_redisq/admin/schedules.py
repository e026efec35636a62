"""The Schedules page and its action: pause, resume or run now one periodic schedule.

A POST with a confirmation page first, allowed with the "change dead letter"
permission (as every change in this admin) and written to the admin log. The
rows come from ``ops.inspector.schedule_rows``; a schedule whose settings have
problems is shown with them and cannot be changed.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse

from django_redisq.admin.common import AdminPage, schedules_url
from django_redisq.ops.inspector import Inspector, UnknownSchedule, backend_aliases, schedule_rows
from django_redisq.ops.operations import PAUSE, RESUME, RUN_NOW, SCHEDULE_ACTIONS, ScheduleOperations
from django_redisq.settings.read import get_options

VERBS = {PAUSE: "Pause", RESUME: "Resume", RUN_NOW: "Run now"}


def schedules_view(page: AdminPage, request: HttpRequest) -> TemplateResponse:
    """Every backend's schedules: their next and last ticks, pauses, problems."""
    if not page.has_view_permission(request):
        raise PermissionDenied
    backends = [(alias, schedule_rows(Inspector(get_options(alias)))) for alias in backend_aliases()]
    return page.render_page(request, "schedules.html", page.page_context(request, "Schedules", backends=backends))


def schedule_action_view(page: AdminPage, request: HttpRequest) -> HttpResponse:
    """Pause, resume or run now one schedule: a confirmation page first, then the change (POST only)."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not page.has_change_permission(request):
        raise PermissionDenied
    post = request.POST
    ins = page.inspector_for(post.get("backend"))
    alias, name, action = ins.options.alias, post.get("name", "")[:200], post.get("action", "")
    back = schedules_url(alias)
    row = next((r for r in schedule_rows(ins) if r.name == name), None)
    if action not in SCHEDULE_ACTIONS:
        messages.error(request, f"Unknown action {action[:40]!r}; expected one of {', '.join(SCHEDULE_ACTIONS)}.")
        return HttpResponseRedirect(back)
    if row is None or row.problems:
        messages.error(request, f"Schedule {name!r} cannot be changed: " + (" ".join(row.problems) if row else "it is not configured."))
        return HttpResponseRedirect(back)
    if post.get("confirm") != "yes":
        verb = VERBS[action]
        context = page.page_context(request, f"{verb}: schedule {name}?", alias=alias, row=row, action=action, verb=verb,
                                    back=back, fields=[("backend", alias), ("name", name), ("action", action)])
        return page.render_page(request, "schedule_confirm.html", context)
    _change(page, request, ins, action, name)
    return HttpResponseRedirect(back)


def _change(page: AdminPage, request: HttpRequest, ins: Inspector, action: str, name: str) -> None:
    alias = ins.options.alias
    try:
        change = ScheduleOperations(ins).act(action, name, request.user.get_username())
    except UnknownSchedule as exc:  # removed or broken between the page and the click
        messages.error(request, str(exc))
        return
    if action == RUN_NOW:
        page.log_ids(request, [f"{alias}/{change.queue}/{change.task_id}"], CHANGE, f"Ran schedule {name} now")
        messages.success(request, f"Enqueued the task of schedule {name} now, as {change.task_id} on queue {change.queue}.")
    elif not change.changed:
        messages.warning(request, f"Schedule {name} was {'paused already' if action == PAUSE else 'not paused'}; nothing changed.")
    else:
        page.log_ids(request, [f"{alias}/schedule:{name}"], CHANGE, f"{'Paused' if action == PAUSE else 'Resumed'} schedule {name}")
        messages.success(request, f"Paused schedule {name}: no worker runs its ticks until it is resumed." if action == PAUSE else
                         f"Resumed schedule {name}: its next tick runs as usual (ticks that passed while it was paused are not run).")
