"""The action of the admin's pending, scheduled and running task lists: cancel the selected tasks.

A POST with a confirmation page first (the count and a sample), CSRF-protected
by the admin site, allowed with the "change dead letter" permission, and
written to the admin log, like the dead letters' replay and delete. Waiting
tasks are dead-lettered at once (reason ``cancelled``); running ones get a
request their worker acts on within about a second (``Broker.cancel``).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from django.contrib import messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect, QueryDict
from django.urls import reverse
from django.utils.http import urlencode

from .operations import TASK_ID_RE, Operations

if TYPE_CHECKING:
    from .admin import DeadLetterAdmin
    from .inspect import Inspector

A = TypeVar("A")

LIST_STATES = ("pending", "scheduled", "running")
MAX_SELECTED = 1000
SAMPLE = 10


def tasks_url(alias: str, queue: str, state: str) -> str:
    return reverse("admin:django_redisq_deadletter_tasks", args=[state]) + "?" + urlencode({"backend": alias, "queue": queue})


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def change_post(view: Callable[[A, HttpRequest, QueryDict, Inspector], HttpResponse]) -> Callable[[A, HttpRequest], HttpResponse]:
    """Make ``view(model_admin, request, post, inspector)`` a change: POST only, with the change permission.

    Every change of this admin starts the same way (the dead letters' actions, cancelling, pausing a queue);
    the view gets the POST data and the inspector of the backend it names.
    """
    @functools.wraps(view)
    def checked(model_admin: Any, request: HttpRequest) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not model_admin.has_change_permission(request):
            raise PermissionDenied
        return view(model_admin, request, request.POST, model_admin._inspector(request.POST.get("backend")))

    return checked


@change_post
def cancel_view(model_admin: DeadLetterAdmin, request: HttpRequest, post: QueryDict, ins: Inspector) -> HttpResponse:
    """Cancel the tasks selected on a task list: confirm, then cancel, log and report what became of each."""
    alias, queue, state = ins.options.alias, post.get("queue", ""), post.get("state", "")
    if queue not in ins.queues or state not in LIST_STATES:
        messages.error(request, f"Cannot cancel tasks of queue {queue[:100]!r} from the {state[:40]!r} list: no such list.")
        return HttpResponseRedirect(reverse("admin:django_redisq_deadletter_queues"))
    back = tasks_url(alias, queue, state)
    ids = list(dict.fromkeys(i for i in post.getlist("ids") if TASK_ID_RE.match(i)))[:MAX_SELECTED]
    if not ids:
        messages.warning(request, "No tasks were selected; nothing was cancelled.")
        return HttpResponseRedirect(back)
    if post.get("confirm") != "yes":
        fields = [("backend", alias), ("queue", queue), ("state", state), *(("ids", i) for i in ids), ("confirm", "yes")]
        context = model_admin._context(request, "Cancel tasks?", alias=alias, queue=queue, state=state, count=len(ids),
                                       sample=ins.rows(queue, ids[:SAMPLE]), fields=fields, back=back)
        return model_admin._render(request, "cancel_confirm.html", context)
    outcomes = Operations(ins).cancel(ids, f"admin:{request.user.get_username()}", queue)
    for outcome, note in (("cancelled", "Cancelled task: dead-lettered with reason cancelled"),
                          ("requested", "Cancelled running task: its worker was asked to stop it")):
        chosen = [i for i, o in outcomes.items() if o == outcome]
        if chosen:
            model_admin._log(request, [f"{alias}/{queue}/{i}" for i in chosen], CHANGE, f"{note} (queue {queue})")
    counts = Counter(outcomes.values())
    if counts["cancelled"]:
        messages.success(request, f"Cancelled {_plural(counts['cancelled'], 'task', 'tasks')}: now dead letters with reason “cancelled”.")
    if counts["requested"]:
        messages.success(request, f"Asked the workers to stop {_plural(counts['requested'], 'running task', 'running tasks')}: within "
                                  "about a second they show as dead letters with reason “cancelled”.")
    if counts["finished"]:
        messages.warning(request, f"{_plural(counts['finished'], 'task had', 'tasks had')} already finished; nothing changed.")
    if counts["missing"]:
        messages.warning(request, f"{_plural(counts['missing'], 'task was', 'tasks were')} not found (result expired?); nothing changed.")
    return HttpResponseRedirect(back)
