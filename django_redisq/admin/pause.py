"""The Queues page's action: pause or resume a queue.

A POST with a confirmation page first, CSRF-protected by the admin site,
allowed with the "change dead letter" permission (as every change in this
admin), and written to the admin log. The change is one script call
(``QueueOperations``); workers see it within a second (worker/fetching/pausing.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.admin.models import CHANGE
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.urls import reverse

from django_redisq.admin.common import AdminPage, change_post
from django_redisq.ops.operations import PAUSE, RESUME, QueueOperations

if TYPE_CHECKING:
    from django_redisq.ops.inspector import Inspector

QUEUE_ACTIONS = (PAUSE, RESUME)


@change_post
def queue_action_view(model_admin: AdminPage, request: HttpRequest, post: QueryDict, ins: Inspector) -> HttpResponse:
    """Pause or resume one queue: confirm, then change, log and report."""
    alias, queue, action = ins.options.alias, post.get("queue", ""), post.get("action", "")
    back = reverse("admin:django_redisq_queue_changelist")
    if queue not in ins.queues or action not in QUEUE_ACTIONS:
        messages.error(request, f"Cannot {action[:40]!r} queue {queue[:100]!r}: expected pause or resume of a configured queue.")
        return HttpResponseRedirect(back)
    if post.get("confirm") != "yes":
        stats = next(s for s in ins.figures() if s.queue == queue)
        verb = "Pause" if action == PAUSE else "Resume"
        context = model_admin.page_context(request, f"{verb} queue {queue}?", alias=alias, queue=queue, action=action, verb=verb,
                                       stats=stats, back=back, fields=[("backend", alias), ("queue", queue), ("action", action)])
        return model_admin.render_page(request, "queue_confirm.html", context)
    change = QueueOperations(ins).act(action, queue, f"admin:{request.user.get_username()}")
    if not change.changed:
        messages.warning(request, f"Queue {queue} was {'paused already' if action == PAUSE else 'not paused'}; nothing changed.")
        return HttpResponseRedirect(back)
    past = "Paused" if action == PAUSE else "Resumed"
    model_admin.log_ids(request, [f"{alias}/queue:{queue}"], CHANGE, f"{past} queue {queue}")
    if action == PAUSE:
        messages.success(request, f"Paused queue {queue}: within a second workers start none of its tasks (running ones finish, "
                                  "fetched ones go back to pending); enqueues still succeed.")
    else:
        messages.success(request, f"Resumed queue {queue}: workers serve it again within a second.")
    return HttpResponseRedirect(back)
