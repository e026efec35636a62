"""``django_redisq.views.metrics``: the fleet's Prometheus metrics, for the user's ``urls.py``.

Open by default, like any view the user routes: protect it as the site
requires. Two ways (both in the Monitoring guide, docs/howto/monitoring.md):

- staff only: ``path("metrics/", staff_member_required(views.metrics))``, for
  a Prometheus that logs in, or a look from a browser;
- a token, the usual way for a scraper: ``path("metrics/",
  views.token_required(views.metrics, setting="REDISQ_METRICS_TOKEN"))`` and,
  in the scrape config, ``authorization: {credentials: <the token>}`` (sent as
  ``Authorization: Bearer <token>``).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from django_redisq.ops.metrics import exposition, select_backends

View = Callable[..., HttpResponse]


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Every django_redisq backend's queues; ``?backend=ALIAS`` (repeatable) narrows it.

    Each alias is read once however often it is repeated; an unknown one, or
    more than ``ops.metrics.MAX_BACKENDS`` distinct ones, is a 400 with one line
    of text.
    """
    try:
        aliases = select_backends(request.GET.getlist("backend"))
    except ValueError as exc:
        return HttpResponse(f"{exc}\n", status=400, content_type="text/plain; charset=utf-8")
    body, content_type = exposition(aliases)
    return HttpResponse(body, content_type=content_type)


def token_required(view: View, *, setting: str = "REDISQ_METRICS_TOKEN", token: str | None = None) -> View:
    """``view`` answering only requests with ``Authorization: Bearer <token>`` (401 otherwise).

    The token is ``token`` if given, else read from ``settings.<setting>`` on
    each request (so tests and rotations need no restart). Compared in
    constant time. With no token configured every request is refused: a
    missing setting never opens the view.
    """

    @wraps(view)
    def guarded(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        expected = token if token is not None else getattr(settings, setting, "")
        if not isinstance(expected, str):
            raise ImproperlyConfigured(f"settings.{setting} must be a string")
        given = request.headers.get("Authorization", "")
        scheme, _, value = given.partition(" ")
        if not expected or scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), expected.encode()):
            response = HttpResponse("a bearer token is required\n", status=401, content_type="text/plain")
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
        return view(request, *args, **kwargs)

    return guarded
