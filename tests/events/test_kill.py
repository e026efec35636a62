"""SIGKILL of a runworker process while events flow to 3 subscriptions: every event reaches every handler,
each subscription's task is enqueued once per event, and a run twice is one the killed process had begun."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

from django_redisq.events.publish import publish
from django_redisq.events.subscriptions import Subscription
from django_redisq.store.keys import QueueKeys
from tests.events.conftest import HANDLERS, THREE, events_settings, runs
from tests.helpers import wait_for

EVENTS = int(os.environ.get("REDISQ_TEST_EVENTS", "1500"))
"""1,500 in the suite; the long run: ``REDISQ_TEST_EVENTS=10000 pytest tests/events/test_kill.py``."""
FAST = {"REDISQ_OPT_HEARTBEAT_INTERVAL": "0.2", "REDISQ_OPT_WORKER_TIMEOUT": "1.5"}
QUEUE_OF = {"billing": "default", "mail": "emails", "audit": "low"}


def test_sigkill_while_events_flow_loses_nothing_and_enqueues_each_once(r, run_worker_process):
    env = {**FAST, "REDISQ_SUBSCRIPTIONS": json.dumps(THREE)}
    with events_settings(THREE, HEARTBEAT_INTERVAL=0.2, WORKER_TIMEOUT=1.5):
        publish("orders.placed", {"n": -1})  # creates the groups before any worker ("latest" starts here)
        victim = run_worker_process("default", "emails", "low", "--concurrency", "4", "--name", "victim", env=env)
        survivor = run_worker_process("default", "emails", "low", "--concurrency", "4", "--name", "survivor", env=env)
        ids: list[str] = []

        def produce() -> None:
            for i in range(EVENTS):
                ids.append(publish("orders.placed", {"n": i}))
                if i % 50 == 0:
                    time.sleep(0.01)

        producer = threading.Thread(target=produce)
        producer.start()
        # kill the victim once it has run some of each subscription's tasks, with events still flowing
        assert wait_for(lambda: all(any(e.endswith(f"|{victim.proc.pid}") for e in r.lrange(f"events:by:{h}", 0, -1))
                                    for h in HANDLERS), 60)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        producer.join(120)
        assert len(ids) == EVENTS
        everything = {*ids}
        assert wait_for(lambda: all(everything <= set(runs(r, h)) for h in HANDLERS), 120), \
            {h: len(everything - set(runs(r, h))) for h in HANDLERS}
        assert survivor.proc.poll() is None
        for h in HANDLERS:
            # every event at least once; a second run only for an event the killed process had begun
            by = [e.rsplit("|", 1) for e in r.lrange(f"events:by:{h}", 0, -1)]
            twice = {event for event, n in runs(r, h).items() if n > 1}
            assert all(any(pid == str(victim.proc.pid) for event, pid in by if event == t) for t in twice), h
            # one task per event: the subscription's tasks, generation 0, are exactly the events
            name = next(n for n, s in THREE.items() if s["task"].endswith(h))
            sub = Subscription(name, "orders.placed", THREE[name]["task"], QUEUE_OF[h])
            prefix = QueueKeys(QUEUE_OF[h]).task(sub.id_base + "0-")
            stored = {k[len(prefix):] for k in r.scan_iter(match=prefix + "*", count=1000)}
            assert everything <= stored and len(stored) == EVENTS + 1, h
            print(f"\n{h}: {len(twice)} event(s) ran twice (begun by the killed worker)")
        # an entry the victim enqueued and did not acknowledge may still be pending after its task ran: the keeper
        # reclaims it once idle past WORKER_TIMEOUT, and the enqueue drops it (the count above stays EVENTS + 1)
        assert wait_for(lambda: all(g["pending"] == 0 for g in r.xinfo_groups("redisq:{topic:orders.placed}:stream")), 30), \
            r.xinfo_groups("redisq:{topic:orders.placed}:stream")
