"""Operator actions: replay (here or into another queue) and delete dead letters;
cancel tasks; pause, resume and run now a periodic schedule; pause and resume a queue.

Shared by the admin and ``manage.py redisq``. Work is done in batches of
``BATCH`` ids, each one atomic script call (replay.lua, purge.lua, or
move_out.lua, move_in.lua, then purge.lua), so a worker never waits on Redis for more than
one batch (a few ms). A run over every dead letter matching a filter is
resumable: ``Progress`` carries the snapshot and position, so the admin can do
one time slice per request and the command can draw a progress bar.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django_redisq.core.clock import ms_to_datetime
from django_redisq.core.message import encode_arguments
from django_redisq.ops import workflows
from django_redisq.ops.inspector import DeadFilter, Inspector, find_schedule
from django_redisq.schedules.ticks import id_base, marker_ttl_ms, own_limits, task_priority, tick_message, wants_tick
from django_redisq.store.broker import Broker
from django_redisq.store.reads.records import pause_state
from django_redisq.store.workflows import WorkflowStore
from django_redisq.workflows.engine import WorkflowEngine

logger = logging.getLogger("django_redisq")

TASK_ID_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")
"""What a task id can be (ours are URL-safe base64; periodic ones add '-' and digits)."""
REPLAY, DELETE = "replay", "delete"
ACTIONS = (REPLAY, DELETE)
BATCH = 500
PAUSE, RESUME, RUN_NOW = "pause", "resume", "run"
SCHEDULE_ACTIONS = (PAUSE, RESUME, RUN_NOW)


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

    def clear_step(self, queue: str, task_id: str, name: str) -> bool:
        """Forget a durable task's recorded step so its next run calls it again (not while it runs: ``ValueError``)."""
        return self.broker.durable.clear(queue, task_id, name)

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
            d, s = self._act_in(action, queue, list(ids[lo : lo + BATCH]), to)
            done, skipped = done + d, skipped + s
        return done, skipped

    def _act_in(self, action: str, queue: str, ids: list[str], to: str | None,
                where: dict[str, str] | None = None) -> tuple[int, int]:
        """``_act`` on each id's own partition when ``queue`` is partitioned (``where``: known already)."""
        if self.inspector.options.partitions(queue) <= 1:
            return self._act(action, queue, ids, to)
        if where is None:
            where = self.inspector.dead_partition_of(queue, ids)
        done = skipped = 0
        for q in dict.fromkeys(where[i] for i in ids if i in where):
            d, s = self._act(action, q, [i for i in ids if where.get(i) == q], to)
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
            done, skipped = self._act_in(action, queue, [i for i, _ in scan.found], to, scan.where) if scan.found else (0, 0)
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

    def cancel(self, ids: Sequence[str], who: str, queue: str | None = None) -> dict[str, str]:
        """Cancel tasks (broker.operator.cancel) of ``queue``, or of whichever configured queue holds each id.

        Returns id -> ``cancelled``, ``requested``, ``finished`` or ``missing``, in the order given.
        """
        ids = list(dict.fromkeys(ids))
        where = dict.fromkeys(ids, queue) if queue is not None else self.inspector.task_queues(ids)
        if queue is not None:
            self.inspector.keys(queue)  # UnknownQueue
        out = dict.fromkeys(ids, "missing")
        for q in dict.fromkeys(w for w in where.values() if w is not None):
            chosen = [i for i in ids if where.get(i) == q]
            out.update(zip(chosen, self.broker.operator.cancel(q, chosen, who), strict=True))
            WorkflowEngine(WorkflowStore(self.broker)).fail_steps(q, [i for i in chosen if out[i] == "cancelled"], f"cancelled by {who}")
        counts = Counter(out.values())
        logger.info("cancel by %s: %s", who, ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())))
        return out

    def edit_replay(self, queue: str, task_id: str, sha: str, message: str) -> None:
        """Rewrite dead letter ``task_id``'s message, if it is still the one whose SHA-1 is ``sha``, and replay it.

        ``MessageChanged`` if someone changed it meanwhile, ``TaskNotFound`` if it is no longer a dead letter.
        """
        self.inspector.keys(queue)  # UnknownQueue
        self.broker.operator.edit_replay(queue, task_id, sha, message)
        workflows.resume_replayed(self.broker, queue, [task_id])  # a workflow step: its workflow runs again

    def _act(self, action: str, queue: str, ids: list[str], to: str | None) -> tuple[int, int]:
        if action == DELETE:
            return self.broker.operator.purge(queue, ids), 0
        if to is None or to == queue:
            done = self.broker.operator.replay(queue, ids), 0
        else:
            done = self._replay_to(queue, to, ids)
        if done[0]:
            workflows.resume_replayed(self.broker, to or queue, ids)  # workflow steps: their workflows run again
        return done

    def _replay_to(self, queue: str, to: str, ids: list[str]) -> tuple[int, int]:
        """Three atomic steps (see move_out.lua): mark moving here, store pending in ``to``, delete here.

        A crash between them leaves each task dead here, marked 'moving' (and maybe already
        pending in ``to``); replaying it into ``to`` again finishes the move.
        """
        marked = self.broker.operator.move_out(queue, to, ids)
        copies: list[tuple[str, str, list[str]]] = []
        skipped = 0
        for task_id, code, fields in marked:
            if code == 1:
                copies.append((task_id, self._rewrite(fields[0], to), fields))
            elif code < 0:
                skipped += 1  # no message to move, or being moved elsewhere: it stays dead here
            # code 0: no longer dead here (someone else replayed, moved or deleted it)
        if not copies:
            return 0, skipped
        self.broker.operator.move_in(to, queue, copies)
        # stored, or already there from an interrupted move: either way the original goes
        return self.broker.operator.purge(queue, [task_id for task_id, _, _ in copies]), skipped

    @staticmethod
    def _rewrite(msg: str, to: str) -> str:
        """The message with its queue set to ``to``; unchanged if it does not decode (its worker dead-letters it)."""
        try:
            data = json.loads(msg)
        except (ValueError, RecursionError):
            return msg
        if not isinstance(data, dict):
            return msg
        data["queue"] = to
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


# -- periodic schedules -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScheduleChange:
    """What a pause, resume or run now did."""

    action: str
    name: str
    queue: str
    changed: bool  # False: it was paused already (pause) or not paused (resume); nothing changed
    at: datetime | None  # pause: paused since; resume: when the pause began; run: enqueued at
    task_id: str = ""  # run: the task enqueued


class ScheduleOperations:
    """Pause, resume and run now the periodic schedules of one backend alias.

    Each is one script call (schedule_pause.lua, schedule_resume.lua,
    schedule_run.lua) on the schedule's marker; only configured, valid
    schedules can be changed (``UnknownSchedule`` otherwise).
    """

    def __init__(self, inspector: Inspector, broker: Broker | None = None) -> None:
        self.inspector = inspector
        self.broker = broker or Broker(inspector.options, inspector.client)

    def act(self, action: str, name: str, by: str) -> ScheduleChange:
        if action == PAUSE:
            return self.pause(name, by)
        if action == RESUME:
            return self.resume(name, by)
        if action == RUN_NOW:
            return self.run_now(name, by)
        raise ValueError(f"unknown action {action!r}; expected one of {', '.join(SCHEDULE_ACTIONS)}")

    def pause(self, name: str, by: str) -> ScheduleChange:
        """Stop the schedule's ticks from running, on every worker, until ``resume``."""
        s = find_schedule(self.inspector, name)
        changed, since = self.broker.schedules.pause(s.queue, s.name, by)
        if changed:
            logger.info("schedule %s paused by %s", s.name, by)
        return ScheduleChange(PAUSE, s.name, s.queue, changed, ms_to_datetime(since))

    def resume(self, name: str, by: str) -> ScheduleChange:
        """Run the schedule's ticks again from the next one; ticks that passed while paused are not run."""
        s = find_schedule(self.inspector, name)
        since = self.broker.schedules.resume(s.queue, s.name, marker_ttl_ms(s, self.broker.server_time_ms()))
        if since is not None:
            logger.info("schedule %s resumed by %s", s.name, by)
        return ScheduleChange(RESUME, s.name, s.queue, since is not None, ms_to_datetime(since))

    def run_now(self, name: str, by: str) -> ScheduleChange:
        """Enqueue the schedule's task once now (its ``periodic_tick``: now on the Redis clock), leaving its ticks alone."""
        s = find_schedule(self.inspector, name)
        encode_arguments(s.args, s.kwargs, self.inspector.options.max_message_bytes)  # InvalidArguments: too large
        now = self.broker.server_time_ms()
        task_id = f"{id_base(s)}m{secrets.token_hex(8)}"
        at = self.broker.schedules.run_now(s.queue, s.name, task_id, tick_message(s, now, wants_tick(s)), s.task, marker_ttl_ms(s, now),
                                     task_priority(s), own_limits(s))
        if at is None:  # pragma: no cover - 64 random bits
            raise RuntimeError(f"task id {task_id} is taken")
        logger.info("schedule %s run now by %s: enqueued %s on queue %s", s.name, by, task_id, s.queue)
        return ScheduleChange(RUN_NOW, s.name, s.queue, True, ms_to_datetime(at), task_id)


# -- pausing a queue ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueChange:
    """What a queue's pause or resume did."""

    action: str
    queue: str
    changed: bool  # False: it was paused already (pause) or not paused (resume); nothing changed
    at: datetime | None  # when the pause began (this one, or the one already there)
    by: str  # who paused it


class QueueOperations:
    """Pause and resume the queues of one backend alias (store/scripts/pause.lua, store/scripts/resume.lua).

    A paused queue takes enqueues as usual; workers start none of its tasks
    within a second, hand back those they fetched, and let running ones
    finish (worker/fetching/pausing.py). Resumed, they serve it again within a second.
    """

    def __init__(self, inspector: Inspector, broker: Broker | None = None) -> None:
        self.inspector = inspector
        self.broker = broker or Broker(inspector.options, inspector.client)

    def act(self, action: str, queue: str, by: str) -> QueueChange:
        self.inspector.keys(queue)  # UnknownQueue
        if action == PAUSE:
            changed, value = self.broker.operator.pause_queue(queue, by[:200])
            if changed:
                logger.info("queue %s paused by %s", queue, by)
        elif action == RESUME:
            was = self.broker.operator.resume_queue(queue)
            changed, value = was is not None, was or ""
            if changed:
                logger.info("queue %s resumed by %s", queue, by)
        else:
            raise ValueError(f"unknown action {action!r}; expected one of {PAUSE}, {RESUME}")
        _, since, who = pause_state(value or None)
        return QueueChange(action, queue, changed, since, who)
