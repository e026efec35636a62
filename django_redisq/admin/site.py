"""Admin pages over Redis: queues, dead letters, pending, scheduled and running tasks, periodic schedules.

The ``DeadLetter`` model is a placeholder (no table) that gives the admin an
index entry and two permissions: "view" to look, "change" to replay, delete
and purge dead letters, to cancel tasks (admin/cancel.py), to pause,
resume or run now a schedule, and to pause or resume a queue (admin/pause.py). Reads go
through ``ops/inspector.py`` and changes through ``ops/operations.py``. Every change is a POST that first shows a confirmation
page (the count and a sample), is CSRF-protected, and is written to the
admin log. Bulk runs do about a second of work per request and then show
their progress, continuing by themselves.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from django_redisq.admin.cancel import cancel_view
from django_redisq.admin.common import LIST_STATES, dead_letters_url, schedules_url
from django_redisq.admin.dead import action_view as dead_action_view
from django_redisq.admin.dead import dead_filter, int_param, top_param
from django_redisq.admin.display import chart, duration, percentile_time
from django_redisq.admin.edit import edit_form, edit_view
from django_redisq.admin.pause import queue_action_view
from django_redisq.admin.schedules import schedule_action_view, schedules_view
from django_redisq.admin.steps import clear_step_view, steps_shown
from django_redisq.admin.topics import topic_rewind_view, topics_view
from django_redisq.admin.workflow import workflow_view, workflows_view
from django_redisq.exceptions import RedisError, RedisUnavailable
from django_redisq.models import DeadLetter
from django_redisq.ops.inspector import Inspector, Pagination, UnknownQueue, WorkerInfo, backend_aliases
from django_redisq.ops.workflows import workflow_of
from django_redisq.settings.read import get_options


@admin.register(DeadLetter)
class DeadLetterAdmin(admin.ModelAdmin):
    list_per_page = 50

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # deleting dead letters is a "change" of the queue, checked in action_view

    def get_urls(self) -> list[URLPattern]:
        name = "django_redisq_deadletter"

        def wrap(view: Any) -> Any:
            return self.admin_site.admin_view(self.redis_guard(view))

        return [
            path("", wrap(self.changelist_view), name=f"{name}_changelist"),
            path("queues/", wrap(self.queues_view), name=f"{name}_queues"),
            path("queues/action/", wrap(self.queue_action_view), name=f"{name}_queue_action"),
            path("tasks/<str:state>/", wrap(self.tasks_view), name=f"{name}_tasks"),
            path("task/<str:alias>/<str:queue>/<str:task_id>/", wrap(self.detail_view), name=f"{name}_detail"),
            path("task/<str:alias>/<str:queue>/<str:task_id>/edit/", wrap(self.edit_view), name=f"{name}_edit"),
            path("action/", wrap(self.action_view), name=f"{name}_action"),
            path("cancel/", wrap(self.cancel_view), name=f"{name}_cancel"),
            path("step/clear/", wrap(self.clear_step_view), name=f"{name}_clear_step"),  # durable steps (admin/steps.py)
            path("schedules/", wrap(self.schedules_view), name=f"{name}_schedules"),
            path("schedules/action/", wrap(self.schedule_action_view), name=f"{name}_schedule_action"),
            path("workflow/<str:alias>/<str:workflow_id>/", wrap(self.workflow_view), name=f"{name}_workflow"),
            path("topics/", wrap(self.topics_view), name=f"{name}_topics"),  # events (admin/topics.py)
            path("topics/rewind/", wrap(self.topic_rewind_view), name=f"{name}_topic_rewind"),
            path("<path:object_id>/change/", wrap(self.log_link_view), name=f"{name}_change"),
        ]

    # -- helpers ---------------------------------------------------------

    def redis_guard(self, view: Any) -> Any:
        """Render Redis being down as an admin page (503) that says so, not a server error."""

        @functools.wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                response = view(request, *args, **kwargs)
                if isinstance(response, TemplateResponse):
                    response.render()  # so an error while rendering is caught here too
                return response
            except (RedisError, RedisUnavailable) as exc:
                try:
                    where = self.inspector_for(request.GET.get("backend")).where
                except Exception:  # noqa: BLE001 - an unknown alias: say less, still no 500
                    where = "Redis"
                context = self.page_context(request, "Redis unavailable", error=f"{where}: {type(exc).__name__}")
                response = self.render_page(request, "unavailable.html", context)
                response.status_code = 503
                return response

        return guarded

    def page_context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request), "opts": self.model._meta, "title": title,
            "has_change_permission": self.has_change_permission(request), "aliases": backend_aliases(), **extra,
        }

    def render_page(self, request: HttpRequest, template: str, context: dict[str, Any]) -> TemplateResponse:
        return TemplateResponse(request, f"admin/django_redisq/deadletter/{template}", context)

    def _require_view(self, request: HttpRequest) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied

    def inspector_for(self, alias: str | None) -> Inspector:
        aliases = backend_aliases()
        if not aliases:
            raise Http404("TASKS has no django_redisq backend")
        alias = alias or aliases[0]
        if alias not in aliases:
            raise Http404(f"TASKS has no django_redisq backend {alias!r}")
        return Inspector(get_options(alias))

    def log_ids(self, request: HttpRequest, ids: list[str], flag: int, message: str) -> None:
        user_id = request.user.pk
        assert user_id is not None  # admin_view lets only logged-in staff through
        LogEntry.objects.log_actions(user_id, [DeadLetter(id=i) for i in ids], flag, message)

    # -- pages -----------------------------------------------------------

    def queues_view(self, request: HttpRequest) -> TemplateResponse:
        self._require_view(request)
        backends = []
        for alias in backend_aliases():
            stats = Inspector(get_options(alias)).stats()
            workers: dict[str, WorkerInfo] = {}
            for s in stats:
                for w in s.workers:  # a worker serving several queues is listed once
                    if w.name in workers:
                        workers[w.name].holding += w.holding
                    else:
                        workers[w.name] = w
            rows = [(s, chart(s.series), duration(s.oldest_pending_age), "—" if s.failure_rate is None else f"{s.failure_rate:.1%}")
                    for s in stats]
            slow = [(s.queue, t, percentile_time(t.p50), percentile_time(t.p95)) for s in stats for t in s.slowest]
            limits = [(s.queue, limit, "") for s in stats for limit in s.limits] + [(s.queue, None, s.rate_limit) for s in stats if s.rate_limit]
            backends.append((alias, rows, sorted(workers.values(), key=lambda w: w.name), slow, limits))
        return self.render_page(request, "queues.html", self.page_context(request, "Queues", backends=backends))

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        self._require_view(request)
        ins = self.inspector_for(request.GET.get("backend"))
        queue = request.GET.get("queue") or ins.queues[0]
        if queue not in ins.queues:
            messages.error(request, f"Queue {queue!r} is not in TASKS[{ins.options.alias!r}]['QUEUES'] any more.")
            return HttpResponseRedirect(reverse("admin:django_redisq_deadletter_changelist"))
        flt, top = dead_filter(request.GET), top_param(request.GET)
        before = request.GET.get("before")
        page = ins.dead_page(queue, flt, start=int_param(request.GET.get("start"), 0), per_page=self.list_per_page,
                             top=top, before=int_param(before, 0) if before is not None else None)
        tasks, excs = ins.facets(queue)
        context = self.page_context(
            request, "Dead letters", alias=ins.options.alias, queue=queue, queues=ins.dead_counts(), flt=flt,
            page=page, pages=self._page_links(page), task_facets=tasks.most_common(15), exc_facets=excs.most_common(15),
            targets=[q for q in ins.queues if q != queue], **(extra_context or {}),
        )
        return self.render_page(request, "change_list.html", context)

    def _page_links(self, page: Pagination) -> list[tuple[Any, int | None]]:
        return [(n, (n - 1) * page.per_page if isinstance(n, int) else None) for n in page.page_range()]

    def tasks_view(self, request: HttpRequest, state: str) -> TemplateResponse:
        self._require_view(request)
        if state not in LIST_STATES:
            raise Http404(f"no list of {state!r} tasks")
        ins = self.inspector_for(request.GET.get("backend"))
        queue = request.GET.get("queue") or ins.queues[0]
        if queue not in ins.queues:
            raise Http404(f"queue {queue!r} is not configured")
        page: Pagination = getattr(ins, f"{state}_page")(queue, int_param(request.GET.get("p"), 1, low=1), self.list_per_page)
        context = self.page_context(request, f"{state.capitalize()} tasks", alias=ins.options.alias, queue=queue,
                                queues=ins.queues, state=state, page=page)
        return self.render_page(request, "tasks.html", context)

    def detail_view(self, request: HttpRequest, alias: str, queue: str, task_id: str, form: Any = None) -> TemplateResponse:
        """One task; a dead letter with readable arguments also gets the edit-then-replay form (``form``: one with errors)."""
        self._require_view(request)
        ins = self.inspector_for(alias)
        try:
            detail = ins.task(queue, task_id)
        except UnknownQueue:
            raise Http404(f"queue {queue!r} is not configured") from None
        if detail is None:
            raise Http404(f"no task {task_id!r} in queue {queue!r}")
        context = self.page_context(
            request, "Dead letter" if detail.dead_score else f"{detail.row.state.capitalize() or 'Unknown'} task",
            alias=alias, queue=queue, detail=detail,
            args_json=json.dumps(detail.args, indent=2, ensure_ascii=False, sort_keys=True),
            kwargs_json=json.dumps(detail.kwargs, indent=2, ensure_ascii=False, sort_keys=True),
            targets=[q for q in ins.queues if q != queue],
            workers=list(Counter(detail.workers).items()),  # one per delivery: shown once each, with a count
            workflow=workflow_of(detail.row.id),  # a workflow step links to its workflow's page (admin/workflow.py)
            steps=steps_shown(ins, queue, task_id),  # a durable task's recorded steps (admin/steps.py)
        )
        if detail.dead_score and not detail.message_error and self.has_edit_permission(request):
            context["edit_form"] = form or edit_form(detail, ins.options.max_message_bytes)
        return self.render_page(request, "detail.html", context)

    def has_edit_permission(self, request: HttpRequest) -> bool:
        """Editing runs a task with arguments of the editor's choice: its own permission, beyond "change" (models.py)."""
        return bool(request.user.has_perm("django_redisq.edit_deadletter"))

    def edit_view(self, request: HttpRequest, alias: str, queue: str, task_id: str) -> HttpResponse:
        """Edit a dead letter's arguments, then replay it (admin/edit.py)."""
        return edit_view(self, request, alias, queue, task_id)

    def workflow_view(self, request: HttpRequest, alias: str, workflow_id: str) -> HttpResponse:
        """One workflow's steps (admin/workflow.py)."""
        return workflow_view(self, request, alias, workflow_id)

    def workflows_view(self, request: HttpRequest) -> TemplateResponse:
        """The newest workflows, a page at a time (admin/workflow.py)."""
        return workflows_view(self, request)

    def clear_step_view(self, request: HttpRequest) -> HttpResponse:
        """Forget a durable task's recorded step (admin/steps.py)."""
        return clear_step_view(self, request)

    def cancel_view(self, request: HttpRequest) -> HttpResponse:
        """Cancel tasks selected on a pending, scheduled or running list (admin/cancel.py)."""
        return cancel_view(self, request)

    def topics_view(self, request: HttpRequest) -> TemplateResponse:
        """Events: every subscription's lag and drops (admin/topics.py)."""
        return topics_view(self, request, self.has_view_permission(request))

    def topic_rewind_view(self, request: HttpRequest) -> HttpResponse:
        return topic_rewind_view(self, request)

    def queue_action_view(self, request: HttpRequest) -> HttpResponse:
        """Pause or resume a queue from the Queues page (admin/pause.py)."""
        return queue_action_view(self, request)

    def log_link_view(self, request: HttpRequest, object_id: str) -> HttpResponseRedirect:
        """Where an admin-log entry links: the task, or the queue's dead letters; 404 for an id we never wrote."""
        self._require_view(request)
        parts = unquote(object_id).split("/")
        if len(parts) not in (2, 3) or not all(parts):  # an empty part names nothing (and cannot be reversed)
            raise Http404("not a dead letter reference")
        if len(parts) == 2 and parts[1].startswith("schedule:"):
            return HttpResponseRedirect(schedules_url(parts[0]))
        if len(parts) == 2 and parts[1].startswith("queue:"):
            return HttpResponseRedirect(reverse("admin:django_redisq_queue_changelist"))
        if len(parts) == 3:
            return HttpResponseRedirect(reverse("admin:django_redisq_deadletter_detail", args=parts))
        return HttpResponseRedirect(dead_letters_url(*parts))


    # -- changes and the schedules (admin/dead.py, admin/schedules.py) ----

    def action_view(self, request: HttpRequest) -> HttpResponse:
        """Replay or delete dead letters (admin/dead.py)."""
        return dead_action_view(self, request)

    def schedules_view(self, request: HttpRequest) -> TemplateResponse:
        return schedules_view(self, request)

    def schedule_action_view(self, request: HttpRequest) -> HttpResponse:
        """Pause, resume or run now one schedule (admin/schedules.py)."""
        return schedule_action_view(self, request)
