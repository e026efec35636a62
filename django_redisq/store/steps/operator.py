"""The operator's steps on stored tasks: replay, edit, purge, cancel, move dead letters between queues, pause a queue.

A step family the broker holds (``broker.operator``), built with its ``ScriptRunner``: each
method is one atomic script or one plain command, called from the admin, the ``redisq``
command and the API, never on a task's hot path (but ``cancel_requests``, which a worker
polls). The task's own life (enqueue, fetch, settle, reap) is the broker's (store/broker/broker.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import redis

from django_redisq.exceptions import MessageChanged, TaskNotFound
from django_redisq.store.keys import QueueKeys
from django_redisq.store.scripts.runner import ScriptRunner

CANCEL_OUTCOMES = {1: "cancelled", 2: "requested", 3: "finished", 0: "missing"}
CANCEL_BATCH = 100
"""Ids per cancel.lua call."""
CANCEL_SCAN = 200_000
"""Pending entries one cancel.lua call may walk to find the ids it removes (a few ms of Redis time)."""


class MovedOut(NamedTuple):
    """move_out.lua's answer for one id: its code (1: marked moving) and, when marked, its fields in ``MOVED_FIELDS`` order."""

    id: str
    code: int
    fields: list[str]


MOVED_FIELDS = ("message", "task", "errors", "errors_len", "errors_dropped", "workers", "enqueued_at", "idem", "priority")
"""The fields move_out.lua answers for a dead letter it marked, in its order (what move_in.lua takes back)."""


class Paused(NamedTuple):
    """pause.lua's answer: whether this call paused the queue, and the pause key's ``<Redis ms>|<who>``."""

    now: bool
    value: str


class OperatorSteps:
    """What operators do to stored tasks, one script (or plain command) per step."""

    def __init__(self, runner: ScriptRunner) -> None:
        self.runner = runner
        self.options = runner.options

    @property
    def client(self) -> redis.Redis:
        return self.runner.client

    def keys(self, queue: str) -> QueueKeys:
        return self.runner.keys(queue)

    # -- operator actions -----------------------------------------------

    def replay(self, queue: str, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        k = self.keys(queue)
        return int(self.runner.run("replay", keys=[k.dead, k.pending, k.prioritized, k.prioseq], args=[k.prefix, *ids]))

    def edit_replay(self, queue: str, task_id: str, expected_sha1: str, message: str) -> None:
        """Rewrite a dead letter's message and replay it atomically (store/scripts/edit_replay.lua).

        ``TaskNotFound`` when it is not a dead letter of ``queue`` (any more),
        ``MessageChanged`` when its message is no longer the one ``expected_sha1`` hashes.
        """
        k = self.keys(queue)
        code = int(self.runner.run("edit_replay", keys=[k.dead, k.pending, k.prioritized, k.prioseq], args=[k.prefix, task_id, expected_sha1, message]))
        if code == 0:
            raise TaskNotFound(f"task {task_id} is not a dead letter of queue {queue} (any more)")
        if code < 0:
            raise MessageChanged(f"the arguments of task {task_id} changed since the edit started; nothing was written")

    def purge(self, queue: str, ids: Sequence[str]) -> int:
        if not ids:
            return 0
        k = self.keys(queue)
        return int(self.runner.run("purge", keys=[k.dead], args=[k.prefix, *ids]))

    def cancel(self, queue: str, ids: Sequence[str], who: str) -> list[str]:
        """Cancel tasks of ``queue`` (store/scripts/cancel.lua, up to CANCEL_BATCH ids per atomic call).

        Per id, in order: ``"cancelled"`` (was pending or scheduled: now a dead letter, reason
        ``cancelled``), ``"requested"`` (running: its worker stops it, see ``cancel_requests``),
        ``"finished"`` (already finished or dead: unchanged) or ``"missing"`` (no such task).
        ``who`` ('admin:<username>', 'cli', 'api') goes into the error: "cancelled by <who>".
        """
        k = self.keys(queue)
        o = self.options.for_queue(queue)
        out: list[str] = []
        todo = list(ids)
        while todo:  # a call answers -1 for the ids it did not reach in its scan budget: send those again
            codes = [int(c) for c in self.runner.run("cancel", keys=[k.pending, k.scheduled, k.dead, k.cancels, k.workers, k.prioritized, k.blocked],
                                            args=[k.prefix, who[:200], int(o.dead_letter_ttl * 1000), o.dead_letter_max,
                                                  CANCEL_SCAN, *todo[:CANCEL_BATCH]])]
            done = [CANCEL_OUTCOMES[c] for c in codes if c != -1]
            out += done
            todo = todo[len(done):]
        return out

    def cancel_requests(self, queue: str) -> dict[str, str]:
        """The running tasks of ``queue`` asked to stop: id -> who asked. One HGETALL, of nothing when there are none.

        A worker polls this, stops those it runs, and buries each with
        ``cancelled_error(who)`` and reason ``CANCELLED``, which deletes the request.
        The hash holds one entry per requested task still in a processing list.
        """
        try:
            raw = cast("dict[str, str]", self.client.hgetall(self.keys(queue).cancels))
        except redis.ResponseError as exc:  # not a hash (another program?): the next script sets it aside
            if "WRONGTYPE" not in str(exc):
                raise
            return {}
        return {task_id: value.partition("|")[2] if "|" in value else value for task_id, value in raw.items()}

    def move_out(self, queue: str, to: str, ids: Sequence[str]) -> list[MovedOut]:
        """Step 1 of a replay into another queue: mark dead letters 'moving' to ``to``; one ``MovedOut`` per id."""
        if not ids:
            return []
        k = self.keys(queue)
        out = self.runner.run("move_out", keys=[k.dead], args=[k.prefix, to, *ids])
        width = 2 + len(MOVED_FIELDS)
        return [MovedOut(out[i], int(out[i + 1]), list(out[i + 2 : i + width])) for i in range(0, len(out), width)]

    def move_in(self, queue: str, source: str, tasks: Sequence[tuple[str, str, list[str]]]) -> list[int]:
        """Step 2: store ``(id, rewritten message, move_out fields)`` as pending in ``queue``; 1 stored, 0 already here."""
        if not tasks:
            return []
        k = self.keys(queue)
        argv: list[Any] = [k.prefix, len(tasks)]
        for task_id, msg, (_, task, errors, errors_len, dropped, workers, enqueued_at, idem, prio) in tasks:
            argv += [task_id, msg, task, errors or "[]", errors_len, dropped, workers, enqueued_at, source, idem, prio]
        return [int(c) for c in self.runner.run("move_in", keys=[k.pending, k.prioritized, k.prioseq], args=argv)]

    def dead_ids(self, queue: str, count: int, newest_first: bool = False) -> list[str]:
        k = self.keys(queue)
        if newest_first:
            return cast("list[str]", self.client.zrevrange(k.dead, 0, count - 1))
        return cast("list[str]", self.client.zrange(k.dead, 0, count - 1))

    def replay_all(self, queue: str, batch: int = 500) -> int:
        """Replay every dead letter of a queue, in batches (each batch one atomic step)."""
        return self._drain_dead(queue, self.replay, batch)

    def purge_all(self, queue: str, batch: int = 500) -> int:
        return self._drain_dead(queue, self.purge, batch)

    def _drain_dead(self, queue: str, action: Any, batch: int) -> int:
        total = 0
        while ids := self.dead_ids(queue, batch):
            done = action(queue, ids)
            total += done
            if done == 0:  # only entries that cannot move remain
                break
        return total

    # -- pausing a queue --------------------------------------------------

    def pause_queue(self, queue: str, by: str) -> Paused:
        """Pause a queue (store/scripts/pause.lua): (paused by this call, the key's ``<Redis ms>|<who>``).

        A partitioned queue: every partition, partition 0's answer (each is one atomic step of its own).
        """
        replies = [self.runner.run("pause", keys=[self.keys(p).paused], args=[by]) for p in self.options.physical(queue)]
        return Paused(any(int(code) == 1 for code, _ in replies), str(replies[0][1]))

    def resume_queue(self, queue: str) -> str | None:
        """Resume a paused queue (store/scripts/resume.lua): the pause's ``<Redis ms>|<who>``, None if it was not paused."""
        replies = [self.runner.run("resume", keys=[self.keys(p).paused], args=[]) for p in self.options.physical(queue)]
        was = [str(value) for code, value in replies if int(code) == 1]
        return was[0] if was else None

    def paused_states(self, queues: Sequence[str]) -> dict[str, str | None]:
        """Each queue's pause key (``<Redis ms>|<who>``), None where it is not paused; one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for q in queues:
            pipe.get(self.keys(q).paused)
        out: dict[str, str | None] = {}
        for q, v in zip(queues, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(v, redis.ResponseError):  # a key of another type: fetch.lua sees it exist, so paused
                out[q] = ""
            elif isinstance(v, Exception):
                raise v
            else:
                out[q] = None if v is None else str(v)
        return out
