"""The embedded Redis belongs to one project (connection/embedded.py): its own server, shared by the project's
processes, replaced when it died, reported and stopped by ``manage.py redisq embedded``.

Before, ``EMBEDDED`` was one server per machine (``/tmp/django-redisq.rdb``): the worker of one project took the
other's task and buried it (``unknown_task``), and a server that died was never replaced.
"""

from __future__ import annotations

import copy
import io
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from django_redisq import connection
from django_redisq.connection.embedded import EmbeddedServer, default_data_path, find_binary, runs
from django_redisq.settings.read import get_options
from tests.conftest import ROOT
from tests.helpers import wait_for
from tests.testapp import tasks

pytestmark = pytest.mark.skipif(find_binary() is None, reason="no server binary for the embedded Redis")

PROJECT_SETTINGS = """
SECRET_KEY = "x"
INSTALLED_APPS = ["django_redisq", "tests.testapp"]
DATABASES = {}
USE_TZ = True
TASKS = {"default": {"BACKEND": "django_redisq.backend.RedisQueueBackend", "QUEUES": ["default", "emails", "low"],
                     "OPTIONS": {"EMBEDDED": True}}}
"""


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[EmbeddedServer]:
    """TASKS on an embedded server of this test's own data file; stopped afterwards."""
    value = copy.deepcopy(settings.TASKS)
    value["default"]["OPTIONS"] = {"EMBEDDED": True, "EMBEDDED_PATH": str(tmp_path / "data" / "redisq.rdb")}
    server = EmbeddedServer.of(value["default"]["OPTIONS"]["EMBEDDED_PATH"])
    connection.reset()
    try:
        with override_settings(TASKS=value):
            yield server
    finally:
        connection.reset()
        server.stop()


def manage(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "settings", "PYTHONPATH": os.pathsep.join([str(project), str(ROOT)])}
    env.pop("REDISQ_TEST_REDIS_URL", None)
    return subprocess.run([sys.executable, "-m", "django", *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.slow
def test_two_projects_on_embedded_never_meet(tmp_path: Path):
    """The new-user path: two projects, each with ``"EMBEDDED": True`` and nothing else: each has its own server; a
    worker of one never sees the other's task; ``redisq embedded stop`` stops each."""
    projects = [tmp_path / "shop", tmp_path / "blog"]
    for project in projects:
        project.mkdir()
        (project / "settings.py").write_text(PROJECT_SETTINGS)
    shop, blog = projects
    try:
        enqueue = "import django; django.setup(); from tests.testapp import tasks; print(tasks.add.enqueue(1, 2).id)"
        done = subprocess.run([sys.executable, "-c", enqueue], cwd=shop, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "DJANGO_SETTINGS_MODULE": "settings",
                                   "PYTHONPATH": os.pathsep.join([str(shop), str(ROOT)])})
        assert done.returncode == 0, done.stderr
        task_id = done.stdout.split()[-1]
        other = manage(blog, "runworker", "--burst", "-v", "0")
        assert other.returncode == 0 and task_id not in other.stdout + other.stderr, other.stdout + other.stderr
        statuses = [json.loads(manage(p, "redisq", "embedded", "--json").stdout) for p in projects]
        assert statuses[0]["socket"] != statuses[1]["socket"] and statuses[0]["data_file"] != statuses[1]["data_file"]
        assert statuses[0]["pid"] and statuses[1]["pid"] and statuses[0]["pid"] != statuses[1]["pid"]
        mine = manage(shop, "runworker", "--burst")
        assert f"id={task_id}" in mine.stderr and "1 success" in mine.stderr, mine.stderr
    finally:
        stops = [manage(p, "redisq", "embedded", "stop") for p in projects]
    assert all(s.returncode == 0 and "stopped the embedded Redis (pid " in s.stdout for s in stops), stops
    assert not any(runs(s["pid"]) for s in statuses)
    assert "not running" in manage(shop, "redisq", "embedded", "status").stdout


def test_processes_of_one_project_share_its_server_and_its_path_derives_from_the_settings():
    here = default_data_path("tests.settings")
    assert here == default_data_path("tests.settings")  # every process of the project computes the same
    assert here != default_data_path("tests.worker_settings") != default_data_path("example_project.settings")
    assert len(EmbeddedServer.of(here).socket) < 100  # a unix socket's path limit, whatever the project's own path


def test_processes_starting_at_once_start_one_server(embedded: EmbeddedServer):
    sockets: list[str] = []
    threads = [threading.Thread(target=lambda: sockets.append(embedded.ensure())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(sockets) == 6 and len(set(sockets)) == 1
    found = subprocess.run(["pgrep", "-f", f"unixsocket:{embedded.socket}"], capture_output=True, text=True)
    assert len(found.stdout.split()) == 1, found.stdout  # one server, however many asked


def test_a_dead_server_is_replaced_and_a_stopped_one_keeps_its_tasks(embedded: EmbeddedServer):
    result = tasks.add.enqueue(1, 2)  # the first connection starts the server
    first = embedded.pid()
    assert first is not None and embedded.data_file == Path(get_options().embedded_path)
    embedded.stop()  # it saves first
    assert embedded.pid() is None
    assert tasks.add.get_result(result.id).status == "READY"  # the same client: the server started again, the task kept
    second = embedded.pid()
    assert second and second != first
    os.kill(second, signal.SIGKILL)  # died: no save, no goodbye
    assert wait_for(lambda: not runs(second), timeout=10)
    assert tasks.add.enqueue(2, 3).status == "READY"  # rejoined: a new server, not a dead socket retried for ever
    assert embedded.pid() not in (None, first, second)


def test_the_status_and_stop_commands(embedded: EmbeddedServer):
    def run(*args: str) -> str:
        out = io.StringIO()
        call_command("redisq", "embedded", *args, stdout=out)
        return out.getvalue()

    assert run().startswith("embedded Redis: not running: the next process that needs it starts it")
    tasks.noop.enqueue(1)
    text = run("status")
    assert text.startswith(f"embedded Redis: running (pid {embedded.pid()})") and f"socket: {embedded.socket}" in text
    assert "stop it with: manage.py redisq embedded stop" in text
    pid = embedded.pid()
    assert run("stop").startswith(f"stopped the embedded Redis (pid {pid}); its data is in {embedded.data_file}")
    assert not runs(pid) and run("stop").strip() == "the embedded Redis is not running"


def test_the_command_on_a_backend_without_embedded_says_so(r: Any):
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="does not use the embedded Redis"):
        call_command("redisq", "embedded", stdout=io.StringIO())
