"""invariant 10 (docs/explanation/architecture.md): every key the engine writes has a TTL, a size cap, or belongs to a live structure."""

import json
import random

import pytest

from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.keys import QueueKeys
from django_redisq.store.steps.replies import NewTask
from tests.helpers import keys, message, seed_dead, seed_processing, where_is

ERR = {"exc": "builtins.ValueError", "msg": "boom", "tb": "Traceback...", "at": 1}
K = keys()


def test_a_late_ack_after_a_purge_brings_back_no_hash(r, broker):
    seed_dead(r, "t0")
    r.lpush(K.processing("w1"), "t0")  # a copy still held by a worker whose lease was lost
    r.zrem(K.dead, "t0")
    r.lrem(K.processing("w1"), 1, "t0")
    r.zadd(K.dead, {"t0": 1})
    assert broker.operator.purge("default", ["t0"]) == 1
    assert broker.ack_many("default", "w1", [("t0", "42")]) == ["t0"]
    assert not r.exists(K.task("t0"))
    assert r.pttl(K.status("t0")) > 0


def test_promoting_an_id_without_a_hash_creates_none(r, broker):
    r.zadd(K.scheduled, {"ghost": 1})
    assert broker.promote("default")[0] == 1
    assert where_is(r, "ghost") == ["pending"]  # fetch reports NOMSG and the worker dead-letters it
    assert not r.exists(K.task("ghost"))


def test_a_corrupt_copy_expires_with_the_retention_and_goes_with_its_dead_letter(r, broker):
    for task_id in ("t0", "t1"):
        seed_processing(r, task_id, "w1")
        r.delete(K.task(task_id))
        r.set(K.task(task_id), "garbage")
        broker.bury("default", "w1", task_id, ERR, "corrupt", failed=False)
        retention = broker.options.dead_letter_ttl * 1000
        assert retention - 60_000 < r.pttl(K.corrupt(K.task(task_id))) <= retention
    assert broker.operator.purge("default", ["t0"]) == 1
    assert not r.exists(K.corrupt(K.task("t0")))
    r.zadd(K.dead, {"t1": 1})  # 1970: the next burial trims it
    seed_processing(r, "t2", "w1")
    assert broker.bury("default", "w1", "t2", ERR, "failed", failed=True) == 1
    assert not r.exists(K.task("t1"), K.corrupt(K.task("t1")))


def unbounded_keys(r, queues: list[str]) -> list[str]:
    """Every key that has no TTL and is not a live structure or a bounded counter."""
    live: dict[str, set[str]] = {}
    for q in queues:
        k = QueueKeys(q)
        ids = set(r.lrange(k.pending, 0, -1)) | set(r.zrange(k.scheduled, 0, -1)) | set(r.zrange(k.dead, 0, -1))
        for plist in r.scan_iter(match=k.processing("*")):
            ids |= set(r.lrange(plist, 0, -1))
        live[q] = ids
    bad = []
    for key in r.scan_iter(count=1000):
        if r.pttl(key) > 0:
            continue
        q = key.split("{", 1)[1].split("}", 1)[0]
        k = QueueKeys(q)
        rest = key[len(k.prefix):]
        if key in (k.pending, k.scheduled, k.dead, k.workers, k.alive) or rest.startswith("processing:"):
            continue  # live structures (their members are checked through the tasks)
        if rest in ("processed", "failed", "dead_count", "retried", "failed_final", "recovered"):
            continue  # one integer each
        kind, _, name = rest.partition(":")
        if kind == "t" and name in live[q]:
            continue  # a task a live structure refers to
        if kind == "t" and name.endswith(":corrupt") and name[: -len(":corrupt")] in live[q]:
            continue  # a corrupt copy goes with its dead letter
        if kind == "idem" and r.type(key) == "string" and r.get(key) in live[q] and r.exists(k.task(r.get(key))):
            continue  # held by a live task
        detail = r.type(key)
        if kind == "idem" and detail == "string":
            holder = r.get(key)
            detail += f" -> {holder}: {r.type(k.task(holder))} {r.hgetall(k.task(holder)) if r.type(k.task(holder)) == 'hash' else ''}"
        bad.append(f"{key} ({detail})")
    return bad


@pytest.mark.parametrize("seed", [1, 2])
def test_a_long_mixed_run_leaves_no_key_unbounded(r, settings, seed):
    default = settings.TASKS["default"]
    settings.TASKS = {**settings.TASKS, "default": {**default, "OPTIONS": {
        **default["OPTIONS"], "DEAD_LETTER_MAX": 25, "RESULT_TTL": 60, "IDEMPOTENCY_TTL": 120}}}
    b = Broker(get_options("default"))
    rnd = random.Random(seed)
    queues = ["default", "emails"]
    n = 0
    b.heartbeat(queues, "w1", {})  # fetching workers are registered
    b.heartbeat(queues, "w2", {})
    for step in range(400):
        q = rnd.choice(queues)
        k = QueueKeys(q)
        action = rnd.random()
        if action < 0.35:
            items = []
            for _ in range(rnd.randint(1, 4)):
                n += 1
                idem = f"order-{rnd.randint(0, 60)}" if rnd.random() < 0.5 else ""
                items.append(NewTask(f"id{n}", message(queue=q), "tests.testapp.tasks.add", rnd.choice([0, 0, 1]), idem))
            b.enqueue(q, items)
        elif action < 0.7:
            worker = rnd.choice(["w1", "w2"])
            for d in b.fetch(q, worker, rnd.randint(1, 3)):
                if d.code != 1:
                    if d.code in (4, 5):
                        b.bury(q, worker, d.id, ERR, "missing_task", failed=False)
                    continue
                fate = rnd.random()
                if fate < 0.5:
                    b.ack_many(q, worker, [(d.id, json.dumps(step))])
                elif fate < 0.75:
                    b.retry(q, worker, d.id, rnd.choice([0, 5]), ERR)
                elif fate < 0.9:
                    b.bury(q, worker, d.id, ERR, "failed", failed=True)
                else:  # the lease is lost: reaped back to pending, then a late ack
                    r.lrem(k.processing(worker), 1, d.id)
                    r.lpush(k.pending, d.id)
                    r.delete(k.status(d.id))
                    b.ack_many(q, worker, [(d.id, "null")])
        elif action < 0.78:
            b.promote(q)
        elif action < 0.84:
            dead = b.operator.dead_ids(q, 3)
            other = "emails" if q == "default" else "default"
            if rnd.random() < 0.5:
                b.operator.replay(q, dead)
            else:
                marked = b.operator.move_out(q, other, dead)
                copies = [(i, f[0], f) for i, c, f in marked if c == 1]
                b.operator.move_in(other, q, copies)
                b.operator.purge(q, [i for i, _, _ in copies])
        elif action < 0.9:
            b.operator.purge(q, b.operator.dead_ids(q, 2))
        elif action < 0.95:
            # time passes on the Redis side: finished results and successes expire
            for key in r.scan_iter(match=f"{k.prefix}*", count=1000):
                if r.pttl(key) > 0 and rnd.random() < 0.5:
                    r.pexpire(key, 1)
        else:
            # another producer (or a stray command) leaves a key of the wrong type where a script will look
            # (not a task holding an idempotency key: with its hash gone, nothing links the key to it)
            pending = [i for i in r.lrange(k.pending, 0, -1) if r.type(k.task(i)) == "hash" and not r.hget(k.task(i), "idem")]
            if pending and rnd.random() < 0.5:
                victim = k.task(rnd.choice(pending))  # fetch reports it CORRUPT, bury sets it aside
                r.delete(victim)
                r.rpush(victim, "junk")
            else:
                key = f"order-{rnd.randint(0, 60)}"
                if not r.exists(k.idem(key)):
                    r.rpush(k.idem(key), "junk")
                    n += 1
                    b.enqueue(q, [NewTask(f"id{n}", message(queue=q), "tests.testapp.tasks.add", 0, key)])
    import time

    time.sleep(0.01)  # let the 1 ms PEXPIREs lapse
    assert unbounded_keys(r, queues) == []
    assert r.zcard(K.dead) <= 25
