"""Operator actions on dead letters: replay (here or into another queue) and delete.

Shared by the admin and ``manage.py redisq``. Work is done in batches of
``BATCH`` ids, each one atomic script call (replay.lua, purge.lua, or
move_in.lua then purge.lua), so a worker never waits on Redis for more than
one batch (a few ms). A run over every dead letter matching a filter is
resumable: ``Progress`` carries the snapshot and position, so the admin can do
one time slice per request and the command can draw a progress bar.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from redis.commands.core import Script

from . import scripts
from .broker import Broker
from .inspect import DeadFilter, Inspector

REPLAY, DELETE = "replay", "delete"
ACTIONS = (REPLAY, DELETE)
BATCH = 500
MOVE_FIELDS = ("msg", "task", "errors", "workers", "enqueued_at")


@dataclass(slots=True)
class Progress:
    """How far a run over all matching dead letters got; resumable from ``pos``."""

    total: int = 0  # matches counted when the run was confirmed (for display)
    done: int = 0  # replayed or deleted so far
    skipped: int = 0  # matched but could not move (no message that decodes, for a replay into another queue)
    pos: int = 0  # rank in the snapshot where the walk continues
    top: str = ""  # the snapshot: dead letters that died later are left alone
    finished: bool = False


class Operations:
    """Mutations of one backend alias's dead letters."""

    def __init__(self, inspector: Inspector, broker: Broker | None = None) -> None:
        self.inspector = inspector
        self.broker = broker or Broker(inspector.options, inspector.client)
        self._move_in: Script | None = None

    def check(self, action: str, queue: str, to: str | None = None) -> None:
        """Refuse an unknown action, or a queue the settings do not name, before anything changes."""
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
        self.inspector.keys(queue)
        if to is not None:
            if action != REPLAY:
                raise ValueError("only a replay can go to another queue")
            self.inspector.keys(to)

    def act(self, action: str, queue: str, ids: Sequence[str], to: str | None = None) -> tuple[int, int]:
        """Replay or delete ``ids`` (ids not dead in ``queue`` are skipped): (done, could not move)."""
        self.check(action, queue, to)
        done = skipped = 0
        for lo in range(0, len(ids), BATCH):
            d, s = self._act(action, queue, list(ids[lo : lo + BATCH]), to)
            done, skipped = done + d, skipped + s
        return done, skipped

    def act_matching(
        self,
        action: str,
        queue: str,
        flt: DeadFilter,
        progress: Progress,
        to: str | None = None,
        deadline: float | None = None,
        on_batch: Callable[[Progress], None] | None = None,
    ) -> Progress:
        """Work through every dead letter matching ``flt`` up to the snapshot, newest first.

        Stops when done or when ``time.monotonic()`` passes ``deadline``; call
        again with the same ``progress`` to continue.
        """
        self.check(action, queue, to)
        while not progress.finished:
            scan = self.inspector.scan_dead(queue, flt, top=progress.top, start=progress.pos, want=BATCH)
            progress.top = scan.top
            done, skipped = self._act(action, queue, [i for i, _ in scan.found], to) if scan.found else (0, 0)
            progress.done += done
            progress.skipped += skipped
            # entries before scan.next that are still there keep their rank; removed ones close the gap
            progress.pos = scan.next - done
            progress.finished = scan.exhausted
            if on_batch:
                on_batch(progress)
            if deadline is not None and time.monotonic() >= deadline:
                break
        return progress

    def _act(self, action: str, queue: str, ids: list[str], to: str | None) -> tuple[int, int]:
        if action == DELETE:
            return self.broker.purge(queue, ids), 0
        if to is None or to == queue:
            return self.broker.replay(queue, ids), 0
        return self._replay_to(queue, to, ids)

    def _replay_to(self, queue: str, to: str, ids: list[str]) -> tuple[int, int]:
        """Copy into ``to`` (move_in.lua), then delete the originals (purge.lua)."""
        src, dst = self.inspector.keys(queue), self.inspector.keys(to)
        pipe = self.inspector.client.pipeline(transaction=False)
        for i in ids:
            pipe.zscore(src.dead, i)
            pipe.hmget(src.task(i), MOVE_FIELDS)
        replies = pipe.execute()
        argv: list[str | int] = []
        moving: list[str] = []
        skipped = 0
        for n, i in enumerate(ids):
            score, (msg, task, errors, workers, enqueued_at) = replies[2 * n], replies[2 * n + 1]
            if score is None:
                continue  # no longer dead here: someone else replayed or deleted it
            try:
                data = json.loads(msg or "")
                if not isinstance(data, dict):
                    raise ValueError("not an object")
            except ValueError:
                skipped += 1  # the message cannot be rewritten for the new queue; it stays dead here
                continue
            data["queue"] = to
            argv += [i, json.dumps(data, separators=(",", ":"), ensure_ascii=False), task or data.get("task", ""),
                     errors or "[]", workers or "", enqueued_at or "", queue]
            moving.append(i)
        if not moving:
            return 0, skipped
        if self._move_in is None:
            self._move_in = self.inspector.client.register_script(scripts.source("move_in"))
        self._move_in(keys=[dst.pending], args=[dst.prefix, len(moving), *argv])
        return self.broker.purge(queue, moving), skipped

