"""The action of the admin's pending, scheduled and running task lists: cancel the selected tasks.

A POST with a confirmation page first (the count and a sample), CSRF-protected
by the admin site, allowed with the "change dead letter" permission, and
written to the admin log, like the dead letters' replay and delete. Waiting
tasks are dead-lettered at once (reason ``cancelled``); running ones get a
request their worker acts on within about a second (``broker.operator.cancel``).
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.admin.models import CHANGE
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.urls import reverse

from django_redisq.admin.common import LIST_STATES, MAX_SELECTED, SAMPLE, AdminPage, change_post, plural, tasks_url
from django_redisq.ops.operations import TASK_ID_RE, Operations

if TYPE_CHECKING:
    from django_redisq.ops.inspector import Inspector


@change_post
def cancel_view(model_admin: AdminPage, request: HttpRequest, post: QueryDict, ins: Inspector) -> HttpResponse:
    """Cancel the tasks selected on a task list: confirm, then cancel, log and report what became of each."""
    alias, queue, state = ins.options.alias, post.get("queue", ""), post.get("state", "")
    if queue not in ins.queues or state not in LIST_STATES:
        messages.error(request, f"Cannot cancel tasks of queue {queue[:100]!r} from the {state[:40]!r} list: no such list.")
        return HttpResponseRedirect(reverse("admin:django_redisq_queue_changelist"))
    back = tasks_url(alias, queue, state)
    ids = list(dict.fromkeys(i for i in post.getlist("ids") if TASK_ID_RE.match(i)))[:MAX_SELECTED]
    if not ids:
        messages.warning(request, "No tasks were selected; nothing was cancelled.")
        return HttpResponseRedirect(back)
    if post.get("confirm") != "yes":
        fields = [("backend", alias), ("queue", queue), ("state", state), *(("ids", i) for i in ids), ("confirm", "yes")]
        context = model_admin.page_context(request, "Cancel tasks?", alias=alias, queue=queue, state=state, count=len(ids),
                                       sample=ins.rows(queue, ids[:SAMPLE]), fields=fields, back=back)
        return model_admin.render_page(request, "cancel_confirm.html", context)
    outcomes = Operations(ins).cancel(ids, f"admin:{request.user.get_username()}", queue)
    for outcome, note in (("cancelled", "Cancelled task: dead-lettered with reason cancelled"),
                          ("requested", "Cancelled running task: its worker was asked to stop it")):
        chosen = [i for i, o in outcomes.items() if o == outcome]
        if chosen:
            model_admin.log_ids(request, [f"{alias}/{queue}/{i}" for i in chosen], CHANGE, f"{note} (queue {queue})")
    counts = Counter(outcomes.values())
    if counts["cancelled"]:
        messages.success(request, f"Cancelled {plural(counts['cancelled'], 'task', 'tasks')}: now dead letters with reason “cancelled”.")
    if counts["requested"]:
        messages.success(request, f"Asked the workers to stop {plural(counts['requested'], 'running task', 'running tasks')}: within "
                                  "about a second they show as dead letters with reason “cancelled”.")
    if counts["finished"]:
        messages.warning(request, f"{plural(counts['finished'], 'task had', 'tasks had')} already finished; nothing changed.")
    if counts["missing"]:
        messages.warning(request, f"{plural(counts['missing'], 'task was', 'tasks were')} not found (result expired?); nothing changed.")
    return HttpResponseRedirect(back)
