import random
from datetime import timedelta

import pytest

from django_redisq.core.backoff import compute_backoff
from tests.backend.test_contract import TASK_FIELDS


def test_exponential_then_capped():
    no_jitter = [compute_backoff(n, base=1, cap=10, jitter=0) for n in range(1, 7)]
    assert no_jitter == [1000, 2000, 4000, 8000, 10000, 10000]


def test_jitter_only_shortens_within_bounds():
    rng = random.Random(7)
    for n in range(1, 30):
        d = compute_backoff(n, base=0.5, cap=60, jitter=0.25, rand=rng)
        full = min(60, 0.5 * 2 ** (n - 1)) * 1000
        assert 0.75 * full - 1 <= d <= full


def test_huge_attempt_numbers_do_not_overflow():
    assert compute_backoff(10_000, base=1, cap=300, jitter=0) == 300_000


def test_rejects_zero():
    with pytest.raises(ValueError):
        compute_backoff(0)


# -- Django's retry proposal (new-features #142): a task's backoff function ------------


def _delivery(failures: int = 0):
    from django_redisq.store.steps.replies import Delivery

    return Delivery("id", "default", 1, "{}", failures + 1, failures)


@pytest.mark.parametrize(("answer", "delay_ms"), [(0, 0), (30, 30_000), (0.25, 250), (timedelta(minutes=2), 120_000)])
def test_a_backoff_function_gives_the_delay_in_seconds(answer, delay_ms):
    from django_redisq.core.options import Options
    from django_redisq.task import RedisTask
    from django_redisq.worker.running.outcome import RETRY, failure
    from tests.testapp.contract_tasks import ours_add

    task = RedisTask(func=ours_add.func, **TASK_FIELDS, backoff=lambda exc, result: answer)
    outcome = failure(task, ValueError("x"), _delivery(), 3, Options())
    assert (outcome.kind, outcome.delay_ms) == (RETRY, delay_ms)


def test_retry_with_a_delay_wins_over_the_backoff_function_and_none_stops_retrying():
    from django_redisq.core.options import Options
    from django_redisq.exceptions import Retry
    from django_redisq.task import RedisTask
    from django_redisq.worker.running.outcome import DEAD, RETRY, failure
    from tests.testapp.contract_tasks import ours_add

    task = RedisTask(func=ours_add.func, **TASK_FIELDS, backoff=lambda exc, result: None)
    assert failure(task, Retry(delay=2), _delivery(), 3, Options()).delay_ms == 2000
    stopped = failure(task, ValueError("x"), _delivery(), 3, Options())
    assert (stopped.kind, stopped.reason) == (DEAD, "not_retryable")
    out_of_attempts = failure(task.using(max_attempts=2), ValueError("x"), _delivery(failures=1), 1, Options())
    assert (out_of_attempts.kind, out_of_attempts.reason) == (DEAD, "failed")  # never asked: no attempts left
    assert failure(RedisTask(func=ours_add.func, **TASK_FIELDS), ValueError("x"), _delivery(), 3, Options()).kind == RETRY


async def _async_backoff(exc: BaseException, result: object) -> int:
    return 1


@pytest.mark.parametrize(("bad", "message"), [
    ("myapp.backoffs.linear", "must be a function"), (30, "must be a function"), (_async_backoff, "not a coroutine function"),
])
def test_a_backoff_that_cannot_be_one_is_refused_where_the_task_is_defined(bad, message):
    from django_redisq import task
    from django_redisq.compat import InvalidTask

    with pytest.raises(InvalidTask, match=message):
        task(backoff=bad)(_module_level)


def _module_level() -> None: ...


def test_using_cannot_change_the_backoff_function(r):
    from django_redisq.compat import InvalidTask
    from tests.testapp import retry_tasks as rt

    with pytest.raises(InvalidTask, match="backoff cannot be changed per call"):
        rt.fails_with.using(backoff=rt.linear_backoff).enqueue("x")
    assert rt.fails_with.using(max_attempts=2).enqueue("x").id  # what may change still does


def test_code_written_against_the_proposal_runs_on_our_worker(r, make_worker):
    """``@task(max_attempts=10, backoff=linear_backoff)`` with the framework's decorator, on our worker."""
    from django_redisq.compat import TaskResultStatus
    from tests.helpers import drain
    from tests.testapp import retry_tasks as rt

    res = rt.framework_fails.enqueue()
    drain(make_worker, [res])
    assert res.status == TaskResultStatus.FAILED and res.attempts == 3 and len(res.errors) == 3


def test_the_backoff_function_sees_the_exception_and_the_result_as_the_attempt_left_it(r, make_worker):
    from django_redisq.compat import TaskResultStatus
    from tests.helpers import drain, keys
    from tests.testapp import retry_tasks as rt

    rt.SEEN.clear()
    transient = rt.fails_with.delay("transient")  # max_attempts=5: asked after attempts 1-4
    drain(make_worker, [transient])
    assert transient.status == TaskResultStatus.FAILED and transient.attempts == 5
    # attempts counts every attempt; errors holds this attempt's (as the task_finished signal's result does)
    assert rt.SEEN == [("ConnectionError", "FAILED", n, ["builtins.ConnectionError"]) for n in range(1, 5)]
    rt.SEEN.clear()
    permanent = rt.fails_with.delay("permanent")  # the function says None: not retried
    drain(make_worker, [permanent])
    assert permanent.attempts == 1 and r.hget(keys().task(permanent.id), "reason") == "not_retryable"
    rt.SEEN.clear()
    retried = rt.asks_to_retry.delay(2)  # Retry() without a delay asks the function too
    drain(make_worker, [retried])
    assert retried.return_value == "done" and retried.attempts == 3 and len(rt.SEEN) == 2


@pytest.mark.parametrize(("name", "says"), [
    ("bad_negative", "returned -1 after attempt 1"), ("bad_text", "returned 'soon'"), ("bad_raising", "raised KeyError"),
])
def test_a_backoff_that_fails_at_run_time_dead_letters_the_task_with_the_reason_and_the_worker_goes_on(r, make_worker, name, says):
    from django_redisq.compat import TaskResultStatus
    from tests.helpers import drain, keys, where_is
    from tests.testapp import contract_tasks as ct
    from tests.testapp import retry_tasks as rt

    res = getattr(rt, name).delay()
    after = ct.ours_add.delay(1, 2)
    drain(make_worker, [res, after])
    assert res.status == TaskResultStatus.FAILED and res.attempts == 1
    assert where_is(r, res.id) == ["dead"] and r.hget(keys().task(res.id), "reason") == "bad_backoff"
    error = res.errors[0]
    assert error.exception_class_path == "django_redisq.exceptions.InvalidBackoff" and says in error.traceback
    assert "the task's own failure" in error.traceback  # the task's traceback is kept, as the cause
    assert after.return_value == 3
