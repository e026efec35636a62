"""The Topics page: each subscription's lag, pending entries and drops; rewinding one (events).

Reads through ``ops.topics.TopicOps``. A rewind is a POST with a confirmation
page first, written to the admin log; it is one script call (topic_rewind.lua:
XGROUP SETID and the generation bump). It needs its own permission,
``rewind_topic``, besides "change dead letter" (as every change in this admin):
it runs the subscription's task again for every event the topic retains, more
than any other change here, so a role that triages dead letters does not get it
by default. Without it the form is not shown and the POST is refused (403).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import urlencode

from django_redisq.admin.common import AdminPage, change_post
from django_redisq.ops.inspector import backend_aliases
from django_redisq.ops.topics import BadRewindTarget, TopicOps, UnknownSubscription, at

if TYPE_CHECKING:
    from django_redisq.ops.inspector import Inspector

REWIND_PERMISSION = "django_redisq.rewind_topic"


def may_rewind(model_admin: AdminPage, request: HttpRequest) -> bool:
    """Whether the user may rewind a subscription: "change dead letter" and ``rewind_topic``."""
    return model_admin.has_change_permission(request) and bool(request.user.has_perm(REWIND_PERMISSION))


def topics_view(model_admin: AdminPage, request: HttpRequest, may_view: bool) -> TemplateResponse:
    """Every backend's subscriptions, by topic, with a rewind form each."""
    if not may_view:
        raise PermissionDenied
    backends = []
    for alias in backend_aliases():
        ops = TopicOps.for_alias(alias)
        rows = [(r, at(r.last_delivered)) for r in ops.rows()]
        backends.append((alias, rows))
    context = model_admin.page_context(request, "Topics", backends=backends, may_rewind=may_rewind(model_admin, request))
    return model_admin.render_page(request, "topics.html", context)


@change_post
def topic_rewind_view(model_admin: AdminPage, request: HttpRequest, post: QueryDict, ins: Inspector) -> HttpResponse:
    """Rewind one subscription: confirm (showing where to), then rewind, log and report."""
    if not may_rewind(model_admin, request):
        raise PermissionDenied
    alias, name, to = ins.options.alias, post.get("subscription", ""), post.get("to", "").strip() or "earliest"
    back = reverse("admin:django_redisq_topic_changelist") + "?" + urlencode({"backend": alias})
    ops = TopicOps(ins.options)
    try:
        sub = ops.find(name)
        target = ops.target(sub, to)
    except (UnknownSubscription, BadRewindTarget) as exc:
        messages.error(request, str(exc)[:300])
        return HttpResponseRedirect(back)
    if post.get("confirm") != "yes":
        row = next((r for r in ops.rows() if r.name == name), None)
        context = model_admin.page_context(request, f"Rewind subscription {name}?", alias=alias, sub=sub, row=row, to=to,
                                           target=target, back=back,
                                           fields=[("backend", alias), ("subscription", name), ("to", to)])
        return model_admin.render_page(request, "topic_confirm.html", context)
    try:
        generation, target = ops.rewind(name, to)
    except (UnknownSubscription, BadRewindTarget) as exc:
        messages.error(request, str(exc)[:300])
        return HttpResponseRedirect(back)
    model_admin.log_ids(request, [f"{alias}/subscription:{name}"], CHANGE, f"Rewound subscription {name} to {to}")
    messages.success(request, f"Rewound subscription {name}: the events of topic {sub.topic} after {target} are delivered "
                              f"again and become new tasks (generation {generation}).")
    return HttpResponseRedirect(back)
