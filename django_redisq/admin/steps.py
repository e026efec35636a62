"""A durable task's recorded steps on its admin page, and clearing one so that its next run calls it again.

The page lists what ``redisq task ID`` lists (durable/journal.py records them: each step's name, when, how long
it took and its result's size; each sleep's and wait's due time), read by the inspector in one round trip.
Clearing is a change (POST, CSRF, the "change dead letter" permission, the admin log) and is refused while the
task runs, as the CLI's ``--clear-step`` is (``Operations.clear_step``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.admin.models import CHANGE
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.urls import reverse

from django_redisq.admin.common import AdminPage, change_post
from django_redisq.core.clock import ms_to_datetime
from django_redisq.ops.operations import TASK_ID_RE, Operations

if TYPE_CHECKING:
    from django_redisq.ops.inspector import Inspector


@dataclass(frozen=True)
class StepShown:
    """One row of the page's steps table."""

    index: int
    name: str
    kind: str  # step, sleep or wait
    at: datetime | None
    detail: str  # "took 12 ms, 34 bytes", "until <due>", "waiting until <due>"


def steps_shown(ins: Inspector, queue: str, task_id: str) -> list[StepShown]:
    """The recorded steps of a task, as the page shows them (none for a task that is not durable)."""
    rows = []
    for x in ins.steps(queue, task_id):
        if x.kind == "step":
            detail = f"took {x.took} ms, {x.size} bytes"
        elif x.kind == "sleep":
            detail = f"until {ms_to_datetime(x.due)}"
        else:
            detail = f"{x.state} until {ms_to_datetime(x.due)}" + (f" (event {x.event}, {x.took} ms)" if x.event else "")
        rows.append(StepShown(x.index, x.name, x.kind, ms_to_datetime(x.at), detail))
    return rows


@change_post
def clear_step_view(page: AdminPage, request: HttpRequest, post: QueryDict, ins: Inspector) -> HttpResponse:
    """Forget one recorded step of a task (its next run calls it again); back to the task's page with what happened."""
    queue, task_id, name = post.get("queue", ""), post.get("task_id", ""), post.get("step", "")
    if queue not in ins.queues or not TASK_ID_RE.match(task_id):
        messages.error(request, "Cannot clear a step: no such task.")
        return HttpResponseRedirect(reverse("admin:django_redisq_deadletter_changelist"))
    back = reverse("admin:django_redisq_deadletter_detail", args=[ins.options.alias, queue, task_id])
    if name not in {x.name for x in ins.steps(queue, task_id)}:
        messages.warning(request, f"Task {task_id} has no recorded step {name[:100]!r}; nothing changed.")
        return HttpResponseRedirect(back)
    try:
        Operations(ins).clear_step(queue, task_id, name)
    except ValueError as exc:  # it runs now: its worker may be recording steps
        messages.error(request, f"Step {name!r} was not cleared: {exc}")
        return HttpResponseRedirect(back)
    page.log_ids(request, [f"{ins.options.alias}/{queue}/{task_id}"], CHANGE, f"Cleared durable step {name!r} (queue {queue})")
    messages.success(request, f"Cleared step {name!r}: the task's next run calls it again.")
    return HttpResponseRedirect(back)
