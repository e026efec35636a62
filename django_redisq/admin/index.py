"""The admin index lists every page of the app: Queues, Pending, Scheduled and Running tasks, Schedules, Topics, Workflows, Dead letters.

Django's index lists registered models only, so each page beyond the dead
letters has a proxy of ``DeadLetter`` (models.py: no table, no permissions of
its own) registered here with a ``PageAdmin``: its changelist URL
(``/admin/django_redisq/queue/``, ``.../pendingtask/``...) serves the page the
``DeadLetterAdmin`` renders, so the index entry and the sidebar link open it
and the sidebar marks it as the current one. Who may see it is decided by the
dead letters' "view" permission; nothing here can add, change or delete.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path

from django_redisq.models import DeadLetter, PendingTask, Queue, RunningTask, Schedule, ScheduledTask, Topic, Workflow


class PageAdmin(admin.ModelAdmin):
    """An index entry that opens one page of the dead letters' admin (``page(dead_letter_admin, request)``)."""

    def page(self, pages: Any, request: HttpRequest) -> HttpResponse:
        raise NotImplementedError

    def _pages(self) -> Any:
        return self.admin_site.get_model_admin(DeadLetter)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(self._pages().has_view_permission(request))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        def view(request: HttpRequest) -> HttpResponse:
            pages = self._pages()
            return pages.redis_guard(lambda req: self.page(pages, req))(request)

        return [path("", self.admin_site.admin_view(view), name=f"{self.opts.app_label}_{self.opts.model_name}_changelist")]


@admin.register(Queue)
class QueuePageAdmin(PageAdmin):
    def page(self, pages: Any, request: HttpRequest) -> HttpResponse:
        return pages.queues_view(request)  # type: ignore[no-any-return]


@admin.register(PendingTask)
class PendingPageAdmin(PageAdmin):
    def page(self, pages: Any, request: HttpRequest) -> HttpResponse:
        return pages.tasks_view(request, "pending")  # type: ignore[no-any-return]


@admin.register(ScheduledTask)
class ScheduledPageAdmin(PageAdmin):
    def page(self, pages: Any, request: HttpRequest) -> HttpResponse:
        return pages.tasks_view(request, "scheduled")  # type: ignore[no-any-return]


@admin.register(RunningTask)
class RunningPageAdmin(PageAdmin):
    def page(self, pages: Any, request: HttpRequest) -> HttpResponse:
        return pages.tasks_view(request, "running")  # type: ignore[no-any-return]


@admin.register(Schedule)
class SchedulePageAdmin(PageAdmin):
    def page(self, pages: Any, request: HttpRequest) -> HttpResponse:
        return pages.schedules_view(request)  # type: ignore[no-any-return]


@admin.register(Topic)
class TopicPageAdmin(PageAdmin):
    def page(self, pages: Any, request: HttpRequest) -> HttpResponse:
        return pages.topics_view(request)  # type: ignore[no-any-return]


@admin.register(Workflow)
class WorkflowPageAdmin(PageAdmin):
    def page(self, pages: Any, request: HttpRequest) -> HttpResponse:
        return pages.workflows_view(request)  # type: ignore[no-any-return]
