"""The dead letters' actions: replay or delete the selected ones, or every one a filter matches, in slices.

A POST that first shows a confirmation page (the count and a sample), then
changes and writes the admin log. "Every one that matches" works about a
second per request (``SLICE_SECONDS``) and shows its progress, continuing by
itself; the confirmation fixes the snapshot (``top``) that the count and the
run share.
"""

from __future__ import annotations

import re
import time
from typing import Any, NamedTuple

from django.contrib import messages
from django.contrib.admin.models import CHANGE, DELETION
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.template.response import TemplateResponse
from django.urls import reverse

from django_redisq.admin.common import MAX_SELECTED, SAMPLE, AdminPage, change_post, dead_letters_url
from django_redisq.ops.inspector import DeadFilter, Inspector, UnknownQueue
from django_redisq.ops.operations import DELETE, REPLAY, TASK_ID_RE, Operations, Progress

TOP_RE = re.compile(r"^\d{1,17}$")
SLICE_SECONDS = 1.0  # work one request does on a bulk action before it shows progress
PAST = {REPLAY: "Replayed", DELETE: "Deleted"}


def int_param(value: Any, default: int, low: int = 0, high: int = 10**9) -> int:
    """A page's integer parameter, clamped to ``[low, high]``; ``default`` when it is not a number."""
    try:
        return max(low, min(high, int(value)))
    except (TypeError, ValueError):
        return default


def dead_filter(params: QueryDict) -> DeadFilter:
    """The dead letters' filter a page or a POST names (each part cut to 200 characters)."""
    return DeadFilter(params.get("task", "")[:200], params.get("exc", "")[:200], params.get("q", "")[:200])


def top_param(params: QueryDict) -> str:
    """The snapshot a page of dead letters was read at: a Redis time in ms, or "" for none (a bad one is dropped)."""
    top = params.get("top", "")
    return top if TOP_RE.match(top) else ""


@change_post
def action_view(page: AdminPage, request: HttpRequest, post: QueryDict, ins: Inspector) -> HttpResponse:
    """Replay (maybe into another queue) or delete dead letters: the selected ones, or all that match (``scope=all``)."""
    queue, action, to = post.get("queue", ""), post.get("action", ""), post.get("to") or None
    ops = Operations(ins)
    try:
        ops.check(action, queue, to)
    except (UnknownQueue, ValueError) as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(reverse("admin:django_redisq_deadletter_changelist"))
    if post.get("scope") == "all":
        return _act_all(page, request, ops, action, queue, to)
    ids = [i for i in post.getlist("ids") if TASK_ID_RE.match(i)][:MAX_SELECTED]
    present = ins.present_dead(queue, ids)
    back = dead_letters_url(ins.options.alias, queue)
    if not present:
        messages.warning(request, "None of the selected tasks is in this queue's dead letters (any more).")
        return HttpResponseRedirect(back)
    if post.get("confirm") != "yes":
        return _confirm(page, request, ins, Ask(action, queue, to), count=len(present),
                        sample=ins.rows(queue, present[:SAMPLE]), hidden={"ids": present, "scope": "selected"})
    done, skipped = ops.act(action, queue, present, to)
    where = f" into queue {to}" if to else ""
    now_in = to if action == REPLAY and to else queue  # where the log entry's link finds the task
    page.log_ids(request, [f"{ins.options.alias}/{now_in}/{i}" for i in present],
                 CHANGE if action == REPLAY else DELETION, f"{PAST[action]} dead letter{where} (from queue {queue})")
    _report(request, action, done, skipped, to)
    return HttpResponseRedirect(back)


class Ask(NamedTuple):
    """What a confirmation page asks: ``action`` on dead letters of ``queue`` (a replay maybe ``to`` another)."""

    action: str
    queue: str
    to: str | None


def _act_all(page: AdminPage, request: HttpRequest, ops: Operations, action: str, queue: str, to: str | None) -> HttpResponse:
    post, ins, ask = request.POST, ops.inspector, Ask(action, queue, to)
    flt, top = dead_filter(post), top_param(post)
    if post.get("confirm") != "yes":
        first = ins.dead_page(queue, flt, per_page=SAMPLE, top=top)  # fixes the snapshot the count and the run use
        total = ins.count_dead(queue, flt, first.top)
        return _confirm(page, request, ins, ask, count=total, sample=first.items, flt=flt,
                        hidden={"scope": "all", "top": first.top, "total": total})
    progress = Progress(total=int_param(post.get("total"), 0), done=int_param(post.get("done"), 0),
                        skipped=int_param(post.get("skipped"), 0), pos=int_param(post.get("pos"), 0), top=top)
    before = progress.done
    ops.act_matching(action, queue, flt, progress, to, deadline=time.monotonic() + SLICE_SECONDS)
    described = ", ".join(f"{k}={v!r}" for k, v in (("task", flt.task), ("exception", flt.exc), ("search", flt.search)) if v)
    where = f" into queue {to}" if to else ""
    page.log_ids(request, [f"{ins.options.alias}/{queue}"], CHANGE if action == REPLAY else DELETION,
                 f"{PAST[action]} {progress.done - before} dead letters{where} of queue {queue}"
                 + (f" matching {described}" if described else ""))
    if progress.finished:
        _report(request, action, progress.done, progress.skipped, to)
        return HttpResponseRedirect(dead_letters_url(ins.options.alias, queue))
    return _confirm(page, request, ins, ask, count=progress.total, sample=[], flt=flt, progress=progress,
                    hidden={"scope": "all", "top": progress.top, "total": progress.total, "done": progress.done,
                            "skipped": progress.skipped, "pos": progress.pos, "confirm": "yes"})


def _confirm(page: AdminPage, request: HttpRequest, ins: Inspector, ask: Ask, *, count: int, sample: list[Any],
             hidden: dict[str, Any], flt: DeadFilter | None = None, progress: Progress | None = None) -> TemplateResponse:
    alias = ins.options.alias
    fields: list[tuple[str, Any]] = [("backend", alias), ("queue", ask.queue), ("action", ask.action)]
    if ask.to:
        fields.append(("to", ask.to))
    if flt:
        fields += [(k, v) for k, v in (("task", flt.task), ("exc", flt.exc), ("q", flt.search)) if v]
    for key, value in hidden.items():
        fields += [(key, v) for v in value] if isinstance(value, list) else [(key, value)]
    verb = "Replay" if ask.action == REPLAY else "Delete"
    context = page.page_context(
        request, f"{verb} dead letters?" if progress is None else f"{verb} in progress",
        alias=alias, queue=ask.queue, action=ask.action, verb=verb, to=ask.to, count=count, sample=sample,
        flt=flt, fields=fields, progress=progress, back=dead_letters_url(alias, ask.queue),
        percent=round(100 * progress.done / progress.total) if progress and progress.total else 0,
    )
    return page.render_page(request, "confirm.html", context)


def _report(request: HttpRequest, action: str, done: int, skipped: int, to: str | None) -> None:
    noun = "dead letter" if done == 1 else "dead letters"
    where = f" into queue {to}" if to else ""
    messages.success(request, f"{PAST[action]} {done:,} {noun}{where}.")
    if skipped:
        messages.warning(request, f"{skipped:,} could not be moved: their message does not decode, so it cannot be "
                                  "rewritten for another queue. Replay them in their own queue or delete them.")
