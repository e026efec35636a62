"""Every task ends, done or dead, never a loop: what a task leaves that cannot be settled.

A settle step that fails for any reason but a transient Redis error used to leave its task in the worker's
processing list; the heartbeat's sweep then handed it back as a lost fetch, undoing its delivery, so it ran again
and again and never reached the dead letters. Each case here looped so on 7929b28 and ends once now.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis
from redis.exceptions import ResponseError

from django_redisq import chain, chord
from django_redisq.compat import TaskResultStatus
from django_redisq.store.keys import WorkflowKeys
from django_redisq.worker.settling.settler import SETTLE_FAILED
from tests.helpers import keys, run_in_thread, wait_for, where_is
from tests.testapp import tasks
from tests.testapp import workflow_tasks as wt

K = keys()


def runs_of(task_id: str) -> int:
    return sum(1 for tid, _, _ in wt.runs() if tid == task_id)


def bursts(make_worker: Any, n: int = 3, *queues: str) -> None:
    """A few burst workers one after another: enough for a looping task to show itself by running again."""
    for _ in range(n):
        run_in_thread(make_worker(*(queues or ("default", "emails", "low"))))


def nothing_held(r: redis.Redis) -> bool:
    return not any(r.llen(p) for p in r.scan_iter(match="redisq:*processing:*"))


def test_a_result_with_a_lone_surrogate_fails_its_attempt_once(r, make_worker):
    res = wt.lone_surrogate.enqueue()
    bursts(make_worker)
    assert runs_of(res.id) == 1
    assert where_is(r, res.id) == ["dead"], where_is(r, res.id)
    got = wt.lone_surrogate.get_result(res.id)
    assert got.status == TaskResultStatus.FAILED
    assert "lone surrogate" in got.errors[-1].traceback and got.errors[-1].exception_class_path == "builtins.ValueError"
    assert nothing_held(r)


def test_bookkeeping_the_workflow_script_cannot_read_dead_letters_the_step_once(r, make_worker, caplog):
    wf = chain(wt.add.s(1, 1), wt.add.s(1)).enqueue()
    r.hset(WorkflowKeys(wf.id).deps, "0", "{not json")  # what wf_done.lua decodes for step 0's dependents
    with caplog.at_level(logging.ERROR, logger="django_redisq"):
        bursts(make_worker)
    first = f"{wf.id}.0"
    assert runs_of(first) == 1
    assert where_is(r, first) == ["dead"] and r.hget(K.task(first), "reason") == SETTLE_FAILED
    assert "recording step 0 of workflow" in r.hget(K.task(first), "error")
    assert any(SETTLE_FAILED in rec.getMessage() for rec in caplog.records)
    assert nothing_held(r)


def test_a_workflow_marker_too_deep_to_decode_does_not_hold_its_batch(r, make_worker):
    """A saved ``_workflow`` marker nested past the decoder's recursion limit: RecursionError, not ValueError."""
    good = [tasks.noop.enqueue(i) for i in range(5)]
    poison = tasks.noop.enqueue(99)
    r.hset(K.task(poison.id), "metadata", '{"_workflow": ' + "[" * 100_000 + "]" * 100_000 + "}")
    bursts(make_worker, 3, "default")
    assert all(where_is(r, g.id) == ["finished"] for g in good), [where_is(r, g.id) for g in good]
    assert where_is(r, poison.id) in (["dead"], ["finished"])  # ends, one way or the other: never back in pending
    assert r.hget(K.task(poison.id), "deliveries") == "1"
    assert nothing_held(r)


def test_a_chord_callback_over_max_message_bytes_fails_its_workflow(r, make_worker):
    """Three 200 KB results joined make a 600 KB callback message, over the default 512 KiB."""
    wf = chord([wt.sized.s(200_000) for _ in range(3)], wt.total.s()).enqueue(on_error=wt.on_failure.s("too big"))
    bursts(make_worker, 4)
    assert wf.refresh().status == TaskResultStatus.FAILED
    assert "MAX_MESSAGE_BYTES" in wf.error and "not queued" in wf.error
    members = [tid for tid, name, _ in wt.runs() if name == "sized"]
    assert sorted(members) == sorted(f"{wf.id}.{i}" for i in range(3))  # each member ran once, and succeeded
    assert all(where_is(r, m) == ["finished"] for m in members)
    assert "total" not in [name for _, name, _ in wt.runs()]
    assert [args[:2] for _, name, args in wt.runs() if name == "on_failure"] == [["too big", wf.id]]  # once
    assert nothing_held(r)


def test_one_task_whose_ack_fails_for_good_is_dead_lettered_and_its_batch_is_acked(r, make_worker, monkeypatch):
    """A non-transient error of a batch's ack: each task is acked alone, and only the one that fails is buried."""
    from django_redisq.store.broker import Broker

    results = [tasks.noop.enqueue(i) for i in range(8)]
    poison = results[3].id
    real = Broker.ack_many

    def ack_many(self: Broker, queue: str, worker: str, items: list[tuple[str, str]], *rest: Any) -> Any:
        if any(task_id == poison for task_id, _ in items):
            raise ResponseError("ERR a reply this step will always get")
        return real(self, queue, worker, items, *rest)

    monkeypatch.setattr(Broker, "ack_many", ack_many)
    bursts(make_worker, 2, "default")
    assert where_is(r, poison) == ["dead"] and r.hget(K.task(poison), "reason") == SETTLE_FAILED
    assert r.hget(K.task(poison), "exc") == "redis.exceptions.ResponseError"
    assert r.hget(K.task(poison), "deliveries") == "1"
    assert all(where_is(r, x.id) == ["finished"] for x in results if x.id != poison)
    assert nothing_held(r)


def test_a_task_that_cannot_even_be_buried_goes_back_with_its_delivery_counted(r, make_worker, monkeypatch):
    """The last resort: ack and burial both fail for good; the sweep hands it back counted, so redeliveries add up
    (and ``too_many_deliveries`` ends it) instead of each one undoing the last."""
    from django_redisq.store.broker import Broker

    res = tasks.noop.enqueue(1)

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise ResponseError("ERR this task cannot be settled")

    monkeypatch.setattr(Broker, "ack_many", fails)
    real_bury = Broker.bury
    monkeypatch.setattr(Broker, "bury", lambda self, q, w, tid, err, reason, failed: (
        fails() if reason == SETTLE_FAILED else real_bury(self, q, w, tid, err, reason, failed)))
    worker = make_worker("default", burst=False)  # runs until the sweep has handed the task back twice
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        assert wait_for(lambda: int(r.hget(K.task(res.id), "deliveries") or 0) >= 3, timeout=20), \
            r.hgetall(K.task(res.id))
        peak = int(r.hget(K.task(res.id), "deliveries"))
    finally:
        worker.request_stop()
        t.join(15)
    # Counted up, never undone by the sweep. The stop itself may catch one fresh delivery not yet started
    # and hand it back uncounted (release.lua): that undoes that one delivery, never the ones before it.
    assert int(r.hget(K.task(res.id), "deliveries")) >= peak - 1 >= 2
