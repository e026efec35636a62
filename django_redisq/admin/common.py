"""What every change view of the admin shares: the POST-and-permission guard, the page protocol, small helpers.

The views (cancel.py, dead.py, edit.py, pause.py, schedules.py)
take the admin that serves them as an ``AdminPage``: the few public methods they
need (a page's context, rendering, the admin log, the inspector of a backend),
not the ModelAdmin's internals.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, QueryDict
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode

if TYPE_CHECKING:
    from django_redisq.ops.inspector import Inspector


class AdminPage(Protocol):
    """What a change view needs of the admin that serves it."""

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool: ...

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool: ...

    def has_edit_permission(self, request: HttpRequest) -> bool:
        """Whether the user may edit a dead letter's arguments before its replay (``edit_deadletter``)."""

    def page_context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        """The admin's context for a page of ours: the site's, the title, the backends, ``extra``."""

    def render_page(self, request: HttpRequest, template: str, context: dict[str, Any]) -> TemplateResponse:
        """``template`` of admin/django_redisq/deadletter/ rendered with ``context``."""

    def inspector_for(self, alias: str | None) -> Inspector:
        """The inspector of backend ``alias`` (the first one for ``None``); 404 for one the settings do not name."""

    def log_ids(self, request: HttpRequest, ids: list[str], flag: int, message: str) -> None:
        """One admin log entry per task or queue id changed."""

    def detail_view(self, request: HttpRequest, alias: str, queue: str, task_id: str, form: Any = None) -> TemplateResponse:
        """One task's page (with ``form``'s errors when an edit did not validate)."""


A = TypeVar("A", bound=AdminPage)

LIST_STATES = ("pending", "scheduled", "running")
MAX_SELECTED = 1000
SAMPLE = 10


def tasks_url(alias: str, queue: str, state: str) -> str:
    return reverse(f"admin:django_redisq_{state}task_changelist") + "?" + urlencode({"backend": alias, "queue": queue})


def dead_letters_url(alias: str, queue: str, **params: str) -> str:
    """The dead letters' page of one queue, with the filter or page ``params`` that are set."""
    query = urlencode({"backend": alias, "queue": queue, **{k: v for k, v in params.items() if v}})
    return reverse("admin:django_redisq_deadletter_changelist") + "?" + query


def schedules_url(alias: str) -> str:
    return reverse("admin:django_redisq_schedule_changelist") + "?" + urlencode({"backend": alias})


def plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def change_post(view: Callable[[A, HttpRequest, QueryDict, Inspector], HttpResponse]) -> Callable[[A, HttpRequest], HttpResponse]:
    """Make ``view(model_admin, request, post, inspector)`` a change: POST only, with the change permission.

    Every change of this admin starts the same way (the dead letters' actions, cancelling, pausing a queue);
    the view gets the POST data and the inspector of the backend it names.
    """
    @functools.wraps(view)
    def checked(model_admin: A, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not model_admin.has_change_permission(request):
            raise PermissionDenied
        return view(model_admin, request, request.POST, model_admin.inspector_for(request.POST.get("backend")))

    return checked


