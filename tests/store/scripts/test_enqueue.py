from django_redisq.store.steps.replies import NewTask
from tests.helpers import keys, message, redis_ms, where_is


def test_enqueue_now_goes_to_pending(r, broker):
    [out] = broker.enqueue("default", [NewTask("id1", message(), "tests.testapp.tasks.add", 0, "")])
    assert out.duplicate_of is None
    assert where_is(r, "id1") == ["pending"]
    data = r.hgetall(keys().task("id1"))
    assert data["state"] == "pending" and data["msg"] == message() and data["deliveries"] == "0"
    assert abs(int(data["enqueued_at"]) - redis_ms(r)) < 2000


def test_enqueue_delayed_is_scheduled_from_redis_time(r, broker):
    before = redis_ms(r)
    broker.enqueue("default", [NewTask("id1", message(), "p", 5000, "")])
    score = r.zscore(keys().scheduled, "id1")
    assert before + 5000 <= score <= redis_ms(r) + 5000
    assert where_is(r, "id1") == ["scheduled"]


def test_enqueue_many_in_one_call(r, broker):
    items = [NewTask(f"id{i}", message(args=[i, i]), "p", 0, "") for i in range(50)]
    out = broker.enqueue("default", items)
    assert [o.duplicate_of for o in out] == [None] * 50
    assert r.llen(keys().pending) == 50
    assert r.lindex(keys().pending, -1) == "id0"  # FIFO: the first enqueued is taken first


def test_idempotency_key_returns_the_holder(r, broker):
    broker.enqueue("default", [NewTask("first", message(), "p", 0, "order-1")])
    [dup] = broker.enqueue("default", [NewTask("second", message(), "p", 0, "order-1")])
    assert dup.duplicate_of == "first"
    assert not r.exists(keys().task("second"))
    assert r.llen(keys().pending) == 1


def test_idempotency_key_of_a_vanished_task_is_free_again(r, broker):
    broker.enqueue("default", [NewTask("first", message(), "p", 0, "order-1")])
    r.delete(keys().task("first"))
    [out] = broker.enqueue("default", [NewTask("second", message(), "p", 0, "order-1")])
    assert out.duplicate_of is None
    assert r.get(keys().idem("order-1")) == "second"


def test_same_id_twice_is_not_stored_twice(r, broker):
    broker.enqueue("default", [NewTask("id1", message(), "p", 0, "")])
    [out] = broker.enqueue("default", [NewTask("id1", message(), "p", 0, "")])
    assert out.duplicate_of is None  # a retried lost reply: already stored, nothing added
    assert r.llen(keys().pending) == 1


def test_enqueue_again_settles_each_unknown_outcome(r, broker):
    """enqueue_again.lua (a plain enqueue whose reply was lost): stored when nothing ran, pushed once more when the
    task is still pending and never delivered, left alone once a worker took it; every case on the Redis clock."""
    k = keys()
    item = NewTask("lost", message(), "tests.testapp.tasks.add")
    before = redis_ms(r)
    now = broker._enqueue_again(k, [item])
    assert before <= now <= redis_ms(r)
    assert where_is(r, "lost") == ["pending"] and r.hget(k.task("lost"), "enqueued_at") == str(now)
    broker._enqueue_again(k, [item])
    assert r.lrange(k.pending, 0, -1) == ["lost", "lost"]  # a copy: absorbed at fetch (tests/store/test_plain_enqueue.py)
    r.delete(k.pending)
    r.hset(k.task("lost"), mapping={"state": "running", "deliveries": 1})
    broker._enqueue_again(k, [item])
    assert r.llen(k.pending) == 0 and r.hget(k.task("lost"), "state") == "running"
