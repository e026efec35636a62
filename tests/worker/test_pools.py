"""The three execution pools against a real redis-server: results, time limits, crashes, cancellation, shutdown.

Each test serves the queues with a long-running worker in a thread (a burst
worker per round would start new children each time) and watches results.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from django_redisq.compat import TaskResultStatus
from django_redisq.worker.worker import Worker
from tests.helpers import keys, parent_pid, wait_for, where_is
from tests.testapp import tasks
from tests.testapp.tasks import EFFECTS, STOPS

POOLS = ["threads", "processes", "asyncio"]
TIMEOUT_PATH = "django_redisq.exceptions.TaskTimeout"
CANCELLED_PATH = "django_redisq.exceptions.TaskCancelled"
LOST_PATH = "django_redisq.exceptions.WorkerLost"


@contextmanager
def serving(pool: str, *queues: str, **kwargs) -> Iterator[Worker]:
    """A worker with ``pool`` serving in a thread until the block ends (then a warm stop)."""
    kwargs.setdefault("concurrency", 2)
    worker = Worker(list(queues) or None, pool=pool, scheduler=False, **kwargs)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        yield worker
    finally:
        worker.request_stop()
        t.join(30)
        if t.is_alive():
            worker.request_force_stop()
            worker.pool.kill()
            raise AssertionError("the worker did not stop within 30 s")


def settled(*results, timeout: float = 30.0) -> None:
    def done() -> bool:
        for res in results:
            res.refresh()
        return all(res.is_finished for res in results)

    assert wait_for(done, timeout), [res.status for res in results]


def effect(r, key: str) -> int:
    return int(r.hget(EFFECTS, key) or 0)


@pytest.fixture(autouse=True)
def _clear_stops():
    STOPS.clear()
    yield
    STOPS.clear()


# -- every pool ----------------------------------------------------------------


@pytest.mark.parametrize("pool", POOLS)
def test_tasks_run_and_their_results_are_stored(r, pool):
    sync = tasks.add.enqueue_many([([i, i], {}) for i in range(30)])
    nap = tasks.async_nap.delay(0.01)
    with serving(pool):
        settled(*sync, nap)
    assert [res.return_value for res in sync] == [2 * i for i in range(30)]
    assert nap.return_value == 0.01
    assert r.llen(keys().pending) == 0 and not list(r.scan_iter(match=f"{keys().prefix}processing:*"))


@pytest.mark.parametrize("pool", POOLS)
def test_a_task_past_its_limit_is_stopped_at_the_limit_retried_then_dead_with_reason_timeout(r, pool):
    res = tasks.loops_recorded.delay("late")  # timeout=0.4, max_retries=1
    start = time.monotonic()
    with serving(pool, concurrency=1):
        settled(res)
    took = time.monotonic() - start
    assert res.status == TaskResultStatus.FAILED and where_is(r, res.id) == ["dead"]
    assert r.hget(keys().task(res.id), "reason") == "timeout"
    assert [e.exception_class_path for e in res.errors] == [TIMEOUT_PATH, TIMEOUT_PATH]
    # the soft limit: TaskTimeout inside the task, whose finally block ran, in every pool
    assert effect(r, "late:started") == 2 and effect(r, "late:finally") == 2
    # two attempts of 0.4 s and the pool's start: about 2 s quiet, 8.4 s on a machine loaded 6-fold; unlimited, the two
    # attempts would take 60 s: half that proves the limit, however busy the machine
    assert took < 30, took


def test_an_async_task_past_its_limit_is_cancelled_on_the_event_loop(r):
    res = tasks.async_loops.delay("async-late", 5)  # timeout=0.2
    with serving("asyncio"):
        settled(res)
    assert r.hget(keys().task(res.id), "reason") == "timeout"
    # not before its limit; after it, room for a loaded machine (the task would run 5 s)
    assert len(STOPS["async-late"]) == 1 and 0.2 <= STOPS["async-late"][0] < 2.0


@pytest.mark.parametrize("pool", POOLS)
def test_a_running_task_is_cancelled_where_it_runs_and_never_retried(r, pool):
    task = tasks.async_waits if pool == "asyncio" else tasks.waits_to_be_cancelled  # max_retries=3
    res = task.delay("c", 30)
    with serving(pool) as worker:
        assert wait_for(lambda: effect(r, "c:started") == 1, 20)
        asked = time.monotonic()
        assert worker.pool.cancel(res.id)
        settled(res)
        took = time.monotonic() - asked
    assert took < 15.0, took  # stopped, not run out (30 s; its status says so too): ~0.2 s quiet, over 5 s under load
    assert res.status == TaskResultStatus.FAILED and [e.exception_class_path for e in res.errors] == [CANCELLED_PATH]
    assert r.hget(keys().task(res.id), "reason") == "cancelled" and where_is(r, res.id) == ["dead"]
    assert effect(r, "c:started") == 1  # not retried
    if pool != "processes":  # in a thread or on the loop the task unwinds; a killed child runs no finally
        assert effect(r, "c:finally") == 1


@pytest.mark.parametrize("pool", POOLS)
def test_cancel_stops_a_running_task_where_it_runs(r, pool):
    """The public API end to end: the request in Redis, the worker's look at it, the pool's stop, the burial."""
    import django_redisq

    task = tasks.async_waits if pool == "asyncio" else tasks.waits_to_be_cancelled  # max_retries=3
    res = task.delay("api", 30)
    with serving(pool) as worker:
        assert wait_for(lambda: effect(r, "api:started") == 1, 20)
        asked = time.monotonic()
        assert django_redisq.cancel(res, who="ops") == "requested"
        settled(res)
        took = time.monotonic() - asked
        other = tasks.add.delay(2, 2)  # the worker goes on
        settled(other)
        assert worker.stopping is False
    assert took < 15.0, took  # stopped, not run out (30 s; its status says so too): ~0.2 s quiet, over 5 s under load
    assert res.status == TaskResultStatus.FAILED and [e.exception_class_path for e in res.errors] == [CANCELLED_PATH]
    assert "cancelled by ops" in res.errors[0].traceback
    h = r.hgetall(keys().task(res.id))
    assert h["reason"] == "cancelled" and h["failures"] == "0" and where_is(r, res.id) == ["dead"]
    assert r.hlen(keys().cancels) == 0  # the request went with the burial
    assert effect(r, "api:started") == 1 and other.return_value == 4


def test_cancel_of_pending_and_scheduled_tasks_needs_no_worker(r):
    from datetime import timedelta

    from django.utils import timezone

    import django_redisq

    pending = tasks.add.delay(1, 2)
    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
    assert [django_redisq.cancel(x) for x in (pending, later)] == ["cancelled", "cancelled"]
    with serving("processes", concurrency=1):
        after = tasks.add.delay(3, 3)
        settled(after)
    for res in (pending, later):
        res.refresh()
        assert res.status == TaskResultStatus.FAILED and res.errors[-1].exception_class_path == CANCELLED_PATH
        assert where_is(r, res.id) == ["dead"]


@pytest.mark.parametrize("pool", POOLS)
def test_a_warm_stop_lets_running_tasks_finish_and_hands_back_the_rest(r, pool):
    task = tasks.async_waits if pool == "asyncio" else tasks.waits_to_be_cancelled
    running = [task.delay(f"s{i}", 0.6) for i in range(2)]
    with serving(pool, prefetch=4) as worker:
        assert wait_for(lambda: effect(r, "s0:started") + effect(r, "s1:started") == 2, 20)
        later = tasks.add.enqueue_many([([i, 0], {}) for i in range(5)])
        time.sleep(0.1)
        worker.request_stop()
    for res in running:
        res.refresh()
        assert res.status == TaskResultStatus.SUCCESSFUL, res.errors
    for res in later:  # run before the stop, or handed back untouched
        res.refresh()
        assert res.status == TaskResultStatus.SUCCESSFUL or where_is(r, res.id) == ["pending"]
    assert not list(r.scan_iter(match=f"{keys().prefix}processing:*"))


# -- the process pool ------------------------------------------------------------


def test_process_pool_tasks_run_in_children_one_at_a_time(r):
    results = tasks.whose_pid.enqueue_many([(["pid"], {}) for _ in range(10)])
    with serving("processes", concurrency=2):
        settled(*results)
    pids = {res.return_value for res in results}
    assert os.getpid() not in pids and len(pids) == 2


def test_a_task_blocked_in_a_c_call_is_killed_at_its_hard_limit_and_its_child_replaced(r):
    res = tasks.blocks_in_c.delay("c-call")  # timeout=0.5, max_retries=1, one time.sleep(30)
    after = tasks.add.delay(2, 3)
    start = time.monotonic()
    with serving("processes", concurrency=1) as worker:
        settled(res, after)
        took = time.monotonic() - start
        replaced = worker.pool.replaced
    assert res.status == TaskResultStatus.FAILED and r.hget(keys().task(res.id), "reason") == "timeout"
    assert [e.exception_class_path for e in res.errors] == [TIMEOUT_PATH, TIMEOUT_PATH]
    assert "its child process was killed" in res.errors[-1].traceback
    assert effect(r, "c-call") == 2
    assert 2 * (0.5 + 1.0) <= took < 30, took  # two attempts, each killed at the limit plus the grace (unkilled: 60 s)
    assert replaced == 2 and after.return_value == 5


def test_a_child_killed_mid_task_fails_only_that_attempt_and_the_worker_goes_on(r):
    once = tasks.dies_once.delay("dies")  # SIGKILLs its child on the first run, max_retries=1
    always = tasks.kills_its_worker.delay()  # max_retries=0
    with serving("processes", concurrency=1) as worker:
        settled(once, always)
        after = tasks.add.delay(1, 1)
        settled(after)
        replaced = worker.pool.replaced
    assert once.status == TaskResultStatus.SUCCESSFUL and [e.exception_class_path for e in once.errors] == [LOST_PATH]
    assert "was killed by SIGKILL" in once.errors[0].traceback
    assert always.status == TaskResultStatus.FAILED and r.hget(keys().task(always.id), "reason") == "worker_lost"
    assert after.return_value == 2 and replaced == 2


def test_children_are_recycled_after_max_tasks_per_child(r):
    results = tasks.whose_pid.enqueue_many([(["n"], {}) for _ in range(9)])
    with serving("processes", concurrency=1, max_tasks_per_child=3) as worker:
        settled(*results)
        replaced = worker.pool.replaced
    assert len({res.return_value for res in results}) == 3 and replaced >= 2


def test_a_child_above_its_memory_limit_is_recycled(r):
    results = [tasks.hoards_memory.delay("mem", 100) for _ in range(4)]  # 100 MiB kept per task
    with serving("processes", concurrency=1, max_memory_per_child=256 * 2**20):
        settled(*results)
    assert all(res.status == TaskResultStatus.SUCCESSFUL for res in results)
    assert 2 <= len({res.return_value for res in results}) <= 3


def test_children_die_with_a_killed_worker(run_worker_process, r):
    import signal

    res = tasks.waits_to_be_cancelled.delay("orphan", 30)
    wp = run_worker_process("--pool", "processes", "-c", "1", "-v", "2")
    assert wait_for(lambda: effect(r, "orphan:started") == 1, 30)
    template = [int(p) for p in os.popen(f"pgrep -P {wp.proc.pid}").read().split()]
    children = template + [int(p) for t in template for p in os.popen(f"pgrep -P {t}").read().split()]
    assert len(children) >= 2  # the template and the child it forked
    wp.proc.send_signal(signal.SIGKILL)
    wp.proc.wait(10)
    assert wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in children), 5)
    assert res.id in r.lrange(next(iter(r.scan_iter(match=f"{keys().prefix}processing:*"))), 0, -1)  # for the reaper


PLANTED = """\
import os
with open({marker!r}, "a") as f:  # an attacker's code, in whichever process imports this
    f.write(f"{{__name__}} planted in the working directory ran in pid {{os.getpid()}}\\n")
__path__[:] = [{real_dir!r}]  # then it goes on as the real package: nothing else looks wrong
__file__ = {real_init!r}
exec(compile(open(__file__).read(), __file__, "exec"))
"""
MANAGE_PY = """\
import sys
from django.core.management import execute_from_command_line
execute_from_command_line(sys.argv)
"""


def test_children_import_from_the_workers_path_never_from_its_working_directory(run_worker_process, r, tmp_path):
    """``django_redisq`` and ``django`` packages planted in the directory runworker was started from run in no
    child: a child imports from exactly the worker's ``sys.path``, here the project's, as its manage.py gives it."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import django

    import django_redisq

    marker, cwd, project = tmp_path / "planted-code-ran", tmp_path / "cwd", tmp_path / "project"
    for package in (django_redisq, django):
        real = Path(package.__file__)
        planted = cwd / package.__name__ / "__init__.py"
        planted.parent.mkdir(parents=True)
        planted.write_text(PLANTED.format(marker=str(marker), real_dir=str(real.parent), real_init=str(real)))
    project.mkdir()
    (project / "manage.py").write_text(MANAGE_PY)
    (project / "path.py").write_text("import json, sys\nprint(json.dumps(sys.path))\n")
    res = tasks.import_path.delay()
    wp = run_worker_process("--pool", "processes", "-c", "1", "--burst", cwd=cwd,
                            manage=[sys.executable, str(project / "manage.py")])
    out = wp.output()
    assert not marker.exists(), marker.read_text() + out
    assert wp.proc.returncode == 0, out
    res.refresh()
    assert res.status == TaskResultStatus.SUCCESSFUL, out
    workers_path = json.loads(subprocess.run([sys.executable, str(project / "path.py")], cwd=cwd, env=wp.env,
                                             capture_output=True, text=True, check=True).stdout)
    assert res.return_value == workers_path and workers_path[0] == str(project)  # the worker's path, nothing more
    assert str(cwd) not in workers_path and "" not in workers_path


# -- the asyncio pool ------------------------------------------------------------


def test_the_asyncio_pool_runs_hundreds_of_io_bound_tasks_at_once(r):
    results = tasks.async_nap.enqueue_many([([0.5], {}) for _ in range(300)])
    start = time.monotonic()
    with serving("asyncio", concurrency=300):
        settled(*results)
        took = time.monotonic() - start
    assert all(res.return_value == 0.5 for res in results)
    # one after another: 150 s; at once, 0.5 s plus the worker's start and 300 settles (2-4 s quiet, 5.3 s seen in a
    # loaded CI run): any bound far below the serial time proves the point, however busy the machine
    assert took < 60, took


def test_an_idle_asyncio_pool_settles_a_finished_task_at_once(r):
    """Its lane has moved on when a task ends: the flusher is woken instead of waiting out SETTLE_WITHIN (50 ms)."""
    woken: list[int] = []
    with serving("asyncio", concurrency=10) as worker:
        wake = worker.settler.wake
        real_set = wake.set
        wake.set = lambda: (woken.append(1), real_set())[1]  # type: ignore[method-assign]
        for i in range(7):
            res = tasks.async_nap.delay(0)
            assert wait_for(lambda res=res: res.refresh() or res.is_finished, 5, step=0.002)
            assert len(woken) >= i + 1, woken  # the flusher was woken for it (the fault: it waited out SETTLE_WITHIN)


def test_django_async_safety_holds_on_the_asyncio_pool(r):
    res = tasks.async_uses_orm_unsafely.delay()
    with serving("asyncio"):
        settled(res)
    assert res.status == TaskResultStatus.FAILED
    assert res.errors[0].exception_class_path == "django.core.exceptions.SynchronousOnlyOperation"


def test_after_a_replacement_a_spare_child_is_set_up_ahead_so_the_next_one_is_instant(r):
    results = tasks.whose_pid.enqueue_many([(["spare"], {}) for _ in range(2)])
    with serving("processes", concurrency=1, max_tasks_per_child=1) as worker:
        settled(*results)
        pool = worker.pool
        assert wait_for(lambda: pool._spare is not None and pool._spare.done(), 30)
        spare_pid = pool._spare.result().process.pid
        after = tasks.whose_pid.delay("spare")
        settled(after)  # its child is then recycled: the spare takes its place
        # the replacement is the spare set up ahead, not a child started from scratch (which takes most of a second)
        assert wait_for(lambda: (c := pool.children[0]) is not None and c.process.pid == spare_pid, 5, step=0.005)
    assert after.return_value != spare_pid


def test_a_child_that_cannot_set_up_stops_the_worker_with_the_reason(r):
    from django.core.exceptions import ImproperlyConfigured

    from django_redisq import task
    from django_redisq.task import _registry

    def orphan() -> None: ...

    orphan.__module__ = "tests.no_such_module"  # the child imports every module that defines a task
    orphan.__qualname__ = "orphan"
    t = task(orphan)
    res = tasks.add.delay(1, 1)
    try:
        worker = Worker(None, pool="processes", concurrency=2, burst=True)
        with pytest.raises(ImproperlyConfigured, match=r"could not start: ModuleNotFoundError: No module named 'tests\.no_such_module'"):
            worker.run()
    finally:
        _registry.pop(t.module_path, None)
    assert where_is(r, res.id) == ["pending"]  # nothing was fetched
    import subprocess

    found = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "django_redisq.worker.pools.child"], capture_output=True, text=True)
    assert found.stdout.split() == []  # the child that did start was stopped too


# -- children forked from a template --------------------------------------------


def test_children_are_forked_from_one_template_and_hold_only_their_own_pipe(r):
    """Every child's parent is the pool's template (a fresh interpreter, not the worker), and a child holds
    none of the worker's sockets: one socket (its end of its pipe to the worker), no other."""
    results = tasks.open_descriptors.enqueue_many([((), {}) for _ in range(6)])
    with serving("processes", concurrency=2) as worker:
        settled(*results)
        spawn = worker.pool._spawn
        template = spawn.template
        assert template is not None and template.alive() and spawn.templates_started == 1
        children = {c.pid for c in worker.pool.children if c is not None}
        ppids = {parent_pid(pid) for pid in children}
        cmdline = open(f"/proc/{template.pid}/cmdline").read()
    assert ppids == {template.pid} and template.pid != os.getpid()
    if template.forked:  # this process had no other thread when the pool was built: a fork of it, made then
        assert cmdline == open("/proc/self/cmdline").read()
    else:  # a fresh interpreter
        assert "django_redisq.worker.pools.child" in cmdline and "template(" in cmdline
    for res in results:
        assert res.status == TaskResultStatus.SUCCESSFUL
        held = res.return_value
        assert held["ppid"] == template.pid
        assert held.get("socket", 0) == 1, held  # its pipe to the worker; not the worker's Redis sockets, nor the template's


def test_a_template_that_dies_is_started_again_and_the_pool_goes_on(r):
    import signal

    first = tasks.whose_pid.delay("before")
    with serving("processes", concurrency=2) as worker:
        settled(first)
        spawn = worker.pool._spawn
        old = spawn.template
        old_children = {c.pid for c in worker.pool.children if c is not None}
        os.kill(old.pid, signal.SIGKILL)  # its children die with it (PR_SET_PDEATHSIG)
        assert wait_for(lambda: not old.alive(), 5)
        assert wait_for(lambda: not any(os.path.exists(f"/proc/{pid}/cmdline") and open(f"/proc/{pid}/cmdline").read()
                                        for pid in old_children), 5)
        results = tasks.whose_pid.enqueue_many([(["after"], {}) for _ in range(6)])
        settled(*results)
        new = spawn.template
        assert new is not None and new is not old and new.alive() and spawn.templates_started == 2
        assert {c.process.pid for c in worker.pool.children if c is not None} <= {
            int(p) for p in os.popen(f"pgrep -P {new.pid}").read().split()}
    assert all(res.status == TaskResultStatus.SUCCESSFUL for res in results)
    assert not {res.return_value for res in results} & old_children


def test_a_child_is_ready_long_before_a_fresh_interpreter_could_set_up_django(r):
    """The template sets up Django once; each child after it is a fork of it, ready in milliseconds (a fresh
    interpreter importing Django takes about a second). The verdict is the fork (each child's parent is the
    template); the time is bounded only against a stall, however busy the machine."""
    from django_redisq.worker.pools.children import Children, config_for

    spawn = Children(config_for("default", "w-ready"))
    try:
        t0 = time.monotonic()
        first = spawn.new()
        t1 = time.monotonic()
        second = spawn.new()
        t2 = time.monotonic()
        third = spawn.take()
        t3 = time.monotonic()
        assert t2 - t1 < 5 and t3 - t2 < 5, (t1 - t0, t2 - t1, t3 - t2)  # about 10 ms each, quiet
        assert len({first.pid, second.pid, third.pid, spawn.template.pid}) == 4
        # forked from the set-up template, not started afresh
        assert {parent_pid(c.pid) for c in (first, second, third)} == {spawn.template.pid}
        assert all(c.alive() for c in (first, second, third))
    finally:
        for c in (first, second, third):
            c.end()
        spawn.close()
    assert not spawn.template and not any(c.alive() for c in (first, second, third))


def test_runworker_forks_its_template_before_any_thread_and_its_children_hold_no_socket_of_the_worker(run_worker_process, r):
    """``runworker`` builds its pool before it has a thread or a socket: the template is a fork of the worker made
    then (same command line, its parent the worker), Django already set up; each child is forked from it and
    holds one socket, its own pipe. All of them go with a killed worker."""
    import signal

    results = tasks.open_descriptors.enqueue_many([((), {}) for _ in range(4)])
    wp = run_worker_process("--pool", "processes", "-c", "2", "-v", "2")
    settled(*results)
    templates = [int(p) for p in os.popen(f"pgrep -P {wp.proc.pid}").read().split()]
    assert len(templates) == 1, templates
    template = templates[0]
    assert open(f"/proc/{template}/cmdline").read() == open(f"/proc/{wp.proc.pid}/cmdline").read()
    children = [int(p) for p in os.popen(f"pgrep -P {template}").read().split()]
    assert len(children) == 2
    for res in results:
        assert res.status == TaskResultStatus.SUCCESSFUL
        assert res.return_value["ppid"] == template and res.return_value.get("socket", 0) == 1, res.return_value
    wp.proc.send_signal(signal.SIGKILL)
    wp.proc.wait(10)
    assert wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in [template, *children]), 5)


def test_a_template_with_threads_starts_its_children_afresh_instead_of_forking(r, caplog):
    """A task module that starts a thread at import makes the template multi-threaded: a fork of it would copy
    the locks that thread holds, so each child is a fresh interpreter of the worker's (its parent: the worker)."""
    import copy
    import subprocess

    from django.conf import settings
    from django.test import override_settings

    from django_redisq.task import _registry
    from tests.testapp import threaded_tasks

    # only this test's workers import the module (IMPORTS): its thread would make every other test's template afresh
    tasks_setting = copy.deepcopy(settings.TASKS)
    tasks_setting["default"]["OPTIONS"]["IMPORTS"] = [
        *tasks_setting["default"]["OPTIONS"].get("IMPORTS", []), "tests.testapp.threaded_tasks"]
    try:
        with override_settings(TASKS=tasks_setting):
            results = threaded_tasks.parent_pid.enqueue_many([((), {}) for _ in range(4)])
            with caplog.at_level("WARNING", logger="django_redisq"), serving("processes", concurrency=2) as worker:
                settled(*results)
                template = worker.pool._spawn.template
                assert template is not None and template.threads > 1
                children = [c for c in worker.pool.children if c is not None]
        assert all(res.status == TaskResultStatus.SUCCESSFUL and res.return_value == os.getpid() for res in results)
        assert children and all(isinstance(c.process, subprocess.Popen) for c in children)  # the worker's own children
        assert "children are started afresh, not forked" in caplog.text
    finally:
        _registry.pop(threaded_tasks.parent_pid.module_path, None)
