"""The admin's wide pages fit a laptop's window: measured in headless Chromium at 1280 and 1366 px.

Schedules and Topics carry a form per row (Run now, Pause, Rewind); an
operator must see and reach them without scrolling sideways. For each page
and width, through the page's own JavaScript: the document is no wider than
the window, no table scrolls inside its box, and every button and field of
``#content-main`` lies wholly inside the window, with the navigation sidebar
closed (the default) and open.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_redisq.ops.inspector import Inspector
from django_redisq.ops.operations import PAUSE, RUN_NOW, ScheduleOperations
from django_redisq.settings.read import get_options
from tests.admin.test_browser import shot
from tests.admin.test_layout import busy, login  # noqa: F401 - busy is a fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ACTIONS = """() => {
  const doc = document.documentElement;
  const scrolls = [...document.querySelectorAll('#content-main .redisq-scroll, #content-main .results')]
    .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => [e.className, e.scrollWidth, e.clientWidth]);
  const out = [...document.querySelectorAll('#content-main input:not([type=hidden]), #content-main button, #content-main .button')]
    .filter(e => e.offsetParent !== null)
    .map(e => ({what: e.value || e.innerText || e.name, ...e.getBoundingClientRect().toJSON()}))
    .filter(b => b.left < 0 || b.right > window.innerWidth || b.width === 0);
  return {scroll: doc.scrollWidth - doc.clientWidth, scrolls, out};
}"""


VIEWPORTS = [(width, sidebar) for width in (1280, 1366) for sidebar in ("closed", "open")]


def test_row_actions_are_in_the_window_without_scrolling(r, busy, page):  # noqa: F811
    """Every width and sidebar state in one browser session (each a new viewport and fresh page loads): each
    problem is named with its viewport."""
    ops = ScheduleOperations(Inspector(get_options("default")))
    ops.act(RUN_NOW, "nightly-report", "admin:operations-lead")  # a last run and its state
    ops.act(PAUSE, "nightly-report", "admin:operations-lead")  # the widest state: paused since, by whom
    login(page)
    problems = []
    for width, sidebar in VIEWPORTS:
        page.set_viewport_size({"width": width, "height": 800})
        page.evaluate(f"localStorage.setItem('django.admin.navSidebarIsOpen', '{'true' if sidebar == 'open' else 'false'}')")
        at = f"{width}px, sidebar {sidebar}"
        for name in ("schedules", "topics"):
            page.goto(reverse(f"admin:django_redisq_{name[:-1]}_changelist"))
            assert page.evaluate("[innerWidth, document.getElementById('main').classList.contains('shifted')]") == [
                width, sidebar == "open"], f"{at}: the viewport or the sidebar state did not take"
            m = page.evaluate(ACTIONS)
            shot(page, f"fit-{name}-{width}-{sidebar}")
            if m["scroll"] > 0:
                problems.append(f"{at}: {name}: the page scrolls sideways by {m['scroll']}px")
            problems += [f"{at}: {name}: {cls} scrolls sideways ({need}px in {room}px)" for cls, need, room in m["scrolls"]]
            problems += [f"{at}: {name}: {b['what']!r} spans {b['left']:.0f}-{b['right']:.0f}px, outside the window" for b in m["out"]]
    assert not problems, "\n".join(problems)
