"""Schedules without Redis: tick arithmetic (cron in a time zone, DST as Debian cron), settings checks."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_redisq.compat import UTC
from django_redisq.schedules import registry as schedules
from django_redisq.schedules.registry import ALIASES, Schedule, build, find_task, periodic

BERLIN = ZoneInfo("Europe/Berlin")


def berlin(*args: int, fold: int = 0) -> int:
    return int(datetime(*args, tzinfo=BERLIN, fold=fold).timestamp() * 1000)  # type: ignore[misc]


def sched(cron: str | None = None, every: float | None = None, tz: str = "Europe/Berlin") -> Schedule:
    entry = {"task": "tests.testapp.tasks.on_tick", "kwargs": {"key": "k"}, "timezone": tz}
    entry.update({"cron": cron} if cron is not None else {"every": every})
    s, problems = build("s", entry, ("default",), "UTC", find_task)
    assert s is not None, problems
    return s


def ticks(s: Schedule, start: int, n: int) -> list[str]:
    out, t = [], start
    for _ in range(n):
        t = s.next_after(t)
        out.append(datetime.fromtimestamp(t / 1000, BERLIN).isoformat())
    return out


# -- DST like Debian cron (Europe/Berlin: 2024-03-31 02:00 -> 03:00, 2024-10-27 03:00 -> 02:00) ----------


def test_a_daily_job_in_the_skipped_hour_runs_once_at_the_jump():
    assert ticks(sched("30 2 * * *"), berlin(2024, 3, 30, 12), 3) == [
        "2024-03-31T03:00:00+02:00", "2024-04-01T02:30:00+02:00", "2024-04-02T02:30:00+02:00"]


def test_a_daily_job_in_the_repeated_hour_runs_once():
    got = ticks(sched("30 2 * * *"), berlin(2024, 10, 26, 12), 3)
    assert got == ["2024-10-27T02:30:00+02:00", "2024-10-28T02:30:00+01:00", "2024-10-29T02:30:00+01:00"]
    # asked from inside the repeated hour's second pass, the first pass is not offered again
    s = sched("30 2 * * *")
    assert s.next_after(berlin(2024, 10, 27, 2, 10, fold=1)) == berlin(2024, 10, 28, 2, 30)


def test_an_hourly_job_follows_real_hours_across_spring_forward():
    got = ticks(sched("0 * * * *"), berlin(2024, 3, 31, 0, 30), 3)
    assert got == ["2024-03-31T01:00:00+01:00", "2024-03-31T03:00:00+02:00", "2024-03-31T04:00:00+02:00"]


def test_an_hourly_job_runs_each_real_hour_once_across_fall_back():
    s = sched("0 * * * *")
    got = ticks(s, berlin(2024, 10, 27, 0, 30), 4)
    assert got == ["2024-10-27T01:00:00+02:00", "2024-10-27T02:00:00+02:00", "2024-10-27T02:00:00+01:00", "2024-10-27T03:00:00+01:00"]
    t, gaps = berlin(2024, 10, 27, 0, 30), []
    for _ in range(5):
        n = s.next_after(t)
        gaps.append(n - t if t != berlin(2024, 10, 27, 0, 30) else 3_600_000)
        t = n
    assert set(gaps) == {3_600_000}  # one tick per real hour: none twice, none skipped


@pytest.mark.parametrize("cron", ["30 2 * * *", "0 * * * *", "*/20 * * * *", "30 1-3 * * *", "0 3 * * 0", "0 2 * * *"])
@pytest.mark.parametrize("day", [(2024, 3, 31), (2024, 10, 27)])
def test_latest_at_agrees_with_the_forward_ticks_around_dst(cron, day):
    s = sched(cron)
    start = int(datetime(*day, tzinfo=UTC).timestamp() * 1000) - 8 * 86_400_000
    forward, t = [], start
    while t < start + 10 * 86_400_000:
        t = s.next_after(t)
        forward.append(t)
    for now in range(start + 7 * 86_400_000, start + 9 * 86_400_000, 7 * 60_000 + 1234):
        assert s.latest_at(now) == max(x for x in forward if x <= now), datetime.fromtimestamp(now / 1000, BERLIN)
    ticks_, total = s.due(start + 7 * 86_400_000, start + 9 * 86_400_000, 3)
    inside = [x for x in forward if start + 7 * 86_400_000 < x <= start + 9 * 86_400_000]
    assert ticks_ == inside[-3:] and total == len(inside)


def test_every_ticks_are_multiples_of_the_period_and_take_timedelta():
    s = sched(every=300)
    assert s.next_after(1_000_000) == 1_200_000 and s.latest_at(1_200_000) == 1_200_000 and s.latest_at(1_199_999) == 900_000
    assert sched(every=timedelta(minutes=5)).every_ms == 300_000
    assert s.due(0, 1_500_000, 2) == ([1_200_000, 1_500_000], 5)


def test_aliases_are_cron_expressions():
    assert sched("@daily").cron == "0 0 * * *" and set(ALIASES) >= {"@hourly", "@daily", "@weekly", "@monthly", "@yearly"}


def test_the_tick_text_is_iso_in_the_schedules_zone():
    assert sched("30 2 * * *").tick_text(berlin(2024, 3, 31, 3)) == "2024-03-31T03:00:00+02:00"


# -- settings checks ----------------------------------------------------------

TASK = "tests.testapp.tasks.on_tick"
KEY = {"key": "k"}  # on_tick's one argument without a default


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"task": TASK, "every": 60, "kwargs": {"key": "k"}}, []),
        ({"task": TASK, "kwargs": KEY, "every": 60, "colour": "red"}, ["E021"]),
        ({"task": TASK, "kwargs": KEY}, ["E022"]),
        ({"task": TASK, "kwargs": KEY, "every": 60, "cron": "* * * * *"}, ["E022"]),
        ({"task": TASK, "kwargs": KEY, "cron": "61 * * * *"}, ["E023"]),
        ({"task": TASK, "kwargs": KEY, "cron": "* * * *"}, ["E023"]),
        ({"task": TASK, "kwargs": KEY, "cron": "@sometimes"}, ["E023"]),
        ({"task": TASK, "kwargs": KEY, "every": 0.5}, ["E023"]),
        ({"task": TASK, "kwargs": KEY, "every": "60"}, ["E023"]),
        ({"task": TASK, "kwargs": KEY, "every": 60, "timezone": "Mars/Olympus"}, ["E024"]),
        ({"task": "tests.testapp.tasks.nope", "every": 60}, ["E025"]),
        ({"task": "os.path.join", "every": 60}, ["E025"]),
        ({"task": TASK, "kwargs": KEY, "every": 60, "queue_name": "elsewhere"}, ["E026"]),
        ({"task": TASK, "kwargs": KEY, "every": 60, "catch_up": "sometimes"}, ["E027"]),
        ({"task": TASK, "kwargs": KEY, "every": 60, "allow_overlap": "no"}, ["E027"]),
        ({"task": TASK, "kwargs": KEY, "every": 60, "args": {"a": 1}}, ["E027"]),
        ({"task": TASK, "every": 60, "kwargs": {"when": datetime.now()}}, ["E027"]),
        ({"task": TASK, "every": 60}, ["E028"]),  # on_tick(key, ...): every tick would be dead-lettered
        ({"task": TASK, "every": 60, "args": ["k", "x", 1.0, "extra"]}, ["E028"]),
        ({"task": "tests.testapp.tasks.add", "every": 60, "kwargs": {"a": 1, "c": 2}}, ["E028"]),
        ("not a dict", ["E020"]),
    ],
)
def test_bad_schedules_are_named(entry, expected):
    _, problems = build("s", entry, ("default", "emails"), "UTC", find_task)
    assert [p.id for p in problems] == expected


def with_schedules(value):
    from django.conf import settings

    tasks = copy.deepcopy(settings.TASKS)
    tasks["default"]["OPTIONS"]["SCHEDULES"] = value
    return override_settings(TASKS=tasks)


def test_bad_schedules_are_system_check_errors_with_ids(r):
    with with_schedules({"a": {"task": "tests.testapp.tasks.nope", "cron": "0 3 * * *"}, "b": {"task": TASK, "every": 5, "timezone": "X/Y"}}):
        with pytest.raises(SystemCheckError) as err:
            call_command("check")
    assert "django_redisq.E025" in str(err.value) and "django_redisq.E024" in str(err.value)


def test_good_schedules_pass_the_checks(r):
    with with_schedules({"a": {"task": TASK, "cron": "@hourly", "timezone": "Europe/Berlin", "kwargs": {"key": "a"}}}):
        call_command("check")


def test_a_bad_schedule_is_logged_and_skipped_by_the_worker_not_a_crash(r, make_worker, caplog):
    with with_schedules({"bad": {"task": TASK, "cron": "nope"}, "good": {"task": TASK, "every": 60, "kwargs": {"key": "g"}}}):
        w = make_worker(scheduler=True)
    assert [s.name for s in w.scheduler.schedules] == ["good"]
    assert "schedule bad is not run" in caplog.text and "E023" in caplog.text


def test_the_decorator_adds_a_schedule_the_settings_can_replace(r):
    from tests.testapp import tasks

    try:
        assert periodic("from-code", every=30, kwargs={"key": "c"})(tasks.on_tick) is tasks.on_tick
        found, bad = schedules.load("default", ("default",), None)
        assert [(s.name, s.every_ms) for s in found] == [("from-code", 30_000)] and not bad
        found, _ = schedules.load("default", ("default",), {"from-code": {"task": TASK, "cron": "@daily", "kwargs": {"key": "c"}}})
        assert [(s.name, s.cron) for s in found] == [("from-code", "0 0 * * *")]
    finally:
        schedules._code.clear()
    with pytest.raises(TypeError):
        periodic("x", every=30)(lambda: None)


def test_the_default_time_zone_is_djangos():
    with override_settings(TIME_ZONE="Asia/Tokyo"):
        found, _ = schedules.load("default", ("default",), {"t": {"task": TASK, "cron": "0 3 * * *", "kwargs": KEY}})
    assert found[0].tz == ZoneInfo("Asia/Tokyo")


# -- in words (the admin's Schedules page) ------------------------------------------


@pytest.mark.parametrize(("cron", "words"), [
    ("* * * * *", "every minute"),
    ("*/5 * * * *", "every 5 minutes"),
    ("*/7 * * * *", "*/7 * * * *"),  # restarts at :00 each hour: not "every 7 minutes"
    ("15 * * * *", "hourly at :15"),
    ("@hourly", "hourly at :00"),
    ("0 */6 * * *", "every 6 hours"),
    ("30 */2 * * *", "every 2 hours at :30"),
    ("0 3 * * *", "daily at 03:00"),
    ("@daily", "daily at 00:00"),
    ("0 9 * * 1-5", "weekdays at 09:00"),
    ("30 8 * * 1", "every Monday at 08:30"),
    ("0 0 * * 7", "every Sunday at 00:00"),
    ("0 7 * * fri", "every Friday at 07:00"),
    ("0 0 1 * *", "monthly on day 1 at 00:00"),
    ("@yearly", "yearly on 1 January at 00:00"),
    ("0 3,15 * * *", "0 3,15 * * *"),
    ("0 9 1 * 1", "0 9 1 * 1"),
    ("5-10 * * * *", "5-10 * * * *"),
])
def test_cron_in_words(cron, words):
    assert sched(cron=cron).in_words == words


@pytest.mark.parametrize(("every", "words"), [
    (1, "every second"), (30, "every 30 seconds"), (1.5, "every 1.5 seconds"), (60, "every minute"),
    (300, "every 5 minutes"), (90, "every 90 seconds"), (timedelta(hours=1), "every hour"), (7200, "every 2 hours"),
])
def test_every_in_words(every, words):
    assert sched(every=every).in_words == words


@pytest.mark.slow
def test_manage_py_redisq_sees_periodic_schedules_of_a_tasks_module_nothing_imported_yet(tmp_path, redis_url, r):
    """``@periodic`` in an app's tasks.py, in a new process: ``redisq schedules`` lists it and ``run`` enqueues it with
    the system checks skipped (they would have imported the module), and so does ``call_command``."""
    import json
    import os
    import subprocess
    import sys
    import textwrap

    from tests.conftest import ROOT

    (tmp_path / "ticker").mkdir()
    (tmp_path / "ticker" / "__init__.py").write_text("")
    (tmp_path / "ticker" / "tasks.py").write_text(textwrap.dedent("""
        from django_redisq import task
        from django_redisq.schedules import periodic


        @periodic("tick", every=60)
        @task
        def tick() -> None:
            pass
    """))
    (tmp_path / "tick_settings.py").write_text(textwrap.dedent(f"""
        SECRET_KEY = "only-for-this-test"
        INSTALLED_APPS = ["django_redisq", "ticker"]
        USE_TZ = True
        TASKS = {{"default": {{"BACKEND": "django_redisq.backend.RedisQueueBackend", "OPTIONS": {{"REDIS_URL": {redis_url!r}}}}}}}
    """))
    (tmp_path / "in_process.py").write_text(textwrap.dedent("""
        import io
        import django
        from django.core.management import call_command

        django.setup()
        out = io.StringIO()
        call_command("redisq", "schedules", "--json", stdout=out)
        print(out.getvalue())
    """))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tick_settings",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "django", "redisq", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)

    listed = manage("schedules", "--json", "--skip-checks")
    assert listed.returncode == 0, listed.stderr
    assert [s["name"] for s in json.loads(listed.stdout)] == ["tick"]
    ran = manage("schedules", "run", "tick", "--skip-checks")
    assert ran.returncode == 0 and "enqueued schedule tick's task now" in ran.stdout, ran.stdout + ran.stderr
    assert r.llen("redisq:{default}:pending") == 1
    in_process = subprocess.run([sys.executable, "in_process.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert [s["name"] for s in json.loads(in_process.stdout)] == ["tick"], in_process.stderr
