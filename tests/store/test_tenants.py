"""Fair to every tenant, with real ``runworker`` processes (issue 40): a fair queue serves a small key before a big
key's backlog, ``max_running`` per key holds across workers under SIGKILLs, debounce runs a burst once, throttle once
per window."""

import copy
import json
import signal
import time

import pytest

from django_redisq.compat import InvalidTask, TaskResultStatus
from tests.helpers import keys, wait_for, where_is
from tests.testapp import tasks

FAIR_ENV = {"REDISQ_QUEUE_OPTIONS": json.dumps({"emails": {"FAIR": True}})}


@pytest.fixture
def fair_emails(settings):
    """The queue ``emails`` FAIR for the enqueueing side too (the workers get FAIR_ENV)."""
    conf = copy.deepcopy(settings.TASKS)
    conf["default"]["OPTIONS"]["QUEUE_OPTIONS"] = {"emails": {"FAIR": True}}
    settings.TASKS = conf


@pytest.mark.slow
def test_a_big_keys_backlog_does_not_delay_the_small_keys(r, fair_emails, run_worker_process):
    """10,000 of one key queued first, then nine keys of 10: each small task starts before the big key's 200th."""
    big = [(["big", i], {}) for i in range(10_000)]
    for lo in range(0, len(big), 2000):
        tasks.tenant_job.enqueue_many(big[lo:lo + 2000])
    tasks.tenant_job.enqueue_many([([f"small{k}", i], {}) for k in range(9) for i in range(10)])
    assert r.llen(keys("emails").fair) == 10 and r.get(keys("emails").fairn) == "10090"
    run_worker_process("emails", "--concurrency", "4", env=FAIR_ENV)
    small_started = lambda: sum(1 for e in r.lrange(tasks.TENANT_STARTS, 0, -1) if not e.startswith("big|"))
    assert wait_for(lambda: small_started() == 90, timeout=60)
    starts = [e.split("|")[0] for e in r.lrange(tasks.TENANT_STARTS, 0, -1)]
    last_small = max(i for i, tenant in enumerate(starts) if tenant != "big")
    big_before = starts[:last_small].count("big")
    print(f"\nfair queue: the big key started {big_before} tasks before the last of the 90 small ones")
    assert big_before < 200, f"the big key started {big_before} tasks before the last small one"
    assert big_before <= 20  # round-robin: one big task per round of ten keys, give or take a batch


@pytest.mark.slow
def test_max_running_per_key_holds_across_workers_under_sigkills(r, run_worker_process):
    results = tasks.per_account.enqueue_many([([f"acct{a}", i, 0.3], {}) for a in range(4) for i in range(8)])
    workers = [run_worker_process("default", "--concurrency", "3", "--name", f"w{i}") for i in range(3)]
    kills: list[float] = []
    for victim in workers[:2]:  # two SIGKILLs while tasks of every key run, each replaced
        assert wait_for(lambda v=victim: _busy(r, f"w{workers.index(v)}"), timeout=30)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(5)
        kills.append(time.time())
        workers.append(run_worker_process("default", "--concurrency", "3"))
    assert wait_for(lambda: all(tasks.per_account.get_result(x.id).status == TaskResultStatus.SUCCESSFUL
                                for x in results), timeout=90)
    for x in results:
        assert where_is(r, x.id) == ["finished"]  # nothing lost
    per_key, overall = _peaks(r.lrange(tasks.ACCOUNT_SPANS, 0, -1), kills)
    assert max(per_key.values()) <= 2, per_key
    assert overall > 2  # different keys ran in parallel
    assert not r.exists(keys().keyload)  # no slot of any key leaked


def _busy(r, name: str) -> bool:
    """Whether the worker named ``name`` holds a task (its id starts with its name; made unique by the worker)."""
    return any(r.llen(keys().processing(w)) for w in r.zrange(keys().workers, 0, -1) if w.startswith(name))


def _peaks(entries: list[str], kills: list[float]) -> tuple[dict[str, int], int]:
    """The most runs of each account that overlapped, and of all; a run that never ended (its worker was killed)
    ends at the first kill after its start."""
    events: list[tuple[float, int, str]] = []
    open_runs: dict[tuple[str, str], list[float]] = {}
    for entry in entries:
        sign, account, n, at = entry.split("|")
        if sign == "+":
            open_runs.setdefault((account, n), []).append(float(at))
            events.append((float(at), 1, account))
        else:
            open_runs[(account, n)].pop()  # the latest start of this call ended; an earlier one was killed
            events.append((float(at), -1, account))
    for (account, _), starts in open_runs.items():
        events += [(min([k for k in kills if k >= started], default=float("inf")), -1, account) for started in starts]
    now: dict[str, int] = {}
    peak: dict[str, int] = {}
    total = top = 0
    for _, step, account in sorted(events, key=lambda e: (e[0], e[1])):
        now[account] = now.get(account, 0) + step
        peak[account] = max(peak.get(account, 0), now[account])
        total += step
        top = max(top, total)
    return peak, top


@pytest.mark.slow
def test_a_debounced_burst_runs_once_with_the_last_arguments(r, run_worker_process):
    worker = run_worker_process("default", "--concurrency", "2")
    assert wait_for(lambda: r.zcard(keys().workers) == 1, timeout=20)
    task = tasks.windowed.using(idempotency_key="reindex-42", debounce=1.0)
    ids = set()
    for i in range(50):  # 50 calls in 0.5 s
        last_call = time.time()
        ids.add(task.enqueue(i).id)
        time.sleep(0.01)
    assert len(ids) == 1  # every call answers the one result
    assert wait_for(lambda: r.llen(tasks.WINDOW_RUNS) >= 1, timeout=10)
    result = tasks.windowed.get_result(ids.pop())
    assert wait_for(lambda: result.refresh() or result.status == TaskResultStatus.SUCCESSFUL, timeout=5)
    time.sleep(0.5)  # a second run would have started by now
    runs = r.lrange(tasks.WINDOW_RUNS, 0, -1)
    assert len(runs) == 1, runs
    n, at = runs[0].split("|")
    assert n == "49" and result.return_value == 49
    assert 1.0 <= float(at) - last_call <= 1.5, float(at) - last_call
    assert worker.proc.poll() is None


@pytest.mark.slow
def test_a_throttle_of_2_s_runs_5_or_6_times_in_10_s(r, run_worker_process):
    run_worker_process("default", "--concurrency", "2")
    assert wait_for(lambda: r.zcard(keys().workers) == 1, timeout=20)
    task = tasks.windowed.using(idempotency_key="hook-7", throttle=2.0)
    start, ids = time.monotonic(), []
    while time.monotonic() - start < 10:
        ids.append(task.enqueue(len(ids)).id)
        time.sleep(0.1)
    assert wait_for(lambda: r.llen(tasks.WINDOW_RUNS) == len(set(ids)), timeout=10)
    assert 5 <= len(set(ids)) <= 6 and r.llen(tasks.WINDOW_RUNS) == len(set(ids))


def test_debounce_and_throttle_need_an_idempotency_key(r):
    with pytest.raises(InvalidTask, match="idempotency key"):
        tasks.windowed.using(debounce=1.0).enqueue(1)
    with pytest.raises(InvalidTask, match="debounce and throttle"):
        tasks.windowed.using(idempotency_key="k", debounce=1.0, throttle=1.0)
    for bad in (0, -1, "1", True, float("nan"), 10**6):
        with pytest.raises(InvalidTask, match="debounce"):
            tasks.windowed.using(debounce=bad)
    for bad in ("", 5, "x" * 201):
        with pytest.raises(InvalidTask, match="limit_key"):
            tasks.windowed.using(limit_key=bad)


def test_stats_and_the_admin_show_the_busiest_keys_and_sum_the_rest(r, admin_client):
    """12 accounts at max_running=2 with 3 tasks each: the 10 busiest one by one, the other 2 summed in one row."""
    import io

    from django.core.management import call_command
    from django.urls import reverse

    from django_redisq.settings.read import get_options
    from django_redisq.store.broker import Broker

    tasks.per_account.enqueue_many([([f"acct{a:02d}", i, 0], {}) for a in range(12) for i in range(3)])
    broker = Broker(get_options("default"))
    broker.heartbeat(["default"], "w1", {})
    assert [d.code for d in broker.fetch("default", "w1", 36)].count(1) == 24  # 2 per account run, 1 waits
    out = io.StringIO()
    call_command("redisq", "stats", stdout=out)
    lines = [line for line in out.getvalue().splitlines() if "per_account#" in line]
    assert len(lines) == 10 and all("running 2/2, waiting 1" in line for line in lines), lines
    assert "limit default: 2 more keys (running + waiting) running 6/0, waiting 0" in out.getvalue()
    page = admin_client.get(reverse("admin:django_redisq_deadletter_queues")).content.decode()
    assert "per_account#acct11" in page and "2 / 2" in page and "2 more keys" in page
    from django_redisq.ops.metrics import exposition

    body = exposition(["default"])[0].decode()  # the same rows as Prometheus series: bounded, the long tail summed
    series = [line for line in body.splitlines() if line.startswith("redisq_limit_tasks{") and 'queue="default"' in line]
    keyed = [line for line in series if "per_account#" in line]
    assert len(keyed) == 20, series  # 10 keys x running / waiting
    assert all(line.endswith(" 2.0") for line in keyed if 'state="running"' in line)
    assert all(line.endswith(" 1.0") for line in keyed if 'state="waiting"' in line)
    assert any('limit="~other"' in line and 'state="running"' in line and line.endswith(" 6.0") for line in series), series
    assert sum(1 for line in body.splitlines() if line.startswith("redisq_limit_max{") and "per_account#" in line
               and line.endswith(" 2.0")) == 10
