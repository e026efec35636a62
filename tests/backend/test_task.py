from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from django_redisq import RedisTask, task
from django_redisq.compat import InvalidTask, Task, TaskResultStatus
from django_redisq.compat import task as django_task
from django_redisq.exceptions import InvalidArguments
from django_redisq.task import get_registered
from tests.helpers import keys
from tests.testapp import tasks


def plain(x):
    return x


def test_decorator_bare_and_with_arguments():
    assert isinstance(tasks.noop, RedisTask) and isinstance(tasks.noop, Task)
    assert tasks.counted.queue_name == "emails"
    assert tasks.flaky.max_retries == 3


def test_django_task_decorator_gives_our_class():
    t = django_task(plain)
    assert type(t) is RedisTask and hasattr(t, "delay")


def test_tasks_register_themselves():
    assert get_registered("tests.testapp.tasks.noop") is tasks.noop
    assert get_registered("os.system") is None


def test_delay_is_enqueue(r):
    result = tasks.noop.delay(1)
    assert result.status == TaskResultStatus.READY and len(result.id) == 32
    assert r.lindex(keys().pending, 0) == result.id


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_retries": -1}, "max_retries"),
        ({"max_retries": "3"}, "max_retries"),
        ({"backoff_base": -1}, "backoff_base"),
        ({"retry_on": "ValueError"}, "retry_on"),
        ({"idempotency_key": 5}, "idempotency_key"),
    ],
)
def test_bad_task_options(kwargs, match):
    with pytest.raises(InvalidTask, match=match):
        task(**kwargs)(plain)


def test_run_after_cannot_be_static():
    with pytest.raises(TypeError, match="using"):
        task(run_after=timezone.now())(plain)


def test_unknown_queue_is_rejected_at_decoration():
    with pytest.raises(InvalidTask, match="Queue 'nope'"):
        task(queue_name="nope")(plain)


def test_a_task_has_its_own_priority_in_django_s_range():
    assert task(priority=5)(plain).priority == 5
    with pytest.raises(InvalidTask, match="priority"):
        task(priority=500)(plain)


def test_naive_run_after_is_rejected():
    with pytest.raises(InvalidTask, match="aware"):
        tasks.noop.using(run_after=timezone.now().replace(tzinfo=None))


def test_non_json_arguments_fail_in_the_caller(r):
    with pytest.raises(InvalidArguments, match="JSON"):
        tasks.noop.delay(object())
    assert r.llen(keys().pending) == 0


def test_using_accepts_our_options():
    t = tasks.noop.using(idempotency_key="k", max_retries=9)
    assert t.idempotency_key == "k" and t.max_retries == 9
    with pytest.raises(TypeError, match="colour"):  # Django's own error: unknown options go to its using()
        tasks.noop.using(colour="red")


def test_run_after_schedules(r):
    result = tasks.noop.using(run_after=timezone.now() + timedelta(minutes=5)).enqueue(1)
    assert r.zscore(keys().scheduled, result.id) is not None


def test_run_after_may_be_a_timedelta_from_now(r):
    """DESIGN's spelling, ``using(run_after=timedelta(minutes=5))``; Django's own ``using()`` takes a datetime only."""
    before = timezone.now()
    task = tasks.noop.using(run_after=timedelta(minutes=5))
    assert before + timedelta(minutes=5) <= task.run_after <= timezone.now() + timedelta(minutes=5)
    result = task.enqueue(1)
    assert r.zscore(keys().scheduled, result.id) is not None


def test_idempotency_key_deduplicates(r):
    first = tasks.charge.delay(7)
    second = tasks.charge.delay(7)
    other = tasks.charge.delay(8)
    assert second.id == first.id and other.id != first.id
    assert r.llen(keys().pending) == 2


def test_enqueue_many(r):
    results = tasks.add.enqueue_many([([i, i], {}) for i in range(100)])
    assert len({x.id for x in results}) == 100
    assert r.llen(keys().pending) == 100


@pytest.mark.django_db(transaction=True)
def test_delay_on_commit(r):
    with transaction.atomic():
        tasks.noop.delay_on_commit(1)
        assert r.llen(keys().pending) == 0
    assert r.llen(keys().pending) == 1
    try:
        with transaction.atomic():
            tasks.noop.delay_on_commit(2)
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    assert r.llen(keys().pending) == 1
