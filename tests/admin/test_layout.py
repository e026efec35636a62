"""The admin's pages laid out like Django's own changelists, measured in headless Chromium at 1400 and 800 px.

For each page, through the page's own JavaScript: nothing overflows the
window sideways; the text of two neighbouring header cells never runs
together ("ATTEMPTSDIED"); a timestamp takes at most two lines; the Queues
table fits 1400 px without scrolling; at 800 px the dead-letter list leaves
its filter panel and search box visible and uncovered; breadcrumbs name the
queue. Screenshots of every page and width go to tests/artifacts/ (and, with
``REDISQ_DOCS_SCREENSHOTS=1``, the ones the docs show to docs/img/).
"""

from __future__ import annotations

import copy
import json
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from django_redisq import connection
from django_redisq.events.publish import publish
from tests import helpers
from tests.admin.test_browser import shot
from tests.events.conftest import THREE
from tests.seed import seed_dead
from tests.testapp import tasks
from tests.worker.test_scheduler import TASK

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (1400, 800)
GAP_PX = 8  # the least space between the texts of two header cells (Django's changelists leave 20)

MEASURE = """() => {
  const box = e => { const b = e.getBoundingClientRect(); return {l: b.left, r: b.right, t: b.top, b: b.bottom, w: b.width, h: b.height}; };
  const textBox = cell => {  // the union of the cell's text, not of its (padded) box
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    let l = Infinity, r = -Infinity, t = Infinity, b = -Infinity;
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (!n.textContent.trim()) continue;
      const range = document.createRange(); range.selectNodeContents(n);
      for (const x of range.getClientRects()) { l = Math.min(l, x.left); r = Math.max(r, x.right); t = Math.min(t, x.top); b = Math.max(b, x.bottom); }
    }
    return l === Infinity ? null : {l, r, t, b, text: cell.innerText.trim()};
  };
  const tables = [...document.querySelectorAll('#content-main table')].filter(t => t.offsetParent !== null).map(t => {
    const rows = [...t.querySelectorAll('thead tr')];
    const heads = rows.flatMap(row => [...row.children].map(textBox).filter(Boolean));
    const together = [];
    for (let i = 1; i < heads.length; i++) {
      const a = heads[i - 1], c = heads[i];
      const sameLine = a.t < c.b && c.t < a.b;
      if (sameLine && c.l - a.r < __GAP__) together.push([a.text, c.text, c.l - a.r]);
    }
    const scroller = t.closest('.results, .redisq-scroll') || t.parentElement;
    const clips = ['auto', 'scroll', 'hidden'].includes(getComputedStyle(scroller).overflowX);
    return {id: t.id, box: box(t), together, scroller: box(scroller), clips, scrolls: scroller.scrollWidth > scroller.clientWidth + 1,
            need: scroller.scrollWidth, room: scroller.clientWidth};
  });
  const times = [...document.querySelectorAll('#content-main td time, #content-main td .redisq-time')].map(e => {
    const style = getComputedStyle(e);
    const line = parseFloat(style.lineHeight) || 1.25 * parseFloat(style.fontSize);
    return {text: e.innerText, h: e.getBoundingClientRect().height, line, lines: e.getClientRects().length};
  });
  const el = s => {
    const e = document.querySelector(s);
    return e && {...box(e), visible: e.offsetParent !== null && getComputedStyle(e).visibility !== 'hidden'};
  };
  return {overflow: document.documentElement.scrollWidth - window.innerWidth, width: window.innerWidth, tables, times,
          filter: el('#changelist-filter'), search: el('#searchbar'), results: el('#changelist-form .results'),
          fields: [...document.querySelectorAll('#changelist-search input:not([type=hidden])')].map(box),
          breadcrumbs: document.querySelector('.breadcrumbs')?.innerText.trim()};
}""".replace("__GAP__", str(GAP_PX))


def overlap(a: dict, b: dict) -> bool:
    return a["l"] < b["r"] - 0.5 and b["l"] < a["r"] - 0.5 and a["t"] < b["b"] - 0.5 and b["t"] < a["b"] - 0.5


@pytest.fixture
def busy(r, broker):
    """Data that stresses the layout: long task paths, long errors, workers, timestamps in every list, schedules."""
    def row(i: int) -> tuple[str, str, str]:
        tasks_ = ("shop.tasks.send_order_confirmation_email", "warehouse.inventory.tasks.reconcile_stock_levels", "shop.tasks.charge")
        return (tasks_[i % 3], "requests.exceptions.ConnectionError" if i % 2 else "builtins.ValueError",
                f"order {i}: the payment gateway at https://payments.example.com/v2/charges refused the request "
                "because the card was declined by the issuing bank (insufficient funds)")
    dead = seed_dead(broker, "default", 12, row)
    seed_dead(broker, "emails", 2)
    for i in range(6):
        tasks.add.delay(i, i)
        tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(i, 1)
    for name in ("web-1.eu-west.example.internal.4711", "web-2.eu-west.example.internal.4712"):
        broker.heartbeat(["default", "emails", "low"], name, {})
        r.set(helpers.keys().worker_info(name), json.dumps({"host": name.rsplit(".", 1)[0], "pid": 4711, "pool": "threads",
                                                            "queues": ["default", "emails", "low"], "concurrency": 8}))
    helpers.seed_processing(r, "running-task-0001", "web-1.eu-west.example.internal.4711")
    r.set(helpers.keys("emails").paused, f"{helpers.redis_ms(r)}|admin:operations-lead")  # the longest state a queue shows
    entries = {"nightly-report": {"task": TASK, "cron": "0 3 * * *", "timezone": "Europe/Berlin", "kwargs": {"key": "n"}},
               "sync-stock": {"task": TASK, "every": 60, "kwargs": {"key": "s"}, "timezone": "UTC"}}
    tasks_setting = copy.deepcopy(settings.TASKS)
    tasks_setting["default"]["OPTIONS"].update(SCHEDULES=entries, SUBSCRIPTIONS=THREE)
    with override_settings(TASKS=tasks_setting):
        for i in range(5):
            publish("orders.placed", {"order": i})  # lag on the Topics page
        yield dead
    connection.reset()


def login(page) -> None:
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    page.goto("/admin/login/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")


PAGES = {  # name -> (URL name, query)
    "index": ("admin:index", ""),
    "queues": ("admin:django_redisq_queue_changelist", ""),
    "dead-letters": ("admin:django_redisq_deadletter_changelist", "?backend=default&queue=default"),
    "pending": ("admin:django_redisq_pendingtask_changelist", "?backend=default&queue=default"),
    "scheduled": ("admin:django_redisq_scheduledtask_changelist", "?backend=default&queue=default"),
    "running": ("admin:django_redisq_runningtask_changelist", "?backend=default&queue=default"),
    "schedules": ("admin:django_redisq_schedule_changelist", ""),
    "topics": ("admin:django_redisq_topic_changelist", ""),
}
DOCS_SHOTS = {("index", 1400), ("dead-letters", 800)}  # docs/howto/admin.md shows these


def test_every_page_is_laid_out_at_each_width_and_in_dark_mode(r, busy, page):
    """Each width (a new viewport, fresh page loads), then dark mode, in one browser session: each problem is named
    with its width or with dark mode."""
    login(page)
    problems: list[str] = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        problems += [f"{width}px: {p}" for p in laid_out(page, width, busy)]
    problems += [f"dark mode: {p}" for p in dark_mode(page)]
    assert not problems, "\n".join(problems)


def laid_out(page, width: int, busy: list[str]) -> list[str]:
    problems: list[str] = []
    urls = [(name, reverse(url_name) + query) for name, (url_name, query) in PAGES.items()]
    urls.append(("detail", reverse("admin:django_redisq_deadletter_detail", args=["default", "default", busy[0]])))
    for name, url in urls:
        page.goto(url)
        m = page.evaluate(MEASURE)
        shot(page, f"layout-{name}-{width}", docs=(name, width) in DOCS_SHOTS)
        if m["width"] != width:
            problems.append(f"{name}: measured in a {m['width']}px window")
        if m["overflow"] > 0:
            problems.append(f"{name}: the page is {m['overflow']}px wider than the {width}px window")
        for t in m["tables"]:
            problems += [f"{name} {t['id']}: header texts {a!r} and {b!r} run together ({gap:.1f}px apart)" for a, b, gap in t["together"]]
            visible_right = t["scroller"]["r"] if t["clips"] else t["box"]["r"]  # a wide table may scroll inside its box
            if visible_right > width:
                problems.append(f"{name} {t['id']}: the table ends at {visible_right:.0f}px, beyond the window")
        for tm in m["times"]:
            if tm["h"] > 2 * tm["line"] + 1:
                problems.append(f"{name}: the time {tm['text']!r} takes {tm['h']:.0f}px, more than two lines of {tm['line']:.0f}px")
        if name == "queues":
            queues = next(t for t in m["tables"] if t["id"] == "redisq-queues-default")
            if width == 1400 and queues["scrolls"]:
                problems.append(f"queues: the Queues table does not fit a 1400px window: it needs {queues['need']}px, has {queues['room']}px")
        if name == "dead-letters":
            f, s, res = m["filter"], m["search"], m["results"]
            if not (f and f["visible"] and f["w"] > 0 and f["l"] >= 0 and f["r"] <= width):
                problems.append(f"dead letters: the filter panel is not visible in the window: {f}")
            if not (s and s["visible"] and s["w"] >= 100 and s["l"] >= 0 and s["r"] <= width):
                problems.append(f"dead letters: the search box is hidden or squeezed: {s}")
            if f and s and overlap(f, s):
                problems.append(f"dead letters: the search box {s} overlaps the filter panel {f}")
            if f and res and overlap(f, res):
                problems.append(f"dead letters: the list {res} covers the filter panel {f}")
            problems += [f"dead letters: the search field {x} is under the filter panel" for x in m["fields"] if f and overlap(f, x)]
        if name in ("dead-letters", "pending", "scheduled", "running", "detail"):
            crumbs = m["breadcrumbs"] or ""
            if "queue default" not in crumbs.lower():
                problems.append(f"{name}: the breadcrumb {crumbs!r} does not name the queue")
    return problems


def dark_mode(page) -> list[str]:
    """With the system in dark mode the admin's own dark theme applies to our pages too: their text is light on dark."""
    page.emulate_media(color_scheme="dark")
    page.set_viewport_size({"width": 1400, "height": 900})
    problems: list[str] = []
    for name in ("queues", "dead-letters", "schedules"):
        url_name, query = PAGES[name]
        page.goto(reverse(url_name) + query)
        m = page.evaluate(MEASURE)
        shot(page, f"layout-{name}-dark")
        if not (m["overflow"] <= 0 and not any(t["together"] for t in m["tables"])):
            problems.append(f"{name}: {m['overflow']}px wider than the window, or header texts run together: {m['tables']}")
        colours = page.evaluate("""() => [...document.querySelectorAll('#content-main td, #content-main th')].slice(0, 40).map(c => {
            const rgb = s => s.match(/[\\d.]+/g).slice(0, 3).map(Number);
            let e = c, bg = 'rgba(0, 0, 0, 0)';
            while (e && /rgba\\(0, 0, 0, 0\\)|transparent/.test(bg)) { bg = getComputedStyle(e).backgroundColor; e = e.parentElement; }
            const lum = v => v.reduce((a, x) => a + x, 0) / 3;
            return [c.innerText.slice(0, 30), lum(rgb(getComputedStyle(c).color)), lum(rgb(bg))];
        })""")
        dark_on_dark = [c for c in colours if c[0].strip() and c[1] < c[2] + 60]
        if dark_on_dark:
            problems.append(f"{name}: dark text on a dark background: {dark_on_dark[:5]}")
    return problems
