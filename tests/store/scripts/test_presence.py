"""Presence: the entries the heartbeat registers, the poll lease, and reaping by connection (store/steps/presence.py)."""

from __future__ import annotations

import threading
import time

import redis

from django_redisq.store.steps.presence import FRESH, LEASE_MS, gone_of, refusal
from tests.helpers import keys, node_of, seed_processing, set_heartbeat_age, wait_for, where_is


def _kill(r, record: str) -> None:
    """Close the connection an entry names, as an operator's CLIENT KILL or the death of its process would."""
    node_of(r, keys().presence).execute_command("CLIENT", "KILL", "ID", record.rpartition(":")[2])


def _open(broker, queues=("default",)):
    presence = broker.presence.links(list(queues))
    assert presence.open() == ""
    return presence


def test_the_heartbeat_registers_the_entry_it_is_given_and_forgets_it_when_given_none(r, broker):
    broker.heartbeat(["default"], "w1", {}, {"default": "abc:12"})
    assert r.hget(keys().presence, "w1") == "abc:12"
    broker.heartbeat(["default"], "w1", {}, {"default": ""})  # an ACL refused CLIENT: only the timeout reaps it
    assert r.hget(keys().presence, "w1") is None
    broker.heartbeat(["default"], "w1", {})
    assert r.hget(keys().presence, "w1") is None


def test_one_worker_at_a_time_holds_the_poll_lease(r, broker):
    broker.heartbeat(["default"], "w1", {}, {"default": "abc:12"})
    records, wait = broker.presence.lease("default", "w1")
    assert records == {"w1": "abc:12"} and wait == 0
    records, wait = broker.presence.lease("default", "w2")
    assert records is None and 0 < wait <= LEASE_MS / 1000
    assert broker.presence.lease("default", "w1")[0] == {"w1": "abc:12"}  # renewed by its holder
    r.delete(keys().reaper)  # lapsed: another takes it over
    assert broker.presence.lease("default", "w2")[0] == {"w1": "abc:12"}


def test_a_link_proves_a_live_worker_and_its_closed_connection_proves_a_dead_one(r, broker):
    presence = _open(broker)
    record = presence.records()["default"]
    run_id, _, cid = record.rpartition(":")
    assert run_id and cid.isdigit()
    assert broker.presence.connections_gone("default", {"w1": record}) == {}
    _kill(r, record)
    assert broker.presence.connections_gone("default", {"w1": record}) == {"w1": record}
    presence.close()


def test_entries_of_another_run_of_the_server_are_never_judged(r, broker):
    """After a restart or a failover every client id changes: an old entry proves nothing either way."""
    presence = _open(broker)
    record = presence.records()["default"]
    _kill(r, record)
    other_run = "0" * 40 + ":" + record.rpartition(":")[2]
    assert broker.presence.connections_gone("default", {"w1": other_run, "w2": "garbage", "w3": ""}) == {}
    presence.close()


def test_gone_of_reads_both_reply_shapes():
    listed = "id=5 addr=x name= flags=N\nid=7 addr=y name= flags=N\n"
    records = {"a": "run:5", "b": "run:6", "c": "other:6"}
    assert gone_of("# Server\r\nrun_id:run\r\n", listed, records) == {"b": "run:6"}
    assert gone_of({"run_id": "run"}, [{"id": "5"}, {"id": 7}], records) == {"b": "run:6"}


def test_reap_by_connection_reaps_only_the_entries_still_seen_gone(r, broker):
    for w in ("dead-w", "back-w", "gone-w", "me"):
        set_heartbeat_age(r, w, 0)  # fresh heartbeats: the clock would reap nobody
    seed_processing(r, "t0", "dead-w")
    seed_processing(r, "t1", "back-w")
    r.hset(keys().presence, mapping={"dead-w": "run:1", "back-w": "run:3", "gone-w": "run:4", "me": "run:9"})
    r.zrem(keys().workers, "gone-w")  # left cleanly: only its entry remains
    tasks, workers, recovered = broker.presence.reap_gone("default", "me", {"dead-w": "run:1", "back-w": "run:2", "gone-w": "run:4"})
    assert (tasks, workers) == (1, ["dead-w"])
    assert [x.id for x in recovered] == ["t0"] and where_is(r, "t0") == ["pending"]
    assert where_is(r, "t1") == ["processing:back-w"]  # it registered a new connection since: alive
    assert r.hgetall(keys().presence) == {"back-w": "run:3", "me": "run:9"}


def test_a_reaper_that_is_not_registered_itself_reaps_nobody_by_connection(r, broker):
    set_heartbeat_age(r, "dead-w", 0)
    seed_processing(r, "t0", "dead-w")
    r.hset(keys().presence, "dead-w", "run:1")
    assert broker.presence.reap_gone("default", "me", {"dead-w": "run:1"}) == (0, [], [])
    set_heartbeat_age(r, "me", 60_000)  # stale: it may be the one cut off
    assert broker.presence.reap_gone("default", "me", {"dead-w": "run:1"}) == (0, [], [])
    assert where_is(r, "t0") == ["processing:dead-w"]


def test_a_dropped_link_is_reopened_and_stops_task_starts_until_registered(r, broker):
    presence = _open(broker)
    broker.heartbeat(["default"], "w1", {}, presence.records())
    presence.registered()
    assert presence.check() and presence.fresh(time.monotonic())
    before = presence.records()["default"]
    _kill(r, before)
    time.sleep(0.05)
    assert not presence.check()  # seen dropped without a round trip, and a new link opened
    assert not presence.fresh(time.monotonic())  # no task may start until the new link is registered
    after = presence.records()["default"]
    assert after and after != before
    broker.heartbeat(["default"], "w1", {}, presence.records())
    presence.registered()
    assert presence.check() and presence.fresh(time.monotonic())
    assert r.hget(keys().presence, "w1") == after
    time.sleep(FRESH + 0.05)  # not looked at for longer than FRESH (the heartbeat thread starved): no start either
    assert not presence.fresh(time.monotonic())
    presence.close()


def test_only_a_refusal_for_good_turns_presence_off():
    assert refusal(redis.exceptions.NoPermissionError("this user has no permissions to run the 'client|list' command"))
    assert refusal(redis.ResponseError("ERR unknown subcommand 'ID'"))
    assert not refusal(redis.ResponseError("BUSY Redis is busy running a script. You can only call SCRIPT KILL"))
    assert not refusal(redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'"))
    assert not refusal(redis.ConnectionError("Connection closed by server."))


def test_a_busy_server_leaves_presence_on_and_the_link_opens_once_it_answers(r, broker):
    """A script busy past lua-time-limit answers BUSY to everything: a link that cannot be opened meanwhile is
    opened at the next try, and the worker keeps proving its presence (BUSY is not an ACL's refusal)."""
    node = node_of(r, keys().presence)
    presence = _open(broker)
    where = presence._where("default")
    presence.links[where].close()
    presence.links[where] = None
    node.config_set("lua-time-limit", 50)
    spinner = redis.Redis(**{k: v for k, v in node.connection_pool.connection_kwargs.items() if k in ("host", "port")})
    busy = threading.Thread(target=lambda: _quietly(lambda: spinner.eval("while true do end", 0)), daemon=True)
    busy.start()
    try:
        assert wait_for(lambda: _busy(node), timeout=5)
        assert presence._ensure(where, "default") is None
        assert presence.refused == ""
    finally:
        node.script_kill()
        busy.join(5)
        node.config_set("lua-time-limit", 5000)
    assert presence._ensure(where, "default") is not None and presence.records()["default"]
    presence.close()


def _busy(node) -> bool:
    try:
        node.ping()
    except redis.ResponseError as exc:
        return "BUSY" in str(exc)
    return False


def _quietly(call) -> None:
    try:
        call()
    except redis.RedisError:
        pass
