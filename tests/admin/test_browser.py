"""End to end in headless Chromium: a task fails for good, an operator finds it, replays it, it runs.

Debian's ``chromium`` is driven by Playwright (``executable_path``; downloaded
browsers are not available here). Skipped where /usr/bin/chromium is missing,
but failed when ``CI`` is set, so CI never skips it silently. Screenshots of
every step go to tests/artifacts/ (not committed); with
``REDISQ_DOCS_SCREENSHOTS=1`` the dead-letter list and detail shots, the
Schedules page, the edit form and the Queues page with the slowest tasks are
also written to docs/img/ for the documentation site (docs/howto/admin.md and others show them).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from django.contrib import admin as django_admin
from django.contrib.auth.models import User
from django.test import override_settings

from tests.helpers import drain, where_is
from tests.testapp import tasks

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
DOCS_IMG = ROOT / "docs" / "img"
ADMIN_STATIC = Path(django_admin.__file__).parent / "static"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _require_browser() -> None:
    reason = ""
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "the playwright package is missing (pip install playwright)"
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set but the browser test cannot run: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="module")
def live_server(request):
    """pytest-django's live server, started with a STATIC_URL.

    tests/settings.py sets none, and the static-files handler Django wraps a
    live server in breaks on every request without one. The admin's CSS is
    served to the browser below, straight from Django's own files.
    """
    from pytest_django.live_server_helper import LiveServer

    addr = request.config.getvalue("liveserver") or os.getenv("DJANGO_LIVE_TEST_SERVER_ADDRESS") or "localhost"
    with override_settings(STATIC_URL="/static/"):
        server = LiveServer(addr)
        yield server
        server.stop()


@pytest.fixture
def page(live_server, monkeypatch):
    _require_browser()
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the ORM calls stay outside it
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTIFACTS.mkdir(exist_ok=True)

    def serve_static(route) -> None:
        rel = re.sub(r"^.*?/static/", "", route.request.url.split("?")[0])
        target = (ADMIN_STATIC / rel).resolve()
        if ADMIN_STATIC in target.parents and target.is_file():
            route.fulfill(path=str(target))
        else:
            route.fulfill(status=404)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
        context = browser.new_context(viewport={"width": 1366, "height": 768}, base_url=live_server.url)
        context.route(re.compile(r".*/static/admin/.*"), serve_static)
        tab = context.new_page()
        tab.set_default_timeout(15_000)
        yield tab
        context.close()
        browser.close()


README_SHOTS = {"02-dead-letters"}
"""Shots the README shows (docs/img/admin-<name>.png): taken again on every run, so the README never shows an admin
older than the code (it once lacked the Topics page); the other docs' shots only with REDISQ_DOCS_SCREENSHOTS=1."""


def shot(page, name: str, docs: bool = False) -> None:
    page.screenshot(path=str(ARTIFACTS / f"browser-{name}.png"), full_page=True)
    if name in README_SHOTS or (docs and os.environ.get("REDISQ_DOCS_SCREENSHOTS")):
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(DOCS_IMG / f"admin-{name}.png"), full_page=True)


def test_operator_finds_replays_and_sees_a_dead_letter_run(r, page, make_worker):
    from playwright.sync_api import expect

    started = time.time()
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    # noise, then the one that matters: flaky fails 4 times (max_retries=3), so it is dead; a fifth run succeeds
    noise = [tasks.always_fails.delay(msg)
             for msg in ("SMTP server refused the connection", "<script>alert('not run')</script>", "timeout talking to the bank")]
    target = tasks.flaky.delay("browser-e2e", 4)
    # burst workers until all are dead: one leaves when nothing is pending, and a slow run can see a retry still
    # scheduled then (a fresh-clone CI did: flaky READY after one burst run)
    drain(make_worker, [*noise, target])
    assert tasks.flaky.get_result(target.id).status == "FAILED"
    rows = page.locator("#result_list tbody tr")
    content = page.locator("#content-main")

    # log in
    page.goto("/admin/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "correct horse")
    shot(page, "01-login")
    page.click("input[type=submit]")
    page.get_by_role("link", name="Dead letters").first.click()
    expect(rows).to_have_count(4)
    page.click("#toggle-nav-sidebar")  # more room for the tables (the admin remembers this per browser)
    expect(page.locator("#result_list")).to_contain_text("<script>alert('not run')</script>")  # shown as text
    assert page.viewport_size["width"] in (1280, 1366)  # the README's shot: a laptop's window
    tabs = page.locator(".object-tools a").all_inner_texts()
    assert [t.strip().lower() for t in tabs] == ["queues", "dead letters", "pending", "scheduled", "running", "schedules",
                                                  "topics", "workflows"], tabs  # every page of the admin, as the README shows
    shot(page, "02-dead-letters", docs=True)
    assert (DOCS_IMG / "admin-02-dead-letters.png").stat().st_mtime > started  # written by this run

    # find it by filtering on the task
    page.fill("input[name=task]", "flaky")
    page.click("#changelist-search input[type=submit]")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("flaky failure 4")
    shot(page, "03-filtered")

    # open it
    rows.first.get_by_role("link").first.click()
    expect(content).to_contain_text(target.id)
    expect(page.locator("#redisq-args")).to_have_text('[\n  "browser-e2e",\n  4\n]')
    expect(page.locator(".redisq-attempt")).to_have_count(4)
    shot(page, "04-detail", docs=True)

    # replay it, confirming
    page.click("#redisq-replay")
    expect(content).to_contain_text("Are you sure you want to replay 1 dead letter")
    shot(page, "05-confirm")
    page.click("#redisq-yes")
    expect(page.locator(".messagelist")).to_contain_text("Replayed 1 dead letter.")
    shot(page, "06-replayed")

    # a worker runs it; the operator sees it gone
    make_worker().run()
    assert tasks.flaky.get_result(target.id).return_value == "ok after 5"
    page.reload()
    expect(rows).to_have_count(3)
    expect(content).not_to_contain_text(target.id)
    page.locator(".object-tools").get_by_role("link", name="Queues").click()  # the tab: the sidebar has one too
    expect(page.locator("#redisq-queues-default")).to_contain_text("default")
    shot(page, "07-queues")


def test_operator_runs_pauses_and_resumes_a_schedule(r, page):
    """The Schedules page: a schedule firing every second on a live scheduler, run now, paused and resumed through
    the confirmation pages; while paused no tick of it is enqueued."""
    import threading

    from playwright.sync_api import expect

    from tests.helpers import keys, redis_ms, wait_for
    from tests.worker.test_scheduler import TASK, scheduler, with_schedules

    entries = {
        "nightly-report": {"task": TASK, "cron": "0 3 * * *", "timezone": "Europe/Berlin", "kwargs": {"key": "n"}},
        "sync-stock": {"task": TASK, "every": 1, "kwargs": {"key": "s"}, "timezone": "UTC"},
        "weekly-digest": {"task": "shop.tasks.gone", "cron": "0 8 * * 1"},
    }
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    with with_schedules(entries):
        x = scheduler(entries)
        loop = threading.Thread(target=x.loop, daemon=True)
        loop.start()
        try:
            assert wait_for(lambda: r.llen(keys().pending) >= 2, timeout=5)
            content = page.locator("#content-main")
            sync = page.locator("#redisq-schedule-sync-stock")
            nightly = page.locator("#redisq-schedule-nightly-report")

            page.goto("/admin/")
            page.fill("#id_username", "ops")
            page.fill("#id_password", "correct horse")
            page.click("input[type=submit]")
            page.get_by_role("link", name="Dead letters").first.click()
            page.click("#toggle-nav-sidebar")
            page.get_by_role("link", name="Schedules").click()
            expect(nightly).to_contain_text("daily at 03:00")
            expect(nightly).to_contain_text("Europe/Berlin")
            expect(sync).to_contain_text("every second")
            expect(sync.locator(".redisq-last-state")).to_be_visible()  # the last tick's task, linked
            expect(page.locator("#redisq-schedule-weekly-digest")).to_contain_text("[E025]")
            expect(page.locator("#redisq-schedule-weekly-digest form")).to_have_count(0)

            # run the nightly report now, confirming
            page.click("#redisq-run-nightly-report")
            expect(content).to_contain_text("Are you sure you want to run schedule nightly-report now?")
            page.click("#redisq-yes")
            expect(page.locator(".messagelist")).to_contain_text("Enqueued the task of schedule nightly-report now")
            expect(nightly).to_contain_text("(run now)")

            # pause the every-second one, confirming
            page.click("#redisq-pause-sync-stock")
            expect(content).to_contain_text("Are you sure you want to pause schedule sync-stock?")
            shot(page, "09-schedule-confirm")
            page.click("#redisq-yes")
            expect(page.locator(".messagelist")).to_contain_text("Paused schedule sync-stock")
            expect(sync.locator(".redisq-paused")).to_have_text("paused")
            expect(sync).to_contain_text("by ops")
            paused_ms = int(r.hget(keys().schedule("sync-stock"), "paused"))
            page.wait_for_timeout(2500)  # ticks pass while paused: the live scheduler claims them, runs none
            assert all(int(i.rsplit("-", 1)[1]) < paused_ms for i in r.lrange(keys().pending, 0, -1) if "-m" not in i)
            page.reload()
            expect(sync.locator(".redisq-paused-ticks")).not_to_have_text("0 paused")  # paused ticks counted
            shot(page, "08-schedules", docs=True)

            # resume it; it fires again
            page.click("#redisq-resume-sync-stock")
            expect(content).to_contain_text("Are you sure you want to resume schedule sync-stock, paused since")
            page.click("#redisq-yes")
            expect(page.locator(".messagelist")).to_contain_text("Resumed schedule sync-stock")
            expect(sync.locator(".redisq-active")).to_have_text("active")
            resumed = redis_ms(r)
            assert wait_for(lambda: any(int(i.rsplit("-", 1)[1]) > resumed for i in r.lrange(keys().pending, 0, -1)
                                        if "-m" not in i), timeout=5)
            shot(page, "10-resumed")
        finally:
            x.stop.set()
            loop.join(5)


def test_operator_edits_a_dead_letter_replays_it_and_sees_the_slowest_tasks(r, page, make_worker):
    """Edit then replay: a bad edit is refused with its reason, a good one confirmed, run with the new arguments;
    the Queues page then lists the hour's slowest tasks with their p50 / p95."""
    from playwright.sync_api import expect

    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    for i in range(3):
        tasks.slow.delay(f"browser-slow-{i}", 0.15)
    target = tasks.flaky.delay("browser-edit", 4)  # max_retries=3: dead after four failures
    drain(make_worker, [target])  # one burst run can leave with a retry still scheduled
    assert tasks.flaky.get_result(target.id).status == "FAILED"
    content = page.locator("#content-main")

    page.goto("/admin/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")
    page.get_by_role("link", name="Dead letters").first.click()
    page.click("#toggle-nav-sidebar")
    page.locator("#result_list tbody tr").first.get_by_role("link").first.click()
    expect(content).to_contain_text(target.id)

    # a call that does not fit the signature: refused, and the dead letter is untouched
    page.click("#redisq-edit summary")
    page.fill("#redisq-edit-args", '["browser-edit"]')
    page.click("#redisq-edit-submit")
    expect(page.locator("#redisq-edit-errors")).to_contain_text("missing a required argument: 'fail_times'")
    assert where_is(r, target.id) == ["dead"]

    # a good edit: confirmed, then replayed
    page.fill("#redisq-edit-args", '["browser-edited", 0]')
    shot(page, "11-edit", docs=True)
    page.click("#redisq-edit-submit")
    expect(page.locator("#redisq-new-args")).to_have_text('[\n  "browser-edited",\n  0\n]')
    expect(page.locator("#redisq-old-args")).to_have_text('[\n  "browser-edit",\n  4\n]')
    shot(page, "12-edit-confirm")
    page.click("#redisq-yes")
    expect(page.locator(".messagelist")).to_contain_text("with the edited arguments")
    make_worker().run()
    assert tasks.flaky.get_result(target.id).return_value == "ok after 1"

    page.locator(".object-tools").get_by_role("link", name="Queues").click()  # the tab: the sidebar has one too
    slowest = page.locator("#redisq-slowest-default")
    expect(slowest.locator("tbody tr").first).to_contain_text("tests.testapp.tasks.slow")
    expect(slowest).to_contain_text("tests.testapp.tasks.flaky")
    expect(page.locator("#redisq-queues-default")).to_contain_text("%")  # the hour's failure rate
    shot(page, "13-queues-slowest", docs=True)


def test_operator_pauses_and_resumes_a_queue_while_a_worker_runs(r, page):
    """The Queues page: pause a queue a live worker is draining, through the confirmation page; its tasks stop
    starting and it shows who paused it; resume it and the worker finishes the queue."""
    import threading
    import time

    from playwright.sync_api import expect

    from django_redisq.worker.worker import Worker
    from tests.helpers import keys, wait_for
    from tests.testapp.tasks import SPANS

    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    tasks.span.using(queue_name="emails").enqueue_many([(["emails", 0.05], {}) for _ in range(200)])
    worker = Worker(["emails"], concurrency=2, burst=False)
    loop = threading.Thread(target=worker.run, daemon=True)
    loop.start()
    try:
        assert wait_for(lambda: r.llen(SPANS) >= 5, timeout=10)
        state = page.locator("#redisq-state-default-emails")
        page.goto("/admin/")
        page.fill("#id_username", "ops")
        page.fill("#id_password", "correct horse")
        page.click("input[type=submit]")
        page.goto("/admin/django_redisq/queue/")
        expect(state).to_have_text("active")
        page.click("#redisq-pause-emails")
        expect(page.locator("#content-main")).to_contain_text("Are you sure you want to pause queue emails?")
        page.click("#redisq-yes")
        expect(page.locator(".messagelist")).to_contain_text("Paused queue emails")
        expect(state.locator(".redisq-paused")).to_have_text("paused")
        expect(state).to_contain_text("by admin:ops")
        shot(page, "14-queue-paused", docs=True)
        # the worker saw the pause: what it had fetched and not started went back to pending, and what it had started
        # ended (0.05 s each) and was settled, so it holds nothing of the queue
        processing = keys("emails").processing(worker.id)
        assert wait_for(lambda: r.llen(processing) == 0 and not any(s.endswith("|") for s in r.lrange(SPANS, 0, -1)),
                        timeout=10)
        ran = r.llen(SPANS)
        time.sleep(0.6)  # a window in which nothing may start: more than two looks of the pause watch (every 0.25 s)
        assert r.llen(SPANS) == ran < 200  # nothing starts while paused
        page.click("#redisq-resume-emails")
        expect(page.locator("#content-main")).to_contain_text("Are you sure you want to resume queue emails")
        page.click("#redisq-yes")
        expect(page.locator(".messagelist")).to_contain_text("Resumed queue emails")
        expect(state).to_have_text("active")
        assert wait_for(lambda: r.llen(SPANS) == 200 and r.llen(keys("emails").pending) == 0, timeout=30)
    finally:
        worker.request_stop()
        loop.join(10)


def test_operator_sees_running_apart_from_held(r, page, run_worker_process):
    """A real worker (-c 2) holds eight tasks and runs two: the Queues page shows 2 running and 6 held (the queue's
    row and the worker's), and the Running page lists the two running first, then the six held, each saying so."""
    from playwright.sync_api import expect

    from tests.helpers import keys, wait_for
    from tests.testapp.tasks import SPANS

    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    # tasks of a minute: the page must see the first two still running however slowly a loaded machine drives it
    # (6 s tasks finished under the clicks of one run beside a second CI run); the worker is SIGKILLed at teardown
    tasks.span.enqueue_many([([f"t{i}", 60.0], {}) for i in range(12)])
    run_worker_process("default", "--concurrency", "2", "--prefetch", "8", env={"REDISQ_OPT_HAND_BACK_AFTER": "120"})
    assert wait_for(lambda: r.llen(SPANS) == 2 and sum(r.llen(k) for k in r.scan_iter(keys().processing("*"))) == 8, timeout=30)
    assert wait_for(lambda: r.get(next(r.scan_iter(keys().running("*")), "none")) is not None, timeout=5)
    page.goto("/admin/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")
    page.goto("/admin/django_redisq/queue/")
    row = page.locator("#redisq-queue-default-default")
    expect(row.locator(".redisq-running")).to_have_text("2")
    expect(row.locator(".redisq-held")).to_have_text("6")
    workers = page.locator("#redisq-workers-default")
    expect(workers.locator("td.redisq-running")).to_have_text("2")
    expect(workers.locator("td.redisq-held")).to_have_text("6")
    shot(page, "22-queues-running-held")
    row.locator(".redisq-held").click()
    expect(page.locator("#redisq-running-counts")).to_have_text("2 running, 6 held")
    states = page.locator("#result_list td.redisq-task-state").all_inner_texts()
    assert states == ["running"] * 2 + ["held"] * 6, states
    expect(page.locator("#result_list")).to_contain_text("not started")
    shot(page, "22-running-held")
