"""The whole Redis key schema: the only module that spells key names.

Every key of one queue shares the hash tag ``{<queue>}``, so each Lua script
touches a single Redis Cluster slot (DESIGN invariant 6). Scripts that must
reach a per-task key receive the queue's prefix as an ARGV and append to it,
which keeps the key in the same slot.

=================================  ======  =================================================
key                                type    meaning
=================================  ======  =================================================
``P:pending``                      LIST    ids ready to run (priority 0); LPUSH in, taken from the right;
                                           or only ``~redisq:wake`` markers (a reserved id) that wake a blocked worker for
                                           ``P:prioritized`` (never both)
``P:prioritized``                  ZSET    ids ready to run of a priority other than 0, scored
                                           ``(100 - priority) * 2^44 + n`` (store/scripts/lib/ready.lua)
``P:prioseq``                      STRING  the counter ``n`` of those: FIFO within a priority
``P:scheduled``                    ZSET    id -> due time (Redis ms): delayed and retried
``P:slots`` / ``P:slots:<task>``   ZSET    fleet-wide concurrency: ids holding a slot of the queue's
                                           MAX_RUNNING / of the task's max_running -> taken at (ms)
``P:blocked`` / ``P:blocked:<t>``  LIST    ids waiting for such a slot (pending, not in a worker)
``P:rate`` / ``P:rate:<task>``     STRING  fleet-wide rate limit: the earliest next start (Redis ms)
``P:limits``                       HASH    task path -> its max_running, for the tasks that have one
                                           (store/scripts/lib/limits.lua)
``P:slots:<task>#<key>``, ...      ...     the same three per limit key (``@task(limit_key=...)``)
``P:keyload``                      ZSET    ``<task>#<key>`` -> its running + waiting; only keys with either
``P:fair`` / ``P:fair:<key>``      LIST /  a FAIR queue's ring of fairness keys with tasks ready / each key's
                                   ZSET    ready ids, scored as ``P:prioritized`` (store/scripts/lib/fair.lua)
``P:fairn``                        STRING  how many ids those ZSETs hold in all
``P:debounce:<key>``               STRING  the debounced task of an idempotency key (PX window + 1 h)
``P:throttle:<key>``               STRING  the run of an idempotency key's throttle window (PX the window)
``P:processing:<worker>``          LIST    ids one worker has taken and not yet settled
``P:running:<worker>``             STRING  JSON list of the ids of that list the worker runs now (the rest it
                                           holds unstarted, or waits to ack); written by the worker when it
                                           changes, with a TTL of WORKER_TIMEOUT (store/steps/running.py)
``P:dead``                         ZSET    id -> died at (Redis ms): the dead-letter queue
``P:workers``                      ZSET    worker id -> last heartbeat (Redis ms)
``P:alive``                        HASH    worker id -> start of its unbroken run of heartbeats
``P:presence``                     HASH    worker id -> ``<server run_id>:<client id>`` of the connection that
                                           proves the worker's process alive (store/steps/presence.py)
``P:reaper``                       STRING  the worker that polls the queue's presence, for a short lease
``P:worker:<worker>``              STRING  JSON about a live worker (host, pid, queues)
``P:t:<id>``                       HASH    the task: message, state, attempts, errors, result
``P:status:<id>``                  STRING  idempotency guard: ``running:<worker>`` (the claim; left to lapse
                                           after the ack) or ``success`` (the late ack of a lost lease)
``P:idem:<key>``                   STRING  user idempotency key -> id of the task holding it
``P:cancels``                      HASH    task id -> ``<Redis ms>|<who>``: cancel requests for running
                                           tasks (store/scripts/cancel.lua), polled by their workers; deleted
                                           by the script that settles the task (ack, bury, retry, reap,
                                           release), so at most one per task in a processing list
``P:paused``                       STRING  present while the queue is paused: ``<Redis ms>|<who>``;
                                           fetch.lua takes nothing while it exists
``P:sched:<name>``                 HASH    a periodic schedule's marker: last claimed tick, last run,
                                           counters (store/scripts/fire.lua), pause and last "run now"
                                           (store/scripts/schedule_*.lua); expires unless renewed, never
                                           while paused
``P:processed`` / ``P:failed``     STRING  counters of acks / failed attempts retry.lua took / dead letters
``P:dead_count``
``P:retried`` / ``P:failed_final`` STRING  totals only: retries scheduled / failed last attempts (bury.lua) /
``P:recovered``                            tasks reap.lua gave back after their worker died
``P:<counter>:<minute>``           STRING  the same counters per minute (kept 2 hours)
``P:durations:<minute>``           HASH    run times of the tasks acked that minute: ``<task>|<bucket>``
                                           -> runs, ``<task>|n`` -> runs, ``~names``; at most 50 task
                                           names (then ``~other``); kept 65 minutes (store/reads/durations.py)
``<any key above>:corrupt``        any     a key found of the wrong type, set aside by a script
                                           (lib/types.lua); expires (``t:<id>:corrupt`` after
                                           the dead-letter retention, and goes with its dead letter)
=================================  ======  =================================================

Events (store/topics/steps.py): a topic's keys share the hash tag ``{topic:<name>}``, apart from every queue's:

=================================  ======  =================================================
``T:stream``                       STREAM  the topic's events (field ``p``: the payload JSON); one consumer
                                           group per subscription
``T:gen``                          HASH    subscription -> its generation: bumped by a rewind, part of the task ids
``T:meta``                         HASH    ``dropped`` / ``dropped:<subscription>``: entries the hard cap
                                           trimmed before (every / that) subscription turned them into tasks
``T:waiters``                      HASH    ``<queue>|<id>|<step>`` -> JSON ``{"match", "due"}``: durable tasks waiting
                                           for an event (store/topics/waiters.py); dropped when woken or past due
=================================  ======  =================================================

``T`` is ``<KEY_PREFIX>:{topic:<name>}``.

``P`` is ``<KEY_PREFIX>:{<queue>}`` (``redisq:{default}`` by default). A partitioned queue
(``QUEUE_OPTIONS[q]["PARTITIONS"] = N``, core/partitions.py) has every key above once per partition:
partition 0 under ``{<queue>}`` (today's keys), partition ``i`` under ``{<queue>~i}``, e.g.
``redisq:{events~3}:pending``; ``~`` is not allowed in queue names (``NAME_RE``), so these never
collide with a configured queue. Nothing else is kept for the logical queue.
Task hash fields: ``msg`` (the JSON message), ``task`` (dotted path), ``prio`` (its priority, only when
not 0), ``maxr`` / ``rate`` (its own fleet-wide limits, when it has them), ``slot`` (the slots it holds:
``t`` its task's, ``q`` its queue's), ``rl`` (the start its rate limit booked for it), ``state``
(pending, scheduled, running, finished, dead), ``enqueued_at``,
``started_at``, ``last_attempted_at``, ``finished_at``, ``died_at`` (Redis ms),
``deliveries``, ``failures``, ``workers`` (comma-joined worker ids),
``errors`` (JSON list), ``error``/``exc`` (the last failure), ``result`` (JSON),
``idem`` (the user idempotency key), ``reason`` (why it was dead-lettered:
``failed``, ``timeout``, ``cancelled``, ``bad_message``, ...),
``errors_len`` / ``errors_dropped`` (see store/scripts/lib/errors.lua), ``replayed``,
``edited`` (replays with arguments edited in the admin), ``replayed_from``, ``moving_to`` (a dead letter being replayed into that queue),
``step:<name>`` (a durable task's recorded step, sleep or wait: store/steps/durable.py; kept with the task, its
dead letter included, so a replay resumes after the last one).

A workflow (workflows/canvas.py, workflows.py) keeps its bookkeeping in a hash-tag slot of its own,
``W`` = ``<KEY_PREFIX>:{wf:<id>}``; its steps are ordinary tasks in their queues' slots:

=================================  ======  =================================================
``W:meta``                         HASH    status (running, succeeded, failed, cancelled), total steps,
                                           created_at / finished_at (Redis ms), failed_step, error,
                                           on_error (the callback's spec), steps (JSON: each step's task and queue)
``W:spec``                         HASH    step -> JSON spec of a step released by the worker (store/scripts/wf_done.lua)
``W:deps``                         HASH    step -> JSON list of the steps that wait for it
``W:done``                         SET     steps that succeeded (a set: a redelivered step counts once)
``W:res``                          HASH    step -> its result (JSON), kept for the steps that wait for it
``W:gate``                         HASH    ``<child>|<parent>`` -> 1 per done parent of a waiting step, and
                                           ``<child>#`` -> how many: readiness in O(1), whatever the fan-in
``W:failed``                       SET     steps dead-lettered and not since succeeded
``<KEY_PREFIX>:{workflows}:totals``  HASH  fleet-wide counts of workflow transitions: created, succeeded,
                                           failed, resumed (un-failed by a replay), cancelled, cancelled_failed
                                           (cancelled while failed); bumped after each transition (metrics)
``<KEY_PREFIX>:{workflows}:index``  ZSET   workflow id -> created (Redis µs): the newest ``INDEX_KEPT`` workflows,
                                           for the admin's list (store/scripts/wf_index.lua trims it)
=================================  ======  =================================================

They expire RESULT_TTL after the workflow succeeds or is cancelled, and with the dead letters
(DEAD_LETTER_TTL, at least RESULT_TTL) after it fails, so a replayed step still finds its workflow.
"""

from __future__ import annotations

from django_redisq.core.options import DEFAULT_PREFIX, NAME_RE, WORKER_NAME_MAX

__all__ = ["DEFAULT_PREFIX", "NAME_RE", "STATES", "WORKER_NAME_MAX", "QueueKeys", "TopicKeys", "WorkflowKeys"]

STATES = ("pending", "scheduled", "running", "finished", "dead", "moving")
"""``moving``: a dead letter being replayed into another queue (store/scripts/move_out.lua)."""


class QueueKeys:
    """Key names of one queue; cheap to build, so callers may cache or not."""

    __slots__ = ("alive", "blocked", "cancels", "dead", "fair", "fairn", "keyload", "limits", "paused", "pending", "prefix", "presence", "prioritized",
                 "prioseq", "queue", "rate", "reaper", "scheduled", "slots", "workers")

    def __init__(self, queue: str, key_prefix: str = DEFAULT_PREFIX) -> None:
        self.queue = queue
        base = f"{key_prefix}:{{{queue}}}"
        self.prefix = base + ":"
        self.pending = base + ":pending"
        self.prioritized = base + ":prioritized"
        self.prioseq = base + ":prioseq"
        self.slots = base + ":slots"
        self.blocked = base + ":blocked"
        self.rate = base + ":rate"
        self.limits = base + ":limits"
        self.keyload = base + ":keyload"
        self.fair = base + ":fair"
        self.fairn = base + ":fairn"
        self.scheduled = base + ":scheduled"
        self.dead = base + ":dead"
        self.workers = base + ":workers"
        self.alive = base + ":alive"
        self.presence = base + ":presence"
        self.reaper = base + ":reaper"
        self.cancels = base + ":cancels"
        self.paused = base + ":paused"

    def processing(self, worker: str) -> str:
        return f"{self.prefix}processing:{worker}"

    def running(self, worker: str) -> str:
        """The ids ``worker`` runs now, of those in its processing list (store/steps/running.py)."""
        return f"{self.prefix}running:{worker}"

    def worker_info(self, worker: str) -> str:
        return f"{self.prefix}worker:{worker}"

    def task(self, task_id: str) -> str:
        return f"{self.prefix}t:{task_id}"

    def status(self, task_id: str) -> str:
        return f"{self.prefix}status:{task_id}"

    def schedule(self, name: str) -> str:
        """The marker of periodic schedule ``name`` (kept in its target queue's slot)."""
        return f"{self.prefix}sched:{name}"

    def task_slots(self, path: str) -> str:
        """The fleet-wide slots of task ``path``'s ``max_running`` (built the same way by lib/limits.lua)."""
        return f"{self.prefix}slots:{path}"

    def task_blocked(self, path: str) -> str:
        """The tasks of ``path`` waiting for one of those slots."""
        return f"{self.prefix}blocked:{path}"

    def idem(self, key: str) -> str:
        return f"{self.prefix}idem:{key}"

    @staticmethod
    def corrupt(key: str) -> str:
        """Where a script sets aside ``key`` when it finds it of the wrong type."""
        return key + ":corrupt"

    def durations(self, minute: int) -> str:
        """The run times of the tasks acked in ``minute`` (Redis ms // 60000), built the same way by ack.lua."""
        return f"{self.prefix}durations:{minute}"

    def counter(self, name: str, minute: int | None = None) -> str:
        """``processed``, ``failed``, ``dead_count`` (per minute too), ``retried``, ``failed_final``, ``recovered``."""
        if minute is None:
            return self.prefix + name
        return f"{self.prefix}{name}:{minute}"


class WorkflowKeys:
    """Key names of one workflow, all in its own hash-tag slot ``{wf:<id>}``."""

    __slots__ = ("deps", "done", "failed", "gate", "meta", "res", "spec", "workflow_id")

    def __init__(self, workflow_id: str, key_prefix: str = DEFAULT_PREFIX) -> None:
        self.workflow_id = workflow_id
        base = f"{key_prefix}:{{wf:{workflow_id}}}"
        self.meta = base + ":meta"
        self.spec = base + ":spec"
        self.deps = base + ":deps"
        self.done = base + ":done"
        self.res = base + ":res"
        self.gate = base + ":gate"
        self.failed = base + ":failed"

    @staticmethod
    def totals(key_prefix: str = DEFAULT_PREFIX) -> str:
        """The fleet-wide counts of workflow transitions (one HASH in its own slot)."""
        return f"{key_prefix}:{{workflows}}:totals"

    @staticmethod
    def index(key_prefix: str = DEFAULT_PREFIX) -> str:
        """The newest workflows by creation time (one ZSET in the totals' slot, capped)."""
        return f"{key_prefix}:{{workflows}}:index"

    def all(self) -> list[str]:
        """Every key, in the order the wf_*.lua scripts take them as KEYS."""
        return [self.meta, self.spec, self.deps, self.done, self.res, self.gate, self.failed]
class TopicKeys:
    """Key names of one topic (events), in the topic's own slot: ``<prefix>:{topic:<name>}:...``."""

    __slots__ = ("gen", "meta", "prefix", "stream", "topic", "waiters")

    def __init__(self, topic: str, key_prefix: str = DEFAULT_PREFIX) -> None:
        self.topic = topic
        self.prefix = f"{key_prefix}:{{topic:{topic}}}:"
        self.stream = self.prefix + "stream"
        self.gen = self.prefix + "gen"
        self.meta = self.prefix + "meta"
        self.waiters = self.prefix + "waiters"
