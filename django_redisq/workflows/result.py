"""Reading a workflow back: ``WorkflowResult`` (bounded reads; ``repair`` the one write), for workflows/enqueue.py.

What a read costs, and why: a poll must not grow with the workflow. ``refresh``
reads the workflow's status, counts and failed steps (store ``header``), and
the stored state of at most ``PROBE`` steps; ``step(i)`` reads step ``i`` only
(its record and its task hash); ``results`` and ``page`` read ``PAGE`` steps a
round trip. Only the steps' list as written (``summary``: task path, queue,
parents) is one field of O(steps) bytes, read once per ``WorkflowResult`` and
only when a page is.

No read writes. What earlier reads repaired is ``repair()``, an explicit write:
a depends_on parent that a worker fetched before wf_adopt.lua marked it is
settled without the workflow hook, and a step dead-lettered outside a worker's
settle (the store's cancel alone) fails no workflow by itself. ``repair`` runs
at the end of ``enqueue_dependent``, on every full poll of ``wait``/``await_``
(the waiter is who needs the workflow to end), and by an operator (the admin
page's Repair button, ``redisq workflow ID --repair``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, overload

from django_redisq.compat import TaskResult, TaskResultStatus
from django_redisq.exceptions import RedisQError
from django_redisq.store.server import door, reaching
from django_redisq.store.workflows import WorkflowHeader, WorkflowState, WorkflowStore
from django_redisq.workflows.canvas import step_id
from django_redisq.workflows.port import Backend, backend_of
from django_redisq.workflows.steps import from_hash, not_queued

FINAL = (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
FULL_EVERY = 1.0
"""Seconds between full reads while waiting (a step dead-lettered outside a worker's settle shows only in those)."""
PAGE = 100


def _conf(wf: WorkflowResult) -> Any:
    """The server a workflow read meant (store/server.py door): its backend's."""
    return wf._backend.conf
"""Steps read per round trip by ``WorkflowResult.results`` / ``page`` (the admin page and ``redisq workflow`` show one)."""
PROBE = 100
"""Steps whose stored state ``refresh`` reads to tell READY from RUNNING before any step is done, and failed steps
it reads to tell a failed workflow from one whose failed steps were replayed."""
REPAIR_CHUNK = 500
"""Steps ``repair`` reads per round trip."""


class WorkflowNotFound(RedisQError, LookupError):
    """No workflow with this id (never created, or its keys expired RESULT_TTL after it ended)."""


@dataclass(frozen=True, slots=True)
class Poll:
    """A step of the waiting plan: read whether the workflow ended (``full``: repair, then a full refresh)."""

    full: bool


@dataclass(frozen=True, slots=True)
class Pause:
    """A step of the waiting plan: sleep ``seconds`` before the next poll."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Refresh:
    """A step of the waiting plan: ``refresh`` (what a timeout reports)."""


WaitPlan = Generator["Poll | Pause | Refresh", bool, None]
"""``WorkflowResult.waiting``: what ``wait`` runs with blocking calls and ``await_`` on the event loop."""


class WorkflowResult:
    """A workflow, as last read: ``status``, ``error``, ``results`` (one ``TaskResult`` per step), ``refresh()``.

    ``refresh()`` is a bounded read (the workflow's status, counts and failed steps, and the stored state of its
    first ``PROBE`` steps), never a write. ``results`` and ``states`` are read on access, ``PAGE`` steps per round
    trip (``page()`` reads one page); ``step(i)`` reads one step. ``repair()`` is the one method that writes.
    """

    def __init__(self, backend: str, workflow_id: str, as_enqueued: Sequence[tuple[TaskResult, str]] = ()) -> None:
        """``as_enqueued``: each step's result and state as its enqueuer knows them, read by nothing until ``refresh``."""
        self.backend = backend
        self.id = workflow_id
        self.status: TaskResultStatus = TaskResultStatus.READY
        self.error: str = ""
        self.header: WorkflowHeader | None = None
        self._summary: list[dict[str, Any]] | None = None  # fixed at creation: read once per instance
        self._pages: dict[int, list[tuple[TaskResult, str]]] = {}
        for i in range(0, len(as_enqueued), PAGE):
            self._pages[i // PAGE] = list(as_enqueued[i:i + PAGE])
        self._state: WorkflowState | None = None

    def __repr__(self) -> str:
        return f"<WorkflowResult {self.id} {self.status}>"

    @property
    def _backend(self) -> Backend:
        return backend_of(self.backend, "it runs no workflows")

    @property
    def _store(self) -> WorkflowStore:
        return self._backend.workflows.store

    @property
    def total(self) -> int:
        return self.header.total if self.header else sum(len(p) for p in self._pages.values())  # as enqueued: unread

    @property
    def results(self) -> StepResults:
        """One ``TaskResult`` per step, in the order written (a chord's callback last), read on access a page at a time."""
        return StepResults(self)

    @property
    def states(self) -> list[str]:
        """Each step's stored task state (``waiting``: not queued); reads every page not read since the last refresh."""
        return [st for i in range(0, self.total, PAGE) for _, st in self.cached_page(i // PAGE)]

    @property
    def state(self) -> WorkflowState | None:
        """The full record (every step as written, the done and failed sets): O(steps), read on access."""
        if self._state is None:
            with reaching(self._backend.conf):
                self._state = self._store.read(self.id)
        return self._state

    @property
    def return_value(self) -> Any:
        """The last step's return value (a chord's callback, a chain's last step), once SUCCESSFUL."""
        last = self.step(self.total - 1) if self.total else None
        return last.return_value if last is not None else None

    @door(_conf)
    def refresh(self) -> WorkflowResult:
        """Read the workflow's status again: a bounded read that writes nothing (``repair`` does the repairs)."""
        store = self._store
        header = store.header(self.id)
        if header is None:
            raise WorkflowNotFound(f"no workflow {self.id!r} (never created, or expired RESULT_TTL after it ended)")
        self.header, self._pages, self._state = header, {}, None
        self.status, dead = self._status(store, header)
        self.error = _why(header) if self.status == TaskResultStatus.FAILED else ""
        failed = header.meta.get("failed_step") or (str(dead) if dead is not None else "")
        if self.status == TaskResultStatus.FAILED and not self.error and failed:
            self.error = f"step {failed} (task {step_id(self.id, int(failed))}) " + ("failed" if dead is None else "was dead-lettered")
        return self

    def _status(self, store: WorkflowStore, header: WorkflowHeader) -> tuple[TaskResultStatus, int | None]:
        """From the stored status, and the dead step a running workflow's probe found (dead-lettered where no hook
        saw it: FAILED all the same, as ``repair`` will record it). A failed workflow whose failed steps are all
        replayed (each back in a queue: none dead or missing) reads RUNNING."""
        status, queues = header.meta.get("status", "running"), sorted(self._backend.queues)
        if status == "succeeded":
            return TaskResultStatus.SUCCESSFUL, None
        if status == "cancelled":
            return TaskResultStatus.FAILED, None
        if status == "failed":
            failed = sorted(header.failed)[:PROBE]
            # a failed step with no task at all (never queued: too large; or its dead letter expired) cannot resume
            dead = any(st in ("dead", "") for _, st in store.task_states(self._ids(header, failed), queues))
            return (TaskResultStatus.FAILED if dead or not failed else TaskResultStatus.RUNNING), None
        states = [st for _, st in store.task_states(self._ids(header, range(min(PROBE, header.total))), queues)]
        if "dead" in states:
            return TaskResultStatus.FAILED, states.index("dead")
        if header.done or any(st not in ("", "pending", "scheduled") for st in states):
            return TaskResultStatus.RUNNING, None
        return TaskResultStatus.READY, None

    def _ids(self, header: WorkflowHeader, indexes: Iterable[int]) -> list[str]:
        """The task ids of those steps. A depends_on parent has its own id, in the steps' list: that list is read
        for a workflow of at most ``PROBE`` steps (a bounded read; a depends_on of more parents is probed by the
        ids its steps would have)."""
        if header.total <= PROBE:
            return [self._info(i).get("id") or step_id(self.id, i) for i in indexes]
        return [step_id(self.id, i) for i in indexes]

    def _info(self, index: int) -> dict[str, Any]:
        if self._summary is None:
            self._summary = self._store.summary(self.id)
        return self._summary[index] if index < len(self._summary) else {}

    @door(_conf)
    def step(self, index: int) -> TaskResult | None:
        """Step ``index``'s result, reading that step only (its record and its task hash); None if there is none."""
        store = self._store
        found = store.step_record(self.id, index)
        if found is None:
            raise WorkflowNotFound(f"no workflow {self.id!r} (never created, or expired RESULT_TTL after it ended)")
        header, spec, done = found
        if not 0 <= index < header.total:
            return None
        # a first step was queued at creation and has no stored spec: the steps' list names it
        info = {"t": spec.task, "q": spec.queue, "p": spec.parents} if spec is not None else self._info(index)
        return self._read(store, [index], {index: info}, {index} if done else set(), _why(header))[0][0]

    @door(_conf)
    def page(self, offset: int = 0, limit: int = PAGE) -> list[tuple[TaskResult, str, dict[str, Any]]]:
        """Steps ``offset`` to ``offset + limit`` (as far as there are): each result, stored state and step as written."""
        if self.header is None:
            self.refresh()
        stop = min(self.total, offset + max(0, limit))
        store = self._store
        indexes = list(range(max(0, offset), stop))
        infos = {i: self._info(i) for i in indexes}
        found = self._read(store, indexes, infos, store.done_among(self.id, indexes), _why(self.header))
        return [(r, st, infos[i]) for i, (r, st) in zip(indexes, found, strict=True)]

    def cached_page(self, n: int) -> list[tuple[TaskResult, str]]:
        """Page ``n`` (``PAGE`` steps) of results and states, read once per refresh (``results`` indexes these)."""
        if n not in self._pages:
            self._pages[n] = [(r, st) for r, st, _ in self.page(n * PAGE, PAGE)]
        return self._pages[n]

    def _read(self, store: WorkflowStore, indexes: list[int], infos: dict[int, dict[str, Any]], done: set[int],
              why: str) -> list[tuple[TaskResult, str]]:
        """The steps' results and stored states, their task hashes read in one round trip."""
        backend = self._backend
        ids = [(infos[i].get("id") or step_id(self.id, i), str(infos[i].get("q", "default"))) for i in indexes]
        hashes = store.task_hashes(ids, sorted(backend.queues))
        out = []
        for i, (task_id, _), found in zip(indexes, ids, hashes, strict=True):
            if found is not None and "msg" in found[1]:
                out.append((from_hash(backend, task_id, found[0], found[1]), found[1].get("state", "")))
            else:
                out.append((not_queued(backend, task_id, infos[i], i in done, why), "waiting"))
        return out

    @door(_conf)
    def repair(self) -> int:
        """Write what a worker could not: record a depends_on parent settled by a worker that never saw the marker
        (it was fetched before wf_adopt.lua wrote it), and fail the workflow of a step dead-lettered where no hook
        saw it (the store's cancel alone). Reads every step's state (O(steps), ``REPAIR_CHUNK`` a round trip);
        how many steps it repaired."""
        engine, queues = self._backend.workflows, sorted(self._backend.queues)
        store = engine.store
        state = store.read(self.id)
        if state is None:
            raise WorkflowNotFound(f"no workflow {self.id!r}")
        repaired = 0
        for start in range(0, len(state.steps), REPAIR_CHUNK):
            if state.meta.get("status") != "running":
                break
            indexes = [i for i in range(start, min(len(state.steps), start + REPAIR_CHUNK)) if i not in state.done]
            ids = [state.steps[i].get("id") or step_id(self.id, i) for i in indexes]
            for i, task_id, (queue, st) in zip(indexes, ids, store.task_states(ids, queues), strict=True):
                if state.steps[i].get("id") and st in ("finished", "dead"):  # a depends_on parent, settled unseen
                    found = store.task_hashes([(task_id, queue)], queues)[0] if st == "finished" else None
                    engine.settle_parent(self.id, i, task_id, st, found[1].get("result", "null") if found else "null")
                    repaired += 1
                elif st == "dead":  # dead-lettered where no hook saw it: fail the workflow now
                    engine.fail_steps(queue, [task_id], "was dead-lettered")
                    repaired += 1
        return repaired

    def _poll(self, full: bool) -> bool:
        """Whether the workflow has ended: one HGET of its stored status while it runs; every ``FULL_EVERY``
        seconds, ``repair`` then a full ``refresh``. A waiter is who needs a step settled where no workflow hook
        saw it to end its workflow; the repair writes only when there is something to repair."""
        if self._store.status(self.id) == "running":
            if not full:
                return False
            self.repair()
        return self.refresh().status in FINAL

    def waiting(self, timeout: float | None, interval: float) -> WaitPlan:
        """The plan of ``wait`` and ``await_``: poll, pause, until the workflow ended; ``TimeoutError`` after
        ``timeout`` seconds (None: no limit). Each ``Poll`` is answered with whether the workflow ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last_full = time.monotonic()
        while not (yield Poll(full := time.monotonic() - last_full >= FULL_EVERY)):
            last_full = time.monotonic() if full else last_full
            if deadline is not None and time.monotonic() >= deadline:
                yield Refresh()
                raise TimeoutError(f"workflow {self.id} is still {self.status} after {timeout} s")
            yield Pause(interval)

    @door(_conf)
    def wait(self, timeout: float | None = None, interval: float = 0.05) -> WorkflowResult:
        """Refresh until SUCCESSFUL or FAILED; ``TimeoutError`` after ``timeout`` seconds (None: no limit)."""
        plan = self.waiting(timeout, interval)
        step = next(plan, None)
        while step is not None:
            answer = False
            if isinstance(step, Poll):
                answer = self._poll(step.full)
            elif isinstance(step, Pause):
                time.sleep(step.seconds)
            else:
                self.refresh()
            step = _next(plan, answer)
        return self

    @door(_conf)
    async def await_(self, timeout: float | None = None, interval: float = 0.05) -> WorkflowResult:
        """``wait`` on the running event loop: the reads run in a thread, the pauses are ``asyncio.sleep``."""
        plan = self.waiting(timeout, interval)
        step = next(plan, None)
        while step is not None:
            answer = False
            if isinstance(step, Poll):
                answer = await asyncio.to_thread(self._poll, step.full)
            elif isinstance(step, Pause):
                await asyncio.sleep(step.seconds)
            else:
                await asyncio.to_thread(self.refresh)
            step = _next(plan, answer)
        return self

    @door(_conf)
    def cancel(self, who: str = "api") -> str:
        """Cancel: steps not yet queued never are, queued ones are cancelled, running ones stopped as single tasks are.

        Returns the status before (``running``, ``failed``; ``succeeded`` / ``cancelled``: nothing changed).
        """
        backend = self._backend
        store = backend.workflows.store
        before = store.cancel(self.id, who)
        if before == "":
            raise WorkflowNotFound(f"no workflow {self.id!r}")
        if before in ("succeeded", "cancelled"):
            return before
        state = store.read(self.id)
        for i, info in enumerate(state.steps if state else []):
            if state is not None and i in state.done:
                continue
            backend.broker.operator.cancel(info.get("q", "default"), [step_id(self.id, i)], f"{who} (workflow {self.id})")
        self.refresh()
        return before


class StepResults(Sequence[TaskResult]):
    """``WorkflowResult.results``: one ``TaskResult`` per step, each page of ``PAGE`` steps read when first indexed."""

    def __init__(self, wf: WorkflowResult) -> None:
        self.wf = wf

    def __len__(self) -> int:
        return self.wf.total

    @overload
    def __getitem__(self, index: int) -> TaskResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[TaskResult]: ...
    def __getitem__(self, index: int | slice) -> TaskResult | list[TaskResult]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.wf.cached_page(index // PAGE)[index % PAGE][0]


def _next(plan: WaitPlan, answer: bool) -> Poll | Pause | Refresh | None:
    """The plan's next step, given the answer to its last (None once it is done)."""
    try:
        return plan.send(answer)
    except StopIteration:
        return None


def _why(header: WorkflowHeader | None) -> str:
    """Why a step of this workflow will not run: its error, or who cancelled it; '' while it runs."""
    meta = header.meta if header else {}
    return meta.get("error") or (f"workflow cancelled by {meta.get('cancelled_by')}" if meta.get("status") == "cancelled" else "")


