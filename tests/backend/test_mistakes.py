"""A newcomer's mistakes get a clear answer at once: at the call, in ``check``, or in one worker log line.

Each test names the mistake (issue 26's first list) and proves what the user now sees:

* a call whose arguments do not fit the task, and a task no worker imports: refused at enqueue;
* the app without our backend in ``TASKS``, our backend without the app, ``QUEUE`` for ``QUEUES``,
  a bad ``IMPORTS``, a schedule whose arguments do not fit: system check errors with ids;
* ``bytes`` refused, tuples arriving as lists, as documented;
* a dead letter, for any reason, logged at WARNING with the reason and a hint; a traceback
  that starts at the task's own code.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import override_settings

from django_redisq.compat import InvalidTask, TaskResultStatus, task_backends
from django_redisq.exceptions import InvalidArguments
from django_redisq.store.keys import QueueKeys
from tests.conftest import ROOT
from tests.helpers import drain
from tests.testapp import chaos_tasks, jobs, tasks

K = QueueKeys("redisq", "default")


def stored_nothing(r: Any) -> bool:
    return not [k for k in r.scan_iter(match="redisq:*") if ":worker" not in k]


def tasks_setting(**options: Any) -> dict[str, Any]:
    out = copy.deepcopy(settings.TASKS)
    out["default"]["OPTIONS"].update(options)
    return out


# -- at the call ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "kwargs", "says"), [
    ((1,), {}, "missing a required argument: 'b'"),
    ((1, 2, 3), {}, "too many positional arguments"),
    ((1, 2), {"c": 3}, "got an unexpected keyword argument 'c'"),
    ((1,), {"a": 2}, "multiple values for argument 'a'"),
])
def test_a_call_that_does_not_fit_the_signature_raises_a_type_error_at_enqueue(r, args, kwargs, says):
    with pytest.raises(TypeError, match=says) as caught:
        tasks.add.delay(*args, **kwargs)
    assert isinstance(caught.value, InvalidArguments)
    assert "tests.testapp.tasks.add(a, b) cannot be called with these arguments" in str(caught.value)
    with pytest.raises(InvalidArguments, match=says):
        asyncio.run(tasks.add.aenqueue(*args, **kwargs))
    with pytest.raises(InvalidArguments, match=says):
        tasks.add.enqueue_many([((1, 2), {}), (args, kwargs)])  # one bad call: none stored
    assert stored_nothing(r)


def test_a_task_that_takes_a_context_binds_without_it(r):
    tasks.takes_context.delay(5)
    with pytest.raises(InvalidArguments, match="too many positional arguments"):
        tasks.takes_context.delay(5, 6)


def test_a_task_no_worker_imports_is_refused_with_the_module_and_both_fixes(r):
    with pytest.raises(InvalidTask) as caught:
        jobs.stray.delay(1)
    text = str(caught.value)
    assert "'tests.testapp.jobs.stray' is defined in module 'tests.testapp.jobs', which runworker does not import" in text
    assert "move it into an installed app's tasks.py (e.g. tests.testapp.tasks)" in text
    assert "or add 'tests.testapp.jobs' to TASKS['default']['OPTIONS']['IMPORTS']" in text
    assert stored_nothing(r)


def test_a_module_in_imports_is_accepted_and_its_task_runs(r, make_worker):
    with override_settings(TASKS=tasks_setting(IMPORTS=[*settings.TASKS["default"]["OPTIONS"]["IMPORTS"], "tests.testapp.jobs"])):
        res = jobs.stray.delay(21)
        drain(make_worker, [res])
        assert res.status == TaskResultStatus.SUCCESSFUL and res.return_value == 42


def test_a_task_a_tasks_module_imports_from_elsewhere_is_accepted(r):
    """tests/testapp/tasks.py imports chaos_tasks: a worker has it, so enqueue takes it."""
    backend = task_backends["default"]
    assert backend.reach.covers("tests.testapp.chaos_tasks")
    assert not backend.reach.covers("tests.testapp.jobs")
    chaos_tasks.effects_store  # noqa: B018 - the module is reached through tasks.py's namespace


def test_a_project_installed_as_a_package_is_followed_within_its_apps_packages(monkeypatch):
    """Deployed with pip (into site-packages), a project's modules are still followed from its apps' tasks modules."""
    from django_redisq.settings import discovery

    monkeypatch.setattr(discovery, "_LIBRARY_DIRS", (str(ROOT / "tests"),))  # as if tests/ were installed
    reach = discovery.Reach()
    assert reach.covers("tests.testapp.chaos_tasks") and not reach.covers("tests.testapp.jobs")


def test_runworker_imports_the_modules_of_imports(r):
    sys.modules.pop("tests.testapp.jobs", None)
    try:
        with override_settings(TASKS=tasks_setting(IMPORTS=["tests.testapp.jobs"])):
            call_command("runworker", "--burst", verbosity=0)
        assert "tests.testapp.jobs" in sys.modules
    finally:
        sys.modules["tests.testapp.jobs"] = jobs


def test_bytes_are_refused_and_tuples_arrive_as_lists(r, make_worker):
    for value in (b"abc", (1, [b"x"]), {"k": bytearray(b"a")}, memoryview(b"m")):
        with pytest.raises(InvalidArguments, match=r"task arguments must be JSON values, and a (bytes|bytearray|memoryview) value"):
            tasks.noop.delay(value)
    assert stored_nothing(r)
    res = tasks.noop.delay((1, (2, "three")))
    assert res.args == [[1, [2, "three"]]]
    drain(make_worker, [res])
    assert res.return_value == [1, [2, "three"]]
    assert tasks.noop.get_result(res.id).args == [[1, [2, "three"]]]


# -- in check --------------------------------------------------------------------------------------

def _check_ids(backend_alias: str = "default") -> dict[str, Any]:
    return {m.id: m for m in task_backends[backend_alias].check()}


def test_queue_for_queues_is_a_check_error_with_a_did_you_mean_never_a_traceback(r):
    from django_redisq import task
    from django_redisq.task import _registry

    setting = {"default": {"BACKEND": "django_redisq.backend.RedisQueueBackend", "QUEUE": ["default", "emails"],
                           "OPTIONS": settings.TASKS["default"]["OPTIONS"]}}
    with override_settings(TASKS=setting):

        def misqueued(x: int) -> int:
            return x

        misqueued.__module__ = "tests.testapp.tasks"
        defined = task(queue_name="emails")(misqueued)  # raised InvalidTask here, during a URL import in `check`
        try:
            found = _check_ids()
            assert "django_redisq.E080" in found
            assert found["django_redisq.E080"].msg == "TASKS['default'] has an unknown key 'QUEUE' (did you mean 'QUEUES'?)."
            with pytest.raises(ImproperlyConfigured, match=r"\[E080\] TASKS\['default'\] has an unknown key 'QUEUE'"):
                defined.delay(1)
        finally:
            _registry.pop(defined.module_path, None)


def test_an_option_one_level_too_high_is_named():
    from django_redisq.settings.read import validate

    found = {cid: (msg, hint) for cid, msg, hint in validate("default", {"QUEUES": ["default"], "REDIS_URL": "redis://x"})}
    assert found["E080"][0] == "TASKS['default'] has an unknown key 'REDIS_URL'."
    assert "(OPTIONS['REDIS_URL'])" in found["E080"][1]
    typo = {cid: msg for cid, msg, _ in validate("default", {"OPTIONS": {"MAX_RETRY": 3}})}
    assert typo["E004"] == "TASKS['default']['OPTIONS'] has an unknown option 'MAX_RETRY' (did you mean 'MAX_RETRIES'?)."


def test_imports_that_are_not_module_paths_or_do_not_import_are_check_errors(r):
    from django_redisq.settings.read import validate

    assert [cid for cid, _, _ in validate("default", {"OPTIONS": {"IMPORTS": "shop.jobs"}})] == ["E019"]
    assert [cid for cid, _, _ in validate("default", {"OPTIONS": {"IMPORTS": ["shop/jobs.py"]}})] == ["E019"]
    with override_settings(TASKS=tasks_setting(IMPORTS=["tests.no_such_module"])):
        found = _check_ids()
    assert set(found) == {"django_redisq.E083"}
    assert "names 'tests.no_such_module', which cannot be imported: ModuleNotFoundError" in found["django_redisq.E083"].msg


def test_schedule_arguments_that_do_not_fit_the_task_are_a_check_error(r):
    schedules = {"sums": {"task": "tests.testapp.tasks.add", "every": 60, "args": [1]},
                 "fits": {"task": "tests.testapp.tasks.add", "every": 60, "args": [1], "kwargs": {"b": 2}},
                 "extra": {"task": "tests.testapp.tasks.noop", "every": 60, "kwargs": {"y": 1}}}
    with override_settings(TASKS=tasks_setting(SCHEDULES=schedules)):
        msgs = [m.msg for m in task_backends["default"].check() if m.id == "django_redisq.E028"]
    assert sorted(msgs) == [
        "SCHEDULES['extra']: args [] and kwargs {'y': 1} do not fit tests.testapp.tasks.noop(x): "
        "missing a required argument: 'x'.",
        "SCHEDULES['sums']: args [1] and kwargs {} do not fit tests.testapp.tasks.add(a, b): "
        "missing a required argument: 'b'.",
    ]


def test_the_app_with_other_backends_in_tasks_is_a_warning():
    from django_redisq.apps import check_setup

    with override_settings(TASKS={"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}):
        assert [m.id for m in check_setup()] == ["django_redisq.W081"]
    assert check_setup() == []


SETUP = """
import django, json
from django.conf import settings
settings.configure(INSTALLED_APPS={apps!r}, {tasks}DATABASES={{}})
django.setup()
from django.core.checks import run_checks
from django_redisq import compat  # the framework's own check, as a project importing its tasks has it
from tests.testapp import tasks  # @task(queue_name="emails") among them: Django's default backend refused it here
print(json.dumps([[m.id, m.msg, m.hint] for m in run_checks() if m.id and m.id.startswith("django_redisq")]))
{then}
"""


def _setup_checks(apps: list[str], tasks_setting: dict[str, Any] | None, then: str = "") -> subprocess.CompletedProcess[str]:
    code = SETUP.format(apps=apps, tasks=f"TASKS={tasks_setting!r}, " if tasks_setting is not None else "", then=then)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)


def _found(done: subprocess.CompletedProcess[str]) -> list[list[str]]:
    assert done.stdout, done.stderr
    return json.loads(done.stdout.splitlines()[0])


def test_the_app_without_tasks_is_a_check_error_not_a_traceback():
    done = _setup_checks(["django.contrib.contenttypes", "django_redisq"], None)
    assert done.returncode == 0, done.stderr
    found = _found(done)
    assert [m[0] for m in found] == ["django_redisq.E081"]
    assert "TASKS is not set: Django's default backend runs every task inline" in found[0][1]
    assert '"BACKEND": "django_redisq.backend.RedisQueueBackend"' in found[0][2]


def test_our_backend_without_the_app_is_a_check_error_and_refused_at_enqueue():
    ours = {"default": {"BACKEND": "django_redisq.backend.RedisQueueBackend", "QUEUES": ["default", "emails"],
                        "OPTIONS": {"REDIS_URL": "redis://127.0.0.1:1/0"}}}
    done = _setup_checks(["django.contrib.contenttypes"], ours, then="tasks.noop.delay(1)")
    found = _found(done)
    assert [m[0] for m in found] == ["django_redisq.E082"]
    assert "`manage.py runworker` is an unknown command" in found[0][1] and found[0][2] == 'Add "django_redisq" to INSTALLED_APPS.'
    assert done.stderr.rstrip().endswith(
        "ImproperlyConfigured: TASKS['default'] uses django_redisq's RedisQueueBackend, but django_redisq is not in "
        "INSTALLED_APPS: no worker could run its tasks (`manage.py runworker` is an unknown command). "
        'Add "django_redisq" to INSTALLED_APPS.'), done.stderr
    done = _setup_checks(["django.contrib.contenttypes", "django_redisq"], ours)
    assert done.returncode == 0 and _found(done) == [], done.stderr


CHECK_FROM_THE_URLCONF = """
import django
from django.conf import settings
settings.configure(INSTALLED_APPS=["django.contrib.contenttypes"], TASKS={tasks!r}, DATABASES={{}},
                   ROOT_URLCONF="urls_importing_tasks", SECRET_KEY="x")
django.setup()
from django.core.management import call_command
call_command("check")
"""


def test_without_the_app_a_urlconf_that_imports_the_tasks_still_hears_of_it_at_check_time(tmp_path: Path):
    """Django registers its task checks when django.tasks is first imported; a project whose URLconf is the first to
    import it (its views import the tasks) does so during the URL check, after the list of checks was taken, so E082
    cannot run in that pass. The backend says it when it is built, and ``check`` shows it."""
    (tmp_path / "urls_importing_tasks.py").write_text("import tests.testapp.tasks  # as views importing tasks\nurlpatterns = []\n")
    ours = {"default": {"BACKEND": "django_redisq.backend.RedisQueueBackend", "QUEUES": ["default", "emails"],
                        "OPTIONS": {"REDIS_URL": "redis://127.0.0.1:1/0"}}}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", CHECK_FROM_THE_URLCONF.format(tasks=ours)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60, env=env)
    assert "django_redisq.E082" not in done.stdout + done.stderr  # the check could not run: the reason for the warning
    assert ("RuntimeWarning: TASKS['default'] uses django_redisq's RedisQueueBackend, but django_redisq is not in "
            "INSTALLED_APPS") in done.stderr, done.stderr
    assert "System check identified no issues" in done.stdout, done.stdout


def test_an_enqueue_where_available_apps_narrowed_the_registry_is_not_refused(r):
    """A TransactionTestCase with ``available_apps`` that omits django_redisq (Django's own test pattern) narrows the
    app registry for its tests; the project still installs the app, and an enqueue there is not refused."""
    from django.apps import apps

    apps.set_available_apps(["django.contrib.contenttypes", "tests.testapp"])
    try:
        assert not apps.is_installed("django_redisq")
        result = tasks.noop.using(priority=3).enqueue(1)  # a task object this backend never validated
    finally:
        apps.unset_available_apps()
    assert tasks.noop.get_result(result.id).status == "READY"


# -- in the worker's log ---------------------------------------------------------------------------

def test_a_failed_task_is_logged_at_warning_with_reason_hint_and_a_traceback_from_the_task(r, make_worker, caplog):
    res = tasks.always_fails.using(max_retries=0).delay("kaput")
    with caplog.at_level(logging.INFO, logger="django_redisq"):
        drain(make_worker, [res])
    lines = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING and res.id in rec.getMessage()]
    assert len(lines) == 1
    first = lines[0].splitlines()[0]
    assert first.startswith("task tests.testapp.tasks.always_fails id=" + res.id)
    assert "outcome=dead" in first and "reason=failed: kaput; hint: out of retries" in first
    stored = tasks.always_fails.get_result(res.id).errors[-1].traceback
    frames = [line for line in stored.splitlines() if line.lstrip().startswith("File ")]
    assert frames and "tests/testapp/tasks.py" in frames[0], stored  # not our runner's, nor Django's Task.call
    assert "django_redisq/worker" not in stored and "django/tasks" not in stored
    assert lines[0].split("\n", 1)[1] == stored.rstrip()


def test_calling_a_task_like_a_function_says_what_to_write(r):
    """Celery runs a task when it is called; a Django Task is not callable. The error names the three spellings, and
    nothing was enqueued."""
    with pytest.raises(TypeError, match=r"add\.enqueue\(\.\.\.\) \(or add\.delay\(\.\.\.\)\) runs it in a worker, "
                                        r"add\.call\(\.\.\.\) runs it here and now"):
        tasks.add(1, 2)
    assert not r.keys("*")
    assert tasks.add.call(1, 2) == 3
