"""Honest counts (issue 22, part 3): a real worker (-c 2) holding more than it runs, and what each reader shows.

``running`` (started, not finished: at most the worker's slots) is shown apart
from ``held`` (fetched and not started) by ``redisq stats`` and ``--json``,
``redisq queue list``, ``redisq health --json``, the fleet metrics and the
worker's own metrics. The worker keeps its prefetch here (``HAND_BACK_AFTER``
set long), so eight tasks are in its hands while two run. The admin's pages
are checked in a browser (tests/admin/test_browser.py).
"""

from __future__ import annotations

import io
import json
import socket
import time
import urllib.request

from django.core.management import call_command

from django_redisq.ops.inspector import Inspector
from django_redisq.ops.metrics import exposition
from tests.helpers import keys, wait_for
from tests.testapp import tasks
from tests.testapp.tasks import SPANS

KEEP = {"REDISQ_OPT_HAND_BACK_AFTER": "60"}


def redisq(*args: str) -> str:
    out = io.StringIO()
    call_command("redisq", *args, stdout=out)
    return out.getvalue()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name} {labels}")


def test_a_worker_holding_more_than_it_runs_is_counted_honestly(r, run_worker_process):
    tasks.span.enqueue_many([([f"t{i}", 4.0], {}) for i in range(12)])
    port = free_port()
    wp = run_worker_process("default", "--concurrency", "2", "--prefetch", "8", "--metrics-port", str(port), env=KEEP)
    ins = Inspector.for_alias("default")
    assert wait_for(lambda: r.llen(SPANS) == 2 and sum(r.llen(k) for k in r.scan_iter(keys().processing("*"))) == 8, timeout=30)
    # the mark is written within a tenth of a second; meanwhile every sample keeps running <= 2
    seen = []
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        f = next(x for x in ins.figures() if x.queue == "default")
        seen.append((f.running, f.held))
        time.sleep(0.05)
    assert all(running <= 2 and running + held == 8 for running, held in seen), seen
    assert seen[-1] == (2, 6), seen

    [s] = [x for x in ins.stats() if x.queue == "default"]
    [w] = s.workers
    assert (s.running, s.held, s.pending) == (2, 6, 4)
    assert (w.holding, w.running, w.held) == (8, 2, 6)

    text = redisq("stats")
    header, row = text.splitlines()[:2]
    assert header.lower().split()[:6] == ["queue", "pending", "sched", "running", "held", "dead"]
    assert row.split()[:6] == ["default", "4", "0", "2", "6", "0"]
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["WORKER"])  # the workers' table under the queues'
    worker = dict(zip(lines[at].lower().split(), lines[at + 1].split(), strict=False))
    assert (worker["running"], worker["held"]) == ("2", "6")
    [data] = [q for q in json.loads(redisq("stats", "--json")) if q["queue"] == "default"]
    assert (data["running"], data["held"]) == (2, 6)
    assert (data["workers"][0]["running"], data["workers"][0]["held"], data["workers"][0]["holding"]) == (2, 6, 8)
    [listed] = [q for q in json.loads(redisq("queue", "list", "--json")) if q["queue"] == "default"]
    assert (listed["running"], listed["held"]) == (2, 6)
    health = json.loads(redisq("health", "--json"))
    assert (health["queues"]["default"]["running"], health["queues"]["default"]["held"]) == (2, 6)

    body, _ = exposition()
    fleet = body.decode()
    assert sample(fleet, "redisq_queue_tasks", queue="default", state="running") == 2
    assert sample(fleet, "redisq_queue_tasks", queue="default", state="held") == 6
    assert sample(fleet, "redisq_queue_tasks", queue="default", state="pending") == 4

    own = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert sample(own, "redisq_worker_executors_busy") == 2
    assert sample(own, "redisq_worker_held_tasks") == 6
    assert sample(own, "redisq_worker_executors") == 2

    wp.proc.terminate()
    assert wp.proc.wait(30) == 0
    assert not list(r.scan_iter(keys().running("*")))  # a clean exit deletes its mark


def test_a_mark_never_counts_more_than_the_worker_holds(r, broker):
    """A stale mark (tasks since acked) counts at most what the processing list still holds; a garbled one counts none."""
    from tests.helpers import seed_processing

    broker.heartbeat(["default"], "w1", {})
    broker.heartbeat(["default"], "w2", {})
    seed_processing(r, "a", "w1")
    broker.running.mark("w1", {"default": ["a", "b", "c"]}, ["default"], 10.0)
    r.set(keys().running("w2"), "not json")
    seed_processing(r, "d", "w2")
    f = next(x for x in Inspector.for_alias("default").figures() if x.queue == "default")
    assert (f.running, f.held) == (1, 1)
    page = Inspector.for_alias("default").running_page("default")
    assert (page.total, page.running, page.held) == (2, 1, 1)
    assert [(row.id, row.state) for row in page.items] == [("a", "running"), ("d", "held")]
    ins = Inspector.for_alias("default")
    assert (ins.task("default", "a").row.state, ins.task("default", "d").row.state) == ("running", "held")  # the detail page
    assert 0 < r.pttl(keys().running("w1")) <= 10_000
    broker.running.mark("w1", {}, ["default"], 10.0)
    assert not r.exists(keys().running("w1"))
