"""The documentation site cannot rot: its code runs, and its reference pages match the code.

- The tutorial (docs/tutorial.md) is followed for real: a new ``startproject``, the page's
  files written from its code blocks, ``check``, ``migrate``, the view enqueuing, ``runworker``
  running the task, the failing task dead-lettered and shown in the admin, the periodic task
  listed and run. Only the Redis URL is changed, to the suite's own server.
- Every Python block of the how-to guides and the reference is used as what it is: a block
  titled ``settings.py`` is exec'd as settings and its ``TASKS`` must pass the backend's system
  checks; a block titled ``tasks.py`` is exec'd as a module and must define registered tasks;
  an ``OPTIONS`` (or ``TASKS[alias]``) fragment must pass the checks too; any other block
  must compile.
- The reference pages list exactly what the code has: settings (settings/read.py, core/options.py), the
  ``runworker`` and ``redisq`` options (their argparse parsers), system check ids, signals,
  metrics; and a producer in another language can enqueue as the wire-protocol page says.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import os
import re
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import django
import pytest
from django.test import override_settings

from django_redisq.core.options import GLOBALS, PARTITIONS, QUEUE_LIMITS, TUNABLES, Options
from django_redisq.settings.read import KNOWN, check_errors
from django_redisq.task import RedisTask, task
from tests.conftest import ROOT

DOCS = ROOT / "docs"
BACKEND = "django_redisq.backend.RedisQueueBackend"
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)(?P=fence)[ \t]*$", re.M | re.S)
TESTING = DOCS / "howto" / "testing.md"  # its blocks test the tutorial's project: they run there
GUIDES = sorted({*DOCS.glob("howto/*.md"), *DOCS.glob("reference/*.md"), *DOCS.glob("migrating/*.md")} - {TESTING})


def blocks(page: Path, lang: str = "python") -> list[tuple[str, str, int]]:
    """(title, code, line) of every fenced block of ``lang`` in ``page``, tabs' indented blocks included."""
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        info = m.group("info").strip()
        if info.split(" ", 1)[0] != lang:
            continue
        title = re.search(r'title="([^"]*)"', info)
        indent = len(m.group("indent"))
        code = "\n".join(line[indent:] for line in m.group("body").splitlines())
        found.append((title.group(1) if title else "", code, text[: m.start()].count("\n") + 1))
    return found


# -- the tutorial, followed in a new project ------------------------------------------------

TUTORIAL = DOCS / "tutorial.md"
REPLACES = {"shop/views.py"}  # the page says "Replace"; every other block is added to its file


def manage(project: Path, env: dict[str, str], *args: str, check: bool = True, timeout: float = 120) -> str:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
    out = done.stdout + done.stderr
    if check:
        assert done.returncode == 0, f"manage.py {' '.join(args)} exited {done.returncode}:\n{out}"
    return out


def in_one_shell(project: Path, env: dict[str, str], *commands: tuple[str, ...], then: str = "") -> list[str]:
    """What each ``manage.py`` command printed, all run by call_command in one ``manage.py shell`` (a process
    each costs Django's start), and then what the Python ``then`` printed, run after them. Each runs the system
    checks first, as ``manage.py`` does (they import the apps' tasks modules, where ``@periodic`` registers)."""
    code = ("import contextlib, io, json; from django.core.management import call_command\nouts = []\n"
            f"for argv in {list(commands)!r}:\n    o = io.StringIO(); call_command(*argv, stdout=o, skip_checks=False); outs.append(o.getvalue())\n"
            f"o = io.StringIO()\nwith contextlib.redirect_stdout(o):\n    exec({then!r})\nouts.append(o.getvalue())\n"
            "print('OUTS', json.dumps(outs))")
    out = manage(project, env, "shell", "-c", code)
    outs: list[str] = json.loads(next(line[5:] for line in out.splitlines() if line.startswith("OUTS ")))
    return outs


@pytest.mark.slow
def test_the_tutorial_builds_a_working_project(tmp_path: Path, redis_url: str, r: Any) -> None:
    text = TUTORIAL.read_text()
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    env["DJANGO_SUPERUSER_PASSWORD"] = "tutorial-only"
    subprocess.run([sys.executable, "-m", "django", "startproject", "mysite"], cwd=tmp_path, env=env, check=True)
    project = tmp_path / "mysite"
    manage(project, env, "startapp", "shop")

    written: set[str] = set()
    for title, code, line in blocks(TUTORIAL):
        assert title, f"tutorial.md:{line}: every Python block of the tutorial names its file (title=...)"
        path = project / title
        code = code.replace("redis://127.0.0.1:6379/0", redis_url)
        if title in REPLACES and title not in written:
            path.write_text(code + "\n")
        else:
            path.write_text((path.read_text() if path.exists() else "") + "\n\n" + code + "\n")
        written.add(title)
    assert written == {"mysite/settings.py", "mysite/urls.py", "shop/tasks.py", "shop/views.py"}

    # step 3: migrate, check
    manage(project, env, "migrate", "-v", "0")
    assert "System check identified no issues" in manage(project, env, "check")

    # steps 5 and 6: the view enqueues, a worker runs it, the view reports the result
    client = "from django.test import Client; print(Client(HTTP_HOST='127.0.0.1').get({url!r}).content.decode())"
    placed = json.loads(manage(project, env, "shell", "-c", client.format(url="/order/42/")).strip().splitlines()[-1])
    assert placed["status"] == "READY", placed
    manage(project, env, "runworker", "--burst")
    # step 7's shell command (the failing task, exactly as the page enqueues it) runs in the same process, after
    enqueue = "from shop.tasks import restock; restock.enqueue('mug', 0)"
    assert f'python manage.py shell -c "{enqueue}"' in text
    asked = manage(project, env, "shell", "-c", client.format(url=f"/task/{placed['task_id']}/") + "\n" + enqueue)
    status = json.loads(asked.strip().splitlines()[-1])
    assert status == {"status": "SUCCESSFUL", "attempts": 1, "return_value": "receipt for order 42 sent"}, status

    # step 7: that task ends in the dead letters after 3 attempts
    # one worker through the retries (0.5 s and 1 s away, which a burst worker would leave before): it exits once
    # it has settled the 3 attempts (without the scheduler, whose stock-report tick would count if a minute began)
    manage(project, env, "runworker", "--max-tasks", "3", "--no-scheduler", "-v", "0")
    dead = json.loads(manage(project, env, "redisq", "dead", "list", "--json"))["items"]
    assert [d["task"] for d in dead] == ["shop.tasks.restock"], dead
    assert dead[0]["failures"] == 3 and dead[0]["exc"] == "builtins.ZeroDivisionError", dead
    # steps that need no process of their own share one (call_command parses the same command line)
    admin_page = ("from django.test import Client; from django.contrib.auth.models import User; c = Client(HTTP_HOST='127.0.0.1'); "
                  "c.force_login(User.objects.get(username='admin')); r = c.get('/admin/django_redisq/deadletter/'); "
                  "print(r.status_code, 'shop.tasks.restock' in r.content.decode())")
    _, page = in_one_shell(project, env, ("createsuperuser", "--noinput", "--username", "admin", "--email", "admin@example.com"),
                           then=admin_page)
    assert page.strip().splitlines()[-1] == "200 True"
    _, listed, _ = in_one_shell(project, env, ("redisq", "dead", "replay", "--all", "--queue", "default"), ("redisq", "dead", "list", "--json"))
    assert json.loads(listed)["items"] == []

    # step 8: the periodic task is configured, listed, and runs when asked
    listed, _, _ = in_one_shell(project, env, ("redisq", "schedules", "--json"), ("redisq", "schedules", "run", "stock-report"))
    schedules = json.loads(listed)
    assert [s["name"] for s in schedules] == ["stock-report"], schedules
    manage(project, env, "runworker", "--burst", "-v", "0")
    schedules = json.loads(manage(project, env, "redisq", "schedules", "--json"))
    assert schedules[0]["last_run"], schedules

    # the testing guide's files, in this project: the ImmediateBackend, then a real Redis with in-process workers
    for title, code, line in blocks(TESTING):
        assert title, f"testing.md:{line}: every Python block names its file"
        if django.VERSION < (6,):  # the page's comment: Django 5.2 names the backport's module
            code = code.replace('"django.tasks.backends.', '"django_tasks.backends.')
        (project / title).write_text(code + "\n")
    # test_shop.py and test_capture.py in one run: the plugin's fixtures (--redisq) are only names until a test asks
    # for them (no autouse fixture), so test_shop.py runs there as it would without them
    for settings_module, *args in (("mysite.test_settings", "test_views.py"), ("mysite.settings", "--redisq", "test_shop.py", "test_capture.py")):
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ds", settings_module, *args],
                              cwd=project, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        tests = sum(len(re.findall(r"^def test_", (project / a).read_text(), re.M)) for a in args if a.endswith(".py"))
        assert re.search(rf"^{tests} passed", done.stdout, re.M), done.stdout


@pytest.mark.slow
@pytest.mark.corner  # a new project on the oldest Django too
def test_the_readmes_quick_start_works_pasted_into_a_new_project(tmp_path: Path, redis_url: str, r: Any) -> None:
    """The README's blocks, each headed by the file it goes in, pasted into a new startproject: check, migrate,
    the view enqueues, runworker runs the task, get_result says SUCCESSFUL."""
    readme = ROOT / "README.md"
    assert len(readme.read_bytes()) < 12 * 1024, "the README stays under 12 KB"
    for page in re.findall(r"https://django-redisq\.readthedocs\.io/en/latest/([\w/-]+)/", readme.read_text() + (ROOT / "pyproject.toml").read_text()):
        assert (DOCS / f"{page}.md").is_file(), f"the README or pyproject.toml links to a page the site does not have: {page}"
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    subprocess.run([sys.executable, "-m", "django", "startproject", "mysite"], cwd=tmp_path, env=env, check=True)
    project = tmp_path / "mysite"
    manage(project, env, "startapp", "shop")
    pasted = []
    for _, code, line in blocks(readme):
        target = re.match(r"# ([\w/]+\.py)", code)
        assert target, f"README.md:{line}: a Python block starts with the file it goes in"
        path, code = project / target.group(1), code.replace("redis://127.0.0.1:6379/0", redis_url)
        if path.name == "views.py":  # startapp's views.py holds only an import: the README's block is the file
            path.write_text(code + "\n")
        else:
            path.write_text((path.read_text() if path.exists() else "") + "\n\n" + code + "\n")
        pasted.append(target.group(1))
    assert pasted == ["mysite/settings.py", "shop/tasks.py", "shop/views.py"]
    assert 15 <= sum(len(code.splitlines()) for _, code, _ in blocks(readme)) <= 30, "a quick start of about 20 lines"
    assert "System check identified no issues" in manage(project, env, "check")
    manage(project, env, "migrate", "-v", "0")
    call = ("from django.test import RequestFactory; from shop.views import place_order; "
            "print(place_order(RequestFactory().get('/'), 7).content.decode())")
    placed = json.loads(manage(project, env, "shell", "-c", call).strip().splitlines()[-1])
    manage(project, env, "runworker", "--burst", "-v", "0")
    status = f"from shop.tasks import send_receipt; print(send_receipt.get_result({placed['task_id']!r}).status)"
    assert manage(project, env, "shell", "-c", status).strip().splitlines()[-1] == "SUCCESSFUL"


# -- the guides' blocks --------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _registries_restored() -> Iterator[None]:
    """The blocks register tasks (and stubs of the tasks a settings block names) and @periodic schedules
    process-wide: undone after each test, or every later worker of the suite would serve them (a process-pool
    child would import their modules, which no file holds)."""
    task_module, schedules_module = importlib.import_module("django_redisq.task"), importlib.import_module("django_redisq.schedules.registry")
    # the installed apps' tasks first: a worker in a test would import them (autodiscovery), and the restore below
    # would then drop what their modules registered, while the modules stay imported and never register again
    importlib.import_module("django_redisq.settings.discovery").load()
    registry, code_schedules = dict(task_module._registry), dict(schedules_module._code)
    yield
    task_module._registry.clear()
    task_module._registry.update(registry)
    schedules_module._code.clear()
    schedules_module._code.update(code_schedules)


def test_the_readmes_figures_in_prose_are_its_tables() -> None:
    """The README's claim of speed is read off its own table (one bench run, one date), so the two cannot drift: the
    prose once said 1,786 tasks/s and 2.1x above a table of 2,692/s."""
    text = (ROOT / "README.md").read_text()
    header = next(line for line in text.splitlines() if line.startswith("| | django-redisq |"))
    peers = [cell.strip().split(" ")[0] for cell in header.strip("|").split("|")[1:]]
    row = next(line for line in text.splitlines() if line.startswith("| drain, 1 process "))
    rates = [int(re.sub(r"[^\d]", "", cell)) for cell in row.strip("|").split("|")[1:]]
    table = dict(zip(peers, rates, strict=True))
    claim = re.search(r"One worker process drains ([\d,]+) tasks/s.*?: (.*?), in the same\s+bench run", text, re.S)
    assert claim, "the README's Fast line"
    assert int(claim.group(1).replace(",", "")) == table["django-redisq"]
    ratios = re.findall(r"([\d.]+)\u00d7 ([\w-]+)", claim.group(2))
    assert ratios, claim.group(2)
    for ratio, peer in ratios:
        assert float(ratio) == round(table["django-redisq"] / table[peer], 1), (peer, ratio)


def guide_blocks() -> list[Any]:
    found = []
    for page in GUIDES:
        for title, code, line in blocks(page):
            found.append(pytest.param(title, code, id=f"{page.relative_to(DOCS)}:{line}"))
    return found


def stub_tasks(paths: list[str]) -> None:
    """Register a task under each dotted path a settings block names (``shop.tasks.nightly_report``)."""
    for path in paths:
        module, name = path.rsplit(".", 1)

        def fn(*args: Any, **kwargs: Any) -> None:
            return None

        fn.__module__, fn.__name__, fn.__qualname__ = module, name, name
        task(fn)


def check_tasks(params: dict[str, Any]) -> None:
    """``TASKS[alias]`` passes the backend's system checks (schedules included), with every queue it names configured."""
    opts = params.setdefault("OPTIONS", {})
    stub_tasks([s["task"] for s in (opts.get("SCHEDULES") or {}).values() if isinstance(s, dict) and "task" in s])
    with override_settings(CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:6379/0"}}):
        from django_redisq.schedules import registry as schedules

        problems = check_errors("default", params) + schedules.check_errors("default", params)
    assert not problems, [f"{p.id}: {p.msg}" for p in problems]


def queues_named(opts: dict[str, Any]) -> list[str]:
    names = ["default", *opts.get("QUEUE_OPTIONS", {}), *(q for q in opts.get("HEALTH", {}) if q != "*")]
    for profile in opts.get("WORKERS", {}).values():
        names += list(profile.get("QUEUES", []))
    names += [s["queue_name"] for s in opts.get("SCHEDULES", {}).values() if "queue_name" in s]
    return list(dict.fromkeys(names))


@pytest.mark.parametrize(("title", "code"), guide_blocks())
def test_guide_block(title: str, code: str) -> None:
    uncommented = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("#")).strip()
    tree = None if uncommented.startswith('"') else ast.parse(code)
    if title.endswith("settings.py"):
        namespace: dict[str, Any] = {"INSTALLED_APPS": ["django.contrib.admin", "django_redisq"]}
        exec(compile(tree, "settings.py", "exec"), namespace)  # type: ignore[arg-type]
        assert "TASKS" in namespace, "a settings block sets TASKS"
        for params in namespace["TASKS"].values():
            check_tasks(params)
    elif title.endswith("tasks.py"):
        module = types.ModuleType("docs_examples_tasks")
        queues = ["default", *re.findall(r'queue_name="([\w.-]+)"', code)]  # as the guide's settings would list them
        with override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": queues, "OPTIONS": {"REDIS_URL": "redis://127.0.0.1:1/0"}}}):
            exec(compile(tree, "tasks.py", "exec"), module.__dict__)  # type: ignore[arg-type]
        assert any(isinstance(v, RedisTask) for v in vars(module).values()), "a tasks.py block defines a task"
    elif tree is None:  # a fragment of TASKS[alias] ("QUEUES": ..., "OPTIONS": ...) or of its OPTIONS
        value = eval("{" + code + "\n}", {"timedelta": __import__("datetime").timedelta})
        params = value if ("OPTIONS" in value or "QUEUES" in value) else {"OPTIONS": value}
        opts = params.setdefault("OPTIONS", {})
        params.setdefault("QUEUES", queues_named(opts))
        params["BACKEND"] = BACKEND
        check_tasks(params)
    else:
        compile(tree, title or "block", "exec")


def test_the_workflow_shapes_run_as_pasted(r: Any, make_worker: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Workflows guide's four shapes, with the tasks its media/tasks.py block defines, enqueued as written and
    drained: every one succeeds (the page once used eight tasks and three variables it never defined)."""
    import copy

    from django.conf import settings

    from django_redisq.compat import TaskResultStatus
    from tests.helpers import drain

    page = DOCS / "howto" / "workflows.md"
    (tasks_code,) = [code for title, code, _ in blocks(page) if title == "media/tasks.py"]
    shapes = next(code for title, code, _ in blocks(page) if not title and "from media.tasks import" in code)
    package, module = types.ModuleType("media"), types.ModuleType("media.tasks")
    package.__path__ = []
    monkeypatch.setitem(sys.modules, "media", package)
    monkeypatch.setitem(sys.modules, "media.tasks", module)
    value = copy.deepcopy(settings.TASKS)
    value["default"]["OPTIONS"]["IMPORTS"] = ["media.tasks"]  # as an installed app's tasks module would be
    with override_settings(TASKS=value):
        exec(compile(tasks_code, "media/tasks.py", "exec"), module.__dict__)
        namespace: dict[str, Any] = {}
        exec(compile(shapes, "workflows.md", "exec"), namespace)
        workflows, r3 = [namespace[name] for name in ("wf", "g", "c")], namespace["r3"]
        for _ in range(30):
            make_worker(concurrency=4).run()
            if all(w.refresh().status == TaskResultStatus.SUCCESSFUL for w in workflows):
                break
        assert [w.status for w in workflows] == [TaskResultStatus.SUCCESSFUL] * 3
        assert [workflows[0].return_value, workflows[2].return_value] == [f"b/{len('<html of https://example.com/a.png>')}",
                                                                          "2 thumbnails ready for user 42"]
        drain(make_worker, [r3])
        assert r3.status == TaskResultStatus.SUCCESSFUL


# -- reference pages match the code -------------------------------------------------------

def table_rows(page: Path) -> list[list[str]]:
    rows = []
    for line in page.read_text().splitlines():
        if line.startswith("| `"):
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def test_the_settings_reference_lists_every_option_with_the_codes_defaults() -> None:
    rows = {row[0].strip("`"): row for row in table_rows(DOCS / "reference" / "settings.md")}
    documented = set(rows)
    accepted = set(KNOWN) | {PARTITIONS}
    assert documented == accepted, f"undocumented: {sorted(accepted - documented)}; not an option: {sorted(documented - accepted)}"
    defaults = Options()
    for name, (attr, _, _) in (TUNABLES | GLOBALS).items():
        shown = float(rows[name][1].split()[0].replace(",", ""))
        assert shown == getattr(defaults, attr), f"{name}: the page says {rows[name][1]}, the code {getattr(defaults, attr)}"
    for name, row in rows.items():
        per_queue = "yes" if name in TUNABLES else "only" if name in QUEUE_LIMITS or name == PARTITIONS else "no"
        assert row[2] == per_queue, f"{name}: per queue is {per_queue!r}, the page says {row[2]!r}"
    assert rows["REDIS_URL"][1] == "`redis://127.0.0.1:6379/0`" and float(rows["DURABLE_TIMEOUT"][1]) == Options().durable_timeout


BASE_OPTIONS = {"-h", "--help", "--version", "-v", "--verbosity", "--settings", "--pythonpath", "--traceback", "--no-color",
                "--force-color", "--skip-checks"}


def is_global(action: argparse.Action) -> bool:
    """A global option of ``redisq`` repeated on a subcommand (documented once, under ``redisq``)."""
    from django_redisq.management.cli.args import GLOBAL_OPTIONS

    return action.default is argparse.SUPPRESS and set(action.option_strings) <= GLOBAL_OPTIONS


def parser_options(parser: argparse.ArgumentParser, path: str, out: dict[str, set[str]]) -> dict[str, set[str]]:
    out[path] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parser_options(sub, f"{path} {name}", out)
        elif action.option_strings and not set(action.option_strings) & BASE_OPTIONS and not is_global(action):
            out[path] |= set(action.option_strings)
    return out


def test_the_commands_reference_lists_every_option_of_every_command() -> None:
    from django_redisq.management.commands import redisq, runworker

    actual: dict[str, set[str]] = {}
    parser_options(runworker.Command().create_parser("manage.py", "runworker"), "runworker", actual)
    parser_options(redisq.Command().create_parser("manage.py", "redisq"), "redisq", actual)
    documented: dict[str, set[str]] = {}
    section = ""
    for line in (DOCS / "reference" / "commands.md").read_text().splitlines():
        if m := re.match(r"^#{2,4} ((?:runworker|redisq).*)$", line):
            section = m.group(1).strip()
            documented[section] = set()
        elif line.startswith("| `-") and section:
            documented[section] |= set(re.findall(r"`(-[-\w]+)`", line.split("|")[1]))
    assert documented == actual


def code_check_ids() -> set[str]:
    ids = set()
    for path in (ROOT / "django_redisq").rglob("*.py"):
        ids |= set(re.findall(r'"([EW]\d{3})"', path.read_text()))
    return ids


def test_the_checks_reference_lists_every_check_id() -> None:
    documented = set(re.findall(r"`django_redisq\.([EW]\d{3})`", (DOCS / "reference" / "checks.md").read_text()))
    assert documented == code_check_ids()


def test_the_signals_reference_lists_every_signal() -> None:
    from django.dispatch import Signal

    from django_redisq import signals

    ours = {name for name, value in vars(signals).items() if isinstance(value, Signal)}
    documented = set(re.findall(r"`django_redisq\.signals\.(\w+)`", (DOCS / "reference" / "signals.md").read_text()))
    assert documented == ours


def test_the_metrics_reference_lists_every_metric(r: Any) -> None:
    from prometheus_client import generate_latest

    from django_redisq.ops.metrics import exposition
    from django_redisq.worker.observability.metrics import WorkerMetrics, worker_info

    worker = WorkerMetrics(worker_info("w", "threads", ["default"]), busy=lambda: 0.0, since_beat=lambda: 0.0, concurrency=2)
    text = exposition()[0].decode() + generate_latest(worker.registry).decode()
    exported = {m for m in re.findall(r"^# TYPE (redisq_\w+)", text, re.M) if not m.endswith("_created")}
    documented = " ".join(row[0] for row in table_rows(DOCS / "reference" / "metrics.md"))
    missing = {m for m in exported if not re.search(rf"`{m}(_total|_info)?`", documented)}
    assert not missing, missing


# -- the wire protocol: a producer in another language ------------------------------------

def test_a_foreign_producer_enqueues_as_the_wire_protocol_page_says(r: Any, make_worker: Any) -> None:
    """A raw client runs the assembled enqueue.lua with the documented KEYS and ARGV; a worker runs the task."""
    from django_redisq.compat import TaskResultStatus
    from django_redisq.store import scripts
    from tests.testapp import tasks

    page = (DOCS / "reference" / "wire-protocol.md").read_text()
    assert "scripts.source('enqueue')" in page
    p = "redisq:{default}:"
    message = json.dumps({"v": 1, "args": [2, 3], "kwargs": {}})
    path = tasks.add.module_path
    reply = r.eval(scripts.source("enqueue"), 4, p + "pending", p + "scheduled", p + "prioritized", p + "prioseq",
                   p, 1, "from-elsewhere-1", message, path, 0, "", 0, "")
    assert reply[1:] == [""], reply
    make_worker("default").run()
    result = tasks.add.get_result("from-elsewhere-1")
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5


def test_the_wire_protocol_page_names_every_key_of_the_schema() -> None:
    """store/keys.py's docstring is the key table the scripts follow; the page for other producers may not lag it."""
    import re

    from django_redisq.store import keys as schema

    documented = set(re.findall(r"``(P:[^`]+)``", schema.__doc__ or ""))
    page = (DOCS / "reference" / "wire-protocol.md").read_text()
    assert len(documented) > 20
    assert sorted(k for k in documented if f"`{k}`" not in page) == []
