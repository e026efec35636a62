"""``{% csp_nonce_attr %}`` on every Django we support.

Django 6 renders a CSP nonce attribute with the built-in ``csp_nonce_attr``
tag, and our admin templates use it so they work under a strict
Content-Security-Policy. Django 5.2 has neither the tag nor a CSP nonce, so
there the tag renders nothing. Templates ``{% load redisq_compat %}`` to get
whichever applies; on Django 6 it is Django's own behaviour.
"""

from __future__ import annotations

from typing import Any

from django import template

register = template.Library()

try:
    from django.utils.csp import nonce_attr
except ImportError:  # Django 5.2: no CSP support, so no nonce to render

    def nonce_attr(context: Any, media: Any = None) -> Any:  # type: ignore[misc]
        return media.render() if media else ""


@register.simple_tag(takes_context=True)
def csp_nonce_attr(context: Any, media: Any = None) -> Any:
    return nonce_attr(context, media)  # safe HTML (format_html), never escaped again
