"""captured_tasks(): what a block enqueued, asserted on and run through the real worker, on the suite's redis-server."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from django_redisq import signals
from django_redisq.compat import TaskResultStatus
from django_redisq.testing import captured_tasks
from tests.testapp.tasks import add, always_fails, charge, counted, flaky


def test_what_a_block_enqueued_is_captured_with_its_arguments_and_options(r: Any) -> None:
    add.delay(1, 2)  # before the block: not captured
    with captured_tasks() as captured:
        first = add.delay(2, 3)
        counted.using(priority=7).enqueue(key="k")
        add.enqueue_many([((4, 5), {}), ((6, 7), {})])
        asyncio.run(add.aenqueue(8, 9))
    add.delay(10, 11)  # after it: not captured either
    assert [c.args for c in captured] == [[2, 3], [], [4, 5], [6, 7], [8, 9]]
    found = captured.assert_enqueued(add, args=(2, 3))
    assert found.id == first.id and found.result.status == TaskResultStatus.READY
    k = captured.assert_enqueued("tests.testapp.tasks.counted", kwargs={"key": "k"}, priority=7, queue_name="emails")
    assert k.options["priority"] == 7 and k.on_commit is False
    captured.assert_enqueued(add, count=4)
    captured.assert_not_enqueued(always_fails)
    # stored for real: the ids are in Redis
    assert r.exists(*(f"redisq:{{{c.task.queue_name}}}:t:{c.id}" for c in captured)) == 5


def test_a_failed_assertion_lists_what_was_captured(r: Any) -> None:
    with captured_tasks() as captured:
        add.delay(2, 3)
    with pytest.raises(AssertionError, match=r"expected 1 enqueued tests\.testapp\.tasks\.add with args=\(9,\), found 0; "
                                             r"captured: tests\.testapp\.tasks\.add\(2, 3\) on 'default'"):
        captured.assert_enqueued(add, args=(9,))
    with pytest.raises(AssertionError, match=r"expected no enqueued tests\.testapp\.tasks\.add, found"):
        captured.assert_not_enqueued(add)
    with pytest.raises(TypeError, match="unknown option"):
        captured.filter(add, colour="red")


def test_an_idempotent_duplicate_is_not_a_new_task(r: Any) -> None:
    with captured_tasks() as captured:
        charge.delay(42)
        charge.delay(42)
    captured.assert_enqueued(charge, args=(42,))  # exactly one


@pytest.mark.django_db
def test_on_commit_enqueues_inside_a_transaction_the_test_never_commits_are_captured(r: Any) -> None:
    with captured_tasks() as captured:
        with transaction.atomic():
            add.delay_on_commit(1, 1)
            assert len(captured) == 0  # not yet: the transaction has not committed
    found = captured.assert_enqueued(add, args=(1, 1), on_commit=True)
    assert r.exists(f"redisq:{{default}}:t:{found.id}")
    with captured_tasks(on_commit=False) as untouched:
        add.delay_on_commit(2, 2)
    untouched.assert_not_enqueued()


def test_run_goes_through_the_real_worker_retries_signals_and_dead_letters(r: Any) -> None:
    seen: list[tuple[str, str]] = []

    def retried(sender: Any, task_id: str, **kwargs: Any) -> None:
        seen.append(("retried", task_id))

    def dead(sender: Any, task_id: str, reason: str, **kwargs: Any) -> None:
        seen.append((reason, task_id))

    signals.task_retried.connect(retried)
    signals.task_dead_lettered.connect(dead)
    try:
        with captured_tasks() as captured:
            ok = flaky.delay("capture-flaky", 2)  # max_retries=3: succeeds on its third attempt
            bad = always_fails.delay("no")  # max_retries=1: dead after two
            summed = add.delay(20, 22)
        results = captured.run(timeout=30)
    finally:
        signals.task_retried.disconnect(retried)
        signals.task_dead_lettered.disconnect(dead)
    by_id = {res.id: res for res in results}
    assert by_id[ok.id].status == TaskResultStatus.SUCCESSFUL and by_id[ok.id].return_value == "ok after 3"
    assert by_id[summed.id].return_value == 42
    assert by_id[bad.id].status == TaskResultStatus.FAILED and len(by_id[bad.id].errors) == 2
    assert by_id[bad.id].errors[-1].exception_class_path == "builtins.ValueError"
    assert seen.count(("retried", ok.id)) == 2 and seen.count(("retried", bad.id)) == 1, seen
    assert ("failed", bad.id) in seen, seen
    assert r.zscore("redisq:{default}:dead", bad.id) is not None


def test_run_says_which_tasks_did_not_finish(r: Any) -> None:
    with captured_tasks() as captured:
        later = add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
    with pytest.raises(AssertionError, match=r"not finished within 0\.5 s: tests\.testapp\.tasks\.add\(1, 2\)"):
        captured.run(timeout=0.5)
    assert add.get_result(later.id).status == TaskResultStatus.READY
