"""User idempotency keys (``P:idem:<key>``): what holds them, on every path, at the TTL boundaries.

The semantics (README, "Idempotency keys"): a key dedups from enqueue until
IDEMPOTENCY_TTL after the task succeeded, whatever RESULT_TTL is; pending,
scheduled, running and dead tasks hold it with no TTL; purging or trimming the
dead letter frees it. Time passes on the Redis side: keys get short PEXPIREs.
"""

import pytest

from django_redisq.compat import TaskResultStatus
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.keys import QueueKeys
from django_redisq.store.steps.replies import NewTask
from tests.helpers import ack, keys, message, wait_for, where_is
from tests.testapp import tasks

ERR = {"exc": "builtins.ValueError", "msg": "boom", "tb": "", "at": 1}
K = keys()


@pytest.fixture(autouse=True)
def _registered(r) -> None:
    """The fetching worker is registered (Worker.run heartbeats before its first fetch)."""
    Broker(get_options("default")).heartbeat(["default", "emails", "low"], "w1", {})


@pytest.fixture
def short(settings, r) -> Broker:
    """A broker whose results live 2 s and whose successes dedup 30 s."""
    default = settings.TASKS["default"]
    settings.TASKS = {**settings.TASKS, "default": {**default, "OPTIONS": {
        **default["OPTIONS"], "RESULT_TTL": 2, "IDEMPOTENCY_TTL": 30, "DEAD_LETTER_MAX": 3}}}
    return Broker(get_options("default"))


def enqueue(b: Broker, task_id: str, key: str = "order-1", queue: str = "default") -> str | None:
    [out] = b.enqueue(queue, [NewTask(task_id, message(queue=queue), "tests.testapp.tasks.add", 0, key)])
    return out.duplicate_of


def run_to_end(r, b: Broker, task_id: str, how: str = "ack") -> None:
    """Fetch ``task_id`` as worker w1 and settle it."""
    [d] = b.fetch("default", "w1", 1)
    assert d.id == task_id
    if how == "ack":
        ack(b, "default", "w1", task_id, "3")
    elif how == "retry":
        b.retry("default", "w1", task_id, 0, ERR)
    else:
        b.bury("default", "w1", task_id, ERR, "failed", failed=True)


def expire(r, key: str) -> None:
    r.pexpire(key, 1)
    assert wait_for(lambda: not r.exists(key), timeout=2)


def test_a_pending_task_holds_its_key_with_no_ttl(r, short):
    assert enqueue(short, "a") is None
    assert r.get(K.idem("order-1")) == "a" and r.pttl(K.idem("order-1")) == -1
    assert enqueue(short, "b") == "a"


def test_a_retried_task_still_holds_its_key(r, short):
    enqueue(short, "a")
    run_to_end(r, short, "a", "retry")
    assert r.pttl(K.idem("order-1")) == -1 and enqueue(short, "b") == "a"


def test_success_keeps_the_key_for_idempotency_ttl_whatever_the_result_ttl(r, short):
    enqueue(short, "a")
    run_to_end(r, short, "a")
    assert 1000 < r.pttl(K.task("a")) <= 2000
    assert 28_000 < r.pttl(K.idem("order-1")) <= 30_000
    expire(r, K.task("a"))  # RESULT_TTL is over, IDEMPOTENCY_TTL is not
    assert enqueue(short, "b") == "a"
    expire(r, K.idem("order-1"))  # and now it is
    assert enqueue(short, "c") is None and r.get(K.idem("order-1")) == "c"


def test_a_duplicate_of_a_task_whose_result_expired_reads_as_successful(r, settings):
    default = settings.TASKS["default"]
    settings.TASKS = {**settings.TASKS, "default": {**default, "OPTIONS": {**default["OPTIONS"], "RESULT_TTL": 2}}}
    first = tasks.add.using(idempotency_key="order-7").enqueue(1, 2)
    b = Broker(get_options("default"))
    [d] = b.fetch("default", "w1", 1)
    ack(b, "default", "w1", d.id, "3")
    expire(r, K.task(first.id))
    again = tasks.add.using(idempotency_key="order-7").enqueue(1, 2)
    assert again.id == first.id and again.status == TaskResultStatus.SUCCESSFUL
    assert again.return_value is None and again.args == [1, 2]
    assert not r.exists(K.task(first.id))  # nothing stored for the duplicate


def test_a_late_ack_after_a_lost_lease_starts_the_countdown(r, short):
    enqueue(short, "a")
    assert [d.id for d in short.fetch("default", "w1", 1)] == ["a"]
    r.lrem(K.processing("w1"), 1, "a")  # reaped: back to pending, as reap.lua does
    r.rpush(K.pending, "a")
    assert short.ack_many("default", "w1", [("a", "3")]) == ["a"]
    assert 28_000 < r.pttl(K.idem("order-1")) <= 30_000
    assert enqueue(short, "b") == "a"


def test_a_dead_letter_keeps_its_key_and_a_replay_keeps_the_dedup(r, short):
    enqueue(short, "a")
    run_to_end(r, short, "a", "bury")
    assert r.get(K.idem("order-1")) == "a" and r.pttl(K.idem("order-1")) == -1
    assert enqueue(short, "b") == "a"
    assert short.operator.replay("default", ["a"]) == 1
    assert enqueue(short, "b") == "a"
    run_to_end(r, short, "a")
    assert 28_000 < r.pttl(K.idem("order-1")) <= 30_000


def test_a_replay_retakes_a_key_freed_meanwhile_but_not_one_taken(r, short):
    enqueue(short, "a")
    run_to_end(r, short, "a", "bury")
    r.delete(K.idem("order-1"))  # as an older version's bury did
    short.operator.replay("default", ["a"])
    assert r.get(K.idem("order-1")) == "a" and r.pttl(K.idem("order-1")) == -1
    run_to_end(r, short, "a", "bury")
    r.set(K.idem("order-1"), "other")
    r.hset(K.task("other"), "state", "pending")
    short.operator.replay("default", ["a"])
    assert r.get(K.idem("order-1")) == "other"


def test_purging_a_dead_letter_frees_its_key(r, short):
    enqueue(short, "a")
    run_to_end(r, short, "a", "bury")
    assert short.operator.purge("default", ["a"]) == 1
    assert not r.exists(K.idem("order-1"))
    assert enqueue(short, "b") is None


def test_trimming_a_dead_letter_frees_its_key(r, short):
    for i in range(4):  # DEAD_LETTER_MAX is 3: the fourth burial trims the first
        enqueue(short, f"t{i}", f"order-{i}")
        run_to_end(r, short, f"t{i}", "bury")
    assert where_is(r, "t0") == [] and not r.exists(K.task("t0"))
    assert not r.exists(K.idem("order-0")) and r.get(K.idem("order-3")) == "t3"


def test_trimming_leaves_a_key_another_task_holds(r, short):
    enqueue(short, "t0", "order-0")
    run_to_end(r, short, "t0", "bury")
    r.set(K.idem("order-0"), "newer")
    r.hset(K.task("newer"), "state", "pending")
    for i in range(1, 4):
        enqueue(short, f"t{i}", f"order-{i}")
        run_to_end(r, short, f"t{i}", "bury")
    assert r.get(K.idem("order-0")) == "newer"


def test_a_key_whose_holder_vanished_unfinished_is_free(r, short):
    enqueue(short, "a")
    r.delete(K.task("a"))  # lost by hand: no TTL, no task: stale
    assert enqueue(short, "b") is None and r.get(K.idem("order-1")) == "b"


def test_a_replay_into_another_queue_moves_the_key_with_the_task(r, short):
    enqueue(short, "a")
    run_to_end(r, short, "a", "bury")
    [(task_id, code, fields)] = short.operator.move_out("default", "emails", ["a"])
    assert code == 1
    assert short.operator.move_in("emails", "default", [(task_id, fields[0], fields)]) == [1]
    assert short.operator.purge("default", ["a"]) == 1
    emails = QueueKeys("emails")
    assert not r.exists(K.idem("order-1"))  # it left this queue
    assert r.get(emails.idem("order-1")) == "a" and r.pttl(emails.idem("order-1")) == -1
    assert enqueue(short, "b", queue="emails") == "a"
