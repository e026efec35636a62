import threading

from tests.helpers import keys, seed_scheduled, where_is


def test_promote_moves_only_due_tasks(r, broker):
    seed_scheduled(r, "due", -10)
    seed_scheduled(r, "later", 60_000)
    moved, wait = broker.promote("default")
    assert moved == 1
    assert where_is(r, "due") == ["pending"] and r.hget(keys().task("due"), "state") == "pending"
    assert where_is(r, "later") == ["scheduled"]
    assert 50_000 < wait <= 60_000


def test_promote_is_batched(r, broker):
    for i in range(25):
        seed_scheduled(r, f"t{i}", -1)
    assert broker.promote("default", batch=10) == (10, 0)
    assert r.zcard(keys().scheduled) == 15


def test_promote_with_nothing_scheduled(r, broker):
    assert broker.promote("default") == (0, -1)


def test_concurrent_promoters_never_duplicate(r, broker):
    for i in range(500):
        seed_scheduled(r, f"t{i}", -1)

    def promote() -> None:
        from django_redisq.store.broker import Broker

        b = Broker(broker.options)
        while b.promote("default", batch=7)[0]:
            pass

    threads = [threading.Thread(target=promote) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pending = r.lrange(keys().pending, 0, -1)
    assert len(pending) == 500 and len(set(pending)) == 500
