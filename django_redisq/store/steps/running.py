"""Which held tasks run: each worker's mark of the tasks it is executing now, per queue.

A step family the broker holds (``broker.running``). A worker's processing list holds every task it took and has not settled: the
ones running, and the ones fetched ahead and not started (held), and the ones
run and waiting for their ack. The guard (``P:status:<id>``) cannot tell them
apart: fetch.lua claims it. So each worker writes ``P:running:<worker>``, the
JSON list of the ids it executes now (at most its concurrency), with one SET
(or DEL) per queue in one pipelined round trip, only when that changes (at most
every ``worker/marks.py`` ``EVERY``) and again before the mark's TTL ends. The
reads (store/reads/queues.py, store/reads/tasks.py) count a worker's running
tasks as the ids of its mark, never more than its processing list holds (the
Running page: the ids of its mark found in the list), so at most its
concurrency: ``running`` never exceeds the fleet's slots. The rest of the
list is ``held``.

A mark may lag the truth by that interval: a task that just started is shown
held for a moment, one that just finished is shown running until its ack takes
it out of the list. It has a TTL, so a dead worker's lingers at most that long
(and its list is reaped anyway); a clean exit deletes it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence

from django_redisq.store.scripts.runner import ScriptRunner, ms


def marked(raw: object) -> set[str]:
    """The ids a stored mark names (an unreadable one names none)."""
    if not raw:
        return set()
    try:
        ids = json.loads(raw if isinstance(raw, str | bytes) else str(raw))
    except (ValueError, RecursionError):
        return set()
    return {str(i) for i in ids} if isinstance(ids, list) else set()


class RunningMarks:
    """Writes a worker's marks (plain commands: each mark is one key, written whole)."""

    def __init__(self, runner: ScriptRunner) -> None:
        self.runner = runner

    def mark(self, worker: str, running: Mapping[str, Collection[str]], queues: Sequence[str], ttl: float) -> None:
        """Write ``worker``'s mark on each of ``queues``: the ids it runs there now (deleted where none), kept ``ttl`` seconds."""
        pipe = self.runner.client.pipeline(transaction=False)
        for q in queues:
            key = self.runner.keys(q).running(worker)
            ids = running.get(q)
            if ids:
                pipe.set(key, json.dumps(sorted(ids)), px=ms(ttl))
            else:
                pipe.delete(key)
        pipe.execute()
