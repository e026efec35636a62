"""The admin pages with Django's test client: every page and action, both permission levels."""

from __future__ import annotations

import copy
import json
import re

import pytest
from django.conf import settings
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings
from django.urls import reverse

from django_redisq.admin import dead as dead_letters
from django_redisq.admin import site as redisq_admin
from django_redisq.ops import operations
from django_redisq.store.reads import tasks as inspect_tasks
from django_redisq.store.steps.replies import NewTask
from tests import helpers
from tests.seed import seed_dead
from tests.testapp import tasks

pytestmark = pytest.mark.django_db

LIST = reverse("admin:django_redisq_deadletter_changelist")
QUEUES = reverse("admin:django_redisq_queue_changelist")
ACTION = reverse("admin:django_redisq_deadletter_action")


@pytest.fixture(autouse=True)
def fast_passwords(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def detail_url(task_id: str, queue: str = "default") -> str:
    return reverse("admin:django_redisq_deadletter_detail", args=["default", queue, task_id])


def tasks_url(state: str) -> str:
    return reverse(f"admin:django_redisq_{state}task_changelist")


def staff(username: str, *perms: str) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="django_redisq", codename__in=perms))
    return user


def client_for(user: User, **kwargs) -> Client:
    c = Client(**kwargs)
    c.force_login(user)
    return c


@pytest.fixture
def viewer(db) -> Client:
    return client_for(staff("viewer", "view_deadletter"))


@pytest.fixture
def changer(db) -> Client:
    return client_for(staff("changer", "change_deadletter"))


@pytest.fixture
def dead(r, make_worker) -> str:
    """One task that failed for good (two attempts) in queue default."""
    result = tasks.always_fails.delay("kaput")
    make_worker().run()
    return result.id


def msgs(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def follow_post(client: Client, url: str, data: dict) -> tuple:
    response = client.post(url, data, follow=True)
    return response, msgs(response)


def where(r, task_id: str, queue: str = "default") -> list[str]:
    return helpers.where_is(r, task_id, queue)


# -- permissions -------------------------------------------------------


def test_the_admin_index_lists_dead_letters_for_viewers_only(r, viewer, db):
    assert "Dead letters" in viewer.get(reverse("admin:index")).content.decode()
    nobody = client_for(staff("nobody"))
    assert "Dead letters" not in nobody.get(reverse("admin:index")).content.decode()


@pytest.mark.parametrize("url", [LIST, QUEUES, tasks_url("scheduled"), detail_url("x"), "/admin/django_redisq/deadletter/default/default/x/change/"])
def test_staff_without_the_view_permission_get_403(r, db, url):
    assert client_for(staff("nobody")).get(url).status_code == 403


def test_anonymous_users_are_sent_to_the_login_page(r, client):
    response = client.get(LIST)
    assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))


def test_viewers_see_but_cannot_change(r, viewer, dead):
    page = viewer.get(LIST).content.decode()
    assert dead in page and 'name="ids"' not in page and "redisq-run-all" not in page
    assert "redisq-replay" not in viewer.get(detail_url(dead)).content.decode()
    assert "Purge dead letters" not in viewer.get(QUEUES).content.decode()
    for data in ({"action": "replay", "queue": "default", "ids": dead},
                 {"action": "delete", "queue": "default", "scope": "all", "confirm": "yes"}):
        assert viewer.post(ACTION, data).status_code == 403
    assert where(r, dead) == ["dead"]


def test_change_permission_alone_is_enough_to_look_and_act(r, changer, dead):
    assert changer.get(LIST).status_code == 200
    _, messages = follow_post(changer, ACTION, {"action": "replay", "queue": "default", "ids": dead, "confirm": "yes"})
    assert messages == ["Replayed 1 dead letter."] and where(r, dead) == ["pending"]


def test_actions_need_post_and_a_csrf_token(r, dead, admin_user):
    strict = client_for(admin_user, enforce_csrf_checks=True)
    assert strict.get(ACTION).status_code == 405
    data = {"action": "delete", "queue": "default", "ids": dead, "confirm": "yes"}
    assert strict.post(ACTION, data).status_code == 403
    assert where(r, dead) == ["dead"]
    strict.get(LIST)  # sets the CSRF cookie, as a browser visit does
    token = strict.cookies[settings.CSRF_COOKIE_NAME].value
    assert strict.post(ACTION, {**data, "csrfmiddlewaretoken": token}).status_code == 302
    assert where(r, dead) == []


# -- overview ------------------------------------------------------------


def test_queue_overview_with_figures_chart_and_workers(r, admin_client, dead):
    tasks.add.delay(1, 2)
    r.zadd(helpers.keys().workers, {"box.1.abc": helpers.redis_ms(r)})
    r.set(helpers.keys().worker_info("box.1.abc"), json.dumps({"host": "box", "pid": 1, "queues": ["default", "emails"],
                                                               "concurrency": 2, "current": []}))
    r.zadd(helpers.keys("emails").workers, {"box.1.abc": helpers.redis_ms(r)})
    response = admin_client.get(QUEUES)
    page = response.content.decode()
    assert response.status_code == 200
    [(_, rows, workers, slowest, limits)] = response.context["backends"]
    assert [s.queue for s, *_ in rows] == ["default", "emails", "low"] and slowest == [] and limits == []  # no success in the hour
    default = rows[0][0]
    assert (default.pending, default.dead, default.failed_hour) == (1, 1, 2)
    assert [w.name for w in workers] == ["box.1.abc"]  # listed once though it serves two queues
    assert page.count('<svg class="redisq-chart"') == 3 and page.count("<polyline") == 6
    assert 'src="http' not in page and 'href="http' not in page  # works offline: nothing from a CDN
    assert "box.1.abc" in page and "Purge dead letters" in page


def test_the_slowest_tasks_of_a_millisecond_or_less_read_as_such(r, admin_client, make_worker):
    """Every run of a millisecond or less falls in the first duration bucket: its p50 / p95 read "≤ 1 ms", not the
    0.5 / 0.95 ms an interpolation inside it would give every such task."""
    tasks.noop.enqueue_many([([i], {}) for i in range(20)])
    make_worker().run()
    response = admin_client.get(QUEUES)
    [(_, _, _, slowest, _)] = response.context["backends"]
    row = next(row for row in slowest if row[1].task == "tests.testapp.tasks.noop")
    assert row[2] == "≤ 1 ms", row  # the median of 20 no-ops (a loaded machine may stretch one run past 1 ms: p95)
    assert row[3] == "≤ 1 ms" or not row[3].startswith("0."), row
    assert "0.5 ms" not in response.content.decode() and "0.95 ms" not in response.content.decode()


def test_queue_overview_empty(r, admin_client):
    page = admin_client.get(QUEUES).content.decode()
    assert "No worker is running" in page and "Purge dead letters" not in page


def test_chart_scales_to_the_peak():
    series = [(None, 0, 0, 0)] * 59 + [(None, 10, 3, 2)]
    c = redisq_admin.chart(series, width=590, height=40)
    assert c["peak"] == 10
    assert c["processed"].split()[0] == "0.0,39.0" and c["processed"].split()[-1] == "590.0,1.0"
    assert c["failed"].split()[-1] == "590.0,20.0"


# -- dead-letter list ----------------------------------------------------


def test_empty_states(r, admin_client):
    assert "No dead letters in queue default." in admin_client.get(LIST).content.decode()
    assert "match this filter" in admin_client.get(LIST, {"task": "nothing"}).content.decode()
    assert "No scheduled tasks in queue default." in admin_client.get(tasks_url("scheduled")).content.decode()


def test_list_shows_what_an_operator_needs(r, admin_client, dead):
    response = admin_client.get(LIST)
    page = response.content.decode()
    assert response.status_code == 200
    assert "tests.testapp.tasks.always_fails" in page and "ValueError" in page and "kaput" in page
    assert detail_url(dead) in page and "1 dead letter" in page
    assert response.context["queues"] == {"default": 1, "emails": 0, "low": 0}
    assert response.context["task_facets"] == [("tests.testapp.tasks.always_fails", 1)]


def test_pagination_boundaries(r, admin_client, broker):
    ids = seed_dead(broker, "default", 101)
    base = helpers.redis_ms(r) - 10_000
    r.zadd(helpers.keys().dead, {i: base + n for n, i in enumerate(ids)})
    newest = ids[::-1]
    first = admin_client.get(LIST)
    page = first.context["page"]
    assert [x.id for x in page.items] == newest[:50] and page.num_pages == 3
    assert first.context["pages"] == [(1, 0), (2, 50), (3, 100)]
    assert f"start=50&amp;top={page.top}" in first.content.decode()
    last = admin_client.get(LIST, {"start": 100, "top": page.top})
    assert [x.id for x in last.context["page"].items] == [newest[100]] and not last.context["page"].has_next
    assert admin_client.get(LIST, {"start": 150}).context["page"].items == []
    assert admin_client.get(LIST, {"start": "junk", "top": "junk"}).context["page"].start == 0


def test_filtered_list_pages_with_older_and_newer_links(r, admin_client, broker):
    ids = seed_dead(broker, "default", 120, lambda i: ("shop.tasks.a", "builtins.KeyError" if i % 2 else "builtins.OSError", f"e{i}"))
    base = helpers.redis_ms(r) - 10_000
    r.zadd(helpers.keys().dead, {i: base + n for n, i in enumerate(ids)})
    keyerrors = [i for n, i in enumerate(ids) if n % 2][::-1]
    first = admin_client.get(LIST, {"exc": "KeyError"})
    page = first.context["page"]
    assert [x.id for x in page.items] == keyerrors[:50] and page.total is None
    html = first.content.decode()
    assert 'id="redisq-older"' in html and 'id="redisq-newer"' not in html
    second = admin_client.get(LIST, {"exc": "KeyError", "start": page.next_start, "top": page.top})
    assert [x.id for x in second.context["page"].items] == keyerrors[50:]
    assert 'id="redisq-newer"' in second.content.decode() and 'id="redisq-older"' not in second.content.decode()
    back = admin_client.get(LIST, {"exc": "KeyError", "before": second.context["page"].start, "top": page.top})
    assert [x.id for x in back.context["page"].items] == keyerrors[:50]
    assert [x.id for x in admin_client.get(LIST, {"q": "E77"}).context["page"].items] == [ids[77]]


def test_a_filter_that_hits_the_scan_budget_says_so(r, admin_client, broker, monkeypatch):
    seed_dead(broker, "default", 30)
    monkeypatch.setattr(inspect_tasks, "SCAN_BUDGET", 10)
    response = admin_client.get(LIST, {"task": "nothing"})
    assert response.context["page"].budget_hit and "Looked at 10 dead letters" in response.content.decode()


def test_errors_and_arguments_are_escaped(r, admin_client, make_worker):
    result = tasks.always_fails.delay("<script>alert('x')</script>")
    make_worker().run()
    for html in (admin_client.get(LIST).content.decode(), admin_client.get(detail_url(result.id)).content.decode(),
                 admin_client.post(ACTION, {"action": "replay", "queue": "default", "ids": result.id}).content.decode(),
                 admin_client.get(LIST, {"q": "<script>"}).content.decode()):
        assert "<script>alert(" not in html and "&lt;script&gt;alert(" in html


def test_a_queue_removed_from_settings(r, admin_client, broker):
    [gone] = seed_dead(broker, "low", 1)
    tasks_setting = copy.deepcopy(settings.TASKS)
    tasks_setting["default"]["QUEUES"] = ["default", "emails"]
    with override_settings(TASKS=tasks_setting):
        response = admin_client.get(LIST, {"queue": "low"}, follow=True)
        assert msgs(response) == ["Queue 'low' is not in TASKS['default']['QUEUES'] any more."]
        assert response.context["queue"] == "default"
        assert admin_client.get(detail_url(gone, "low")).status_code == 404
        assert admin_client.get(tasks_url("pending"), {"queue": "low"}).status_code == 404
        _, messages = follow_post(admin_client, ACTION, {"action": "replay", "queue": "low", "ids": gone, "confirm": "yes"})
        assert messages == ["queue 'low' is not in TASKS['default']['QUEUES'] ['default', 'emails']"]
        _, messages = follow_post(admin_client, ACTION, {"action": "replay", "queue": "default", "ids": gone, "to": "low"})
        assert "'low' is not in TASKS" in messages[0]
        assert [s.queue for s, *_ in admin_client.get(QUEUES).context["backends"][0][1]] == ["default", "emails"]
    assert where(r, gone, "low") == ["dead"]


def test_unknown_backend_is_404(r, admin_client):
    assert admin_client.get(LIST, {"backend": "nope"}).status_code == 404


# -- detail --------------------------------------------------------------


def test_detail_page_shows_everything_stored(r, admin_client, make_worker):
    result = tasks.flaky.using(idempotency_key="refund-7").enqueue("key-7", 99)
    make_worker().run()
    response = admin_client.get(detail_url(result.id))
    page = response.content.decode()
    d = response.context["detail"]
    assert response.status_code == 200 and d.row.state == "dead" and len(d.attempts) == 4
    assert response.context["args_json"] == '[\n  "key-7",\n  99\n]'
    assert "refund-7" in page and "flaky failure 4" in page and "Traceback (most recent call last)" in page
    assert response.context["workers"] == [(d.workers[0], 4)] and f"{d.workers[0]}</code> \u00d74" in page  # one worker, 4 runs
    assert "redisq-replay" in page and "redisq-delete" in page
    assert page.count("<details>") + page.count("<details open>") == 4 and page.count("<details open>") == 1  # one per attempt
    assert page.count('<details id="redisq-edit">') == 1  # and the edit-then-replay form, closed


def test_detail_of_a_task_that_is_not_dead_has_no_actions(r, admin_client):
    result = tasks.add.delay(2, 3)
    page = admin_client.get(detail_url(result.id)).content.decode()
    assert "pending" in page and "redisq-replay" not in page and "No failed attempt recorded." in page


def test_detail_of_an_undecodable_message(r, admin_client, broker, make_worker):
    broker.enqueue("default", [NewTask("bad-msg-1", "{not json", "tests.testapp.tasks.add", 0, "")])
    make_worker().run()
    assert where(r, "bad-msg-1") == ["dead"]
    page = admin_client.get(detail_url("bad-msg-1")).content.decode()
    assert "the stored message does not decode" in page and "{not json" in page and "BadMessage" in page
    assert "bad-msg-1" in admin_client.get(LIST).content.decode()
    _, messages = follow_post(admin_client, ACTION, {"action": "replay", "queue": "default", "ids": "bad-msg-1",
                                                     "to": "emails", "confirm": "yes"})
    assert messages[0] == "Replayed 0 dead letters into queue emails." and "could not be moved" in messages[1]


def test_detail_404s(r, admin_client):
    assert admin_client.get(detail_url("nope")).status_code == 404
    assert admin_client.get(detail_url("nope", "gone")).status_code == 404


def test_log_entry_links_lead_to_the_task_or_the_queue(r, admin_client):
    base = "/admin/django_redisq/deadletter/"
    assert admin_client.get(base + "default/emails/abc/change/")["Location"] == detail_url("abc", "emails")
    assert admin_client.get(base + "default/emails/change/")["Location"] == LIST + "?backend=default&queue=emails"
    assert admin_client.get(base + "x/change/").status_code == 404


@pytest.mark.parametrize("object_id", ["default//x", "//x", "default/emails/", "/", "_2F_2F", "default/_2F/x", "a/b/c/d"])
def test_a_malformed_log_entry_link_is_a_404(r, db, object_id):
    """An id with an empty part could not be reversed to a page: it was a 500 (NoReverseMatch)."""
    viewer = client_for(staff("viewer", "view_deadletter"), raise_request_exception=False)
    assert viewer.get(f"/admin/django_redisq/deadletter/{object_id}/change/").status_code == 404


# -- actions -------------------------------------------------------------


def test_replay_selected_asks_first_then_replays_and_logs(r, admin_client, admin_user, dead):
    confirm = admin_client.post(ACTION, {"action": "replay", "queue": "default", "ids": [dead, "not-dead"]})
    assert confirm.status_code == 200 and confirm.context["count"] == 1
    assert [x.id for x in confirm.context["sample"]] == [dead] and 'id="redisq-yes"' in confirm.content.decode()
    assert where(r, dead) == ["dead"] and not LogEntry.objects.exists()
    response, messages = follow_post(admin_client, ACTION, {"action": "replay", "queue": "default", "ids": dead, "confirm": "yes"})
    assert messages == ["Replayed 1 dead letter."] and response.redirect_chain[-1][0] == LIST + "?backend=default&queue=default"
    assert where(r, dead) == ["pending"]
    [entry] = LogEntry.objects.all()
    assert (entry.user, entry.action_flag, entry.object_id) == (admin_user, CHANGE, f"default/default/{dead}")
    assert entry.change_message == "Replayed dead letter (from queue default)"
    assert admin_client.get(entry.get_admin_url())["Location"] == detail_url(dead)  # "Recent actions" link


def test_delete_selected(r, admin_client, broker):
    ids = seed_dead(broker, "default", 3)
    _, messages = follow_post(admin_client, ACTION, {"action": "delete", "queue": "default", "ids": ids[:2], "confirm": "yes"})
    assert messages == ["Deleted 2 dead letters."]
    assert r.zrange(helpers.keys().dead, 0, -1) == [ids[2]]
    assert sorted(LogEntry.objects.values_list("action_flag", flat=True)) == [DELETION, DELETION]


def test_nothing_selected(r, admin_client, dead):
    _, messages = follow_post(admin_client, ACTION, {"action": "replay", "queue": "default"})
    assert messages == ["None of the selected tasks is in this queue's dead letters (any more)."]
    _, messages = follow_post(admin_client, ACTION, {"action": "explode", "queue": "default", "ids": dead})
    assert messages[0].startswith("unknown action")


def test_replay_into_another_queue(r, admin_client, dead):
    _, messages = follow_post(admin_client, ACTION, {"action": "replay", "queue": "default", "ids": dead, "to": "low", "confirm": "yes"})
    assert messages == ["Replayed 1 dead letter into queue low."]
    assert where(r, dead, "low") == ["pending"]
    assert LogEntry.objects.get().object_id == f"default/low/{dead}"


def test_replay_all_matching_the_filter(r, admin_client, broker):
    ids = seed_dead(broker, "default", 30, lambda i: ("shop.tasks.a", "builtins.KeyError" if i % 3 == 0 else "builtins.OSError", f"e{i}"))
    confirm = admin_client.post(ACTION, {"action": "replay", "queue": "default", "scope": "all", "exc": "KeyError"})
    assert confirm.context["count"] == 10 and len(confirm.context["sample"]) == 10
    fields = dict(confirm.context["fields"])
    assert fields["exc"] == "KeyError" and fields["scope"] == "all" and fields["top"]
    _, messages = follow_post(admin_client, ACTION, {**fields, "confirm": "yes"})
    assert messages == ["Replayed 10 dead letters."]
    assert r.llen(helpers.keys().pending) == 10 and r.zcard(helpers.keys().dead) == 20
    [entry] = LogEntry.objects.all()
    assert entry.object_id == "default/default" and entry.change_message == "Replayed 10 dead letters of queue default matching exception='KeyError'"
    assert set(r.lrange(helpers.keys().pending, 0, -1)) == {i for n, i in enumerate(ids) if n % 3 == 0}


def test_a_long_run_shows_progress_and_continues(r, admin_client, broker, monkeypatch):
    monkeypatch.setattr(dead_letters, "SLICE_SECONDS", 0)
    monkeypatch.setattr(operations, "BATCH", 10)
    seed_dead(broker, "default", 35)
    confirm = admin_client.post(ACTION, {"action": "delete", "queue": "default", "scope": "all"})
    data = {**dict(confirm.context["fields"]), "confirm": "yes"}
    steps = []
    while True:
        response = admin_client.post(ACTION, data)
        if response.status_code == 302:
            break
        steps.append(response.context["progress"].done)
        assert "<progress" in response.content.decode() and 'getElementById("redisq-confirm").submit()' in response.content.decode()
        data = dict(response.context["fields"])
    assert steps == [10, 20, 30] and r.zcard(helpers.keys().dead) == 0
    assert LogEntry.objects.count() == 4 and set(LogEntry.objects.values_list("action_flag", flat=True)) == {DELETION}


def test_purge_a_queue_from_the_overview(r, admin_client, broker):
    seed_dead(broker, "emails", 5)
    seed_dead(broker, "default", 2)
    confirm = admin_client.post(ACTION, {"action": "delete", "queue": "emails", "scope": "all"})
    assert confirm.context["count"] == 5 and "deleted for good" in confirm.content.decode()
    _, messages = follow_post(admin_client, ACTION, {**dict(confirm.context["fields"]), "confirm": "yes"})
    assert messages == ["Deleted 5 dead letters."]
    assert r.zcard(helpers.keys("emails").dead) == 0 and r.zcard(helpers.keys().dead) == 2


def test_replayed_task_runs_and_leaves_the_list(r, admin_client, make_worker):
    result = tasks.flaky.delay("once-more", 4)  # max_retries=3: four failures, dead; the fifth run succeeds
    make_worker().run()
    assert result.id in admin_client.get(LIST).content.decode()
    follow_post(admin_client, ACTION, {"action": "replay", "queue": "default", "ids": result.id, "confirm": "yes"})
    make_worker().run()
    assert tasks.flaky.get_result(result.id).return_value == "ok after 5"
    assert result.id not in admin_client.get(LIST).content.decode()


# -- other lists ---------------------------------------------------------


def test_scheduled_pending_and_running_lists(r, admin_client):
    helpers.seed_scheduled(r, "s1", 60_000)
    helpers.seed_pending(r, "p1")
    helpers.seed_processing(r, "run-1", "w1")
    r.zadd(helpers.keys().workers, {"w1": helpers.redis_ms(r)})
    for state, task_id in (("scheduled", "s1"), ("pending", "p1"), ("running", "run-1")):
        response = admin_client.get(tasks_url(state))
        assert response.status_code == 200 and task_id in response.content.decode()
        assert detail_url(task_id) in response.content.decode()
    assert admin_client.get(reverse("admin:django_redisq_deadletter_tasks", args=["finished"])).status_code == 404


def test_the_pending_list_is_in_running_order_with_priorities(r, admin_client):
    ids = {key: tasks.in_order.using(priority=p).enqueue(key).id for key, p in [("plain", 0), ("late", -30), ("first", 70)]}
    page = admin_client.get(tasks_url("pending")).content.decode()
    positions = [page.index(ids[key]) for key in ("first", "plain", "late")]
    assert positions == sorted(positions), "the page lists the next to run first"
    cells = re.findall(r'<td class="redisq-priority">(-?\d+)</td>', page)
    assert cells == ["70", "0", "-30"] and "3 pending tasks" in page


@pytest.mark.parametrize("url", [LIST, QUEUES])
def test_redis_down_is_a_clear_page_not_a_server_error(r, viewer, settings, url):
    import copy

    from django_redisq import connection

    tasks_setting = copy.deepcopy(settings.TASKS)
    tasks_setting["default"]["OPTIONS"]["REDIS_URL"] = "redis://:secret@127.0.0.1:1/0"
    settings.TASKS = tasks_setting
    connection.reset()
    try:
        response = viewer.get(url)
    finally:
        connection.reset()
    assert response.status_code == 503
    body = response.content.decode()
    assert "could not answer" in body and "redis://127.0.0.1:1/0" in body
    assert "secret" not in body
