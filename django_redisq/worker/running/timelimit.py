"""Soft time limits for code running on threads: one watchdog thread per process.

``arm(ident, seconds)`` registers a deadline for a thread and returns a
handle (``seconds`` may be ``inf``: no limit, but still interruptible);
``disarm(handle)`` withdraws it and says whether it fired; ``interrupt(handle,
exc)`` raises ``exc`` (``TaskCancelled``) in that thread now, under the same rules. When a
deadline passes, the watchdog raises ``TaskTimeout`` *inside* that thread as an
asynchronous exception (``PyThreadState_SetAsyncExc``). The interpreter raises
it the next time the thread runs Python bytecode, so a blocking C call
(``time.sleep(60)``, a socket read without a timeout) is not interrupted; the
exception arrives when it returns.

An asynchronous exception that lands while the thread runs a finalizer (a
``__del__`` the garbage collector called there, a weakref callback) is not
raised in the task: Python reports it as "ignored" and carries on. So the
process's ``sys.unraisablehook`` is chained: an ignored ``TaskTimeout`` or
``TaskCancelled`` of a thread whose deadline fired (or that was interrupted),
not yet disarmed, is set again by the watchdog 10 ms later (seen:
a cancelled task ran its 30 s to success, its ``TaskCancelled`` ignored in a
redis-py client's ``__del__``).

The race that matters: an exception set just before ``disarm`` must never
reach the code after it. Firing and disarming take the same lock, so after
``disarm`` the watchdog cannot fire that handle; and if it had fired but the
exception is still pending (the thread was finishing), ``disarm`` clears it.
If the pending exception is raised before ``disarm`` clears it, it is raised
in the caller's code between the call and ``disarm``; callers put both in one
``try`` whose handler treats ``TaskTimeout`` as the limit having been reached.

Arming is a lock, a set insertion and a comparison; the watchdog is woken
only when a new deadline is earlier than the one it sleeps towards, so a
stream of tasks with the same limit costs it one wake-up per limit period.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from django_redisq.exceptions import TaskCancelled, TaskTimeout


@functools.cache
def _async_exc() -> tuple[Any, Any]:
    """PyThreadState_SetAsyncExc as (raise, clear), on own prototypes so that the shared ctypes.pythonapi attribute's
    argtypes are left alone. Made on the first deadline that fires or is disarmed late: ctypes is a few milliseconds
    of every worker's start that most never need."""
    import ctypes  # not at module level: a few milliseconds of every worker's start (see the docstring)

    raise_in = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.py_object)(("PyThreadState_SetAsyncExc", ctypes.pythonapi))
    clear_in = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p)(("PyThreadState_SetAsyncExc", ctypes.pythonapi))
    return raise_in, clear_in


def _raise_in(ident: int, exc_type: Any) -> Any:
    return _async_exc()[0](ident, exc_type)


def _clear_in(ident: int, none: None) -> Any:
    return _async_exc()[1](ident, none)


@dataclass(slots=True, eq=False)
class Handle:
    """One armed deadline (``time.monotonic()`` seconds) for one thread."""

    ident: int
    seconds: float
    deadline: float
    fired: bool = False
    again: type[BaseException] | None = None  # set again by the watchdog at the deadline: it was ignored once


class Watchdog:
    """Deadlines of running calls; a daemon thread raises ``TaskTimeout`` in the late ones."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every deadline and the thread: a new watchdog in place (a forked child's, whose thread and locks
        the fork did not bring along, or may have brought held)."""
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._armed: set[Handle] = set()  # hashed by identity
        self._fired: set[Handle] = set()  # fired (or interrupted), not yet disarmed: their call is still unwinding
        self._wake_at = float("inf")  # the deadline the watchdog sleeps towards
        self._thread: threading.Thread | None = None
        self.fired = 0  # how many deadlines fired (for logs and tests)

    def arm(self, ident: int, seconds: float) -> Handle:
        """Raise ``TaskTimeout`` in thread ``ident`` once ``seconds`` have passed, unless disarmed first."""
        handle = Handle(ident, seconds, time.monotonic() + seconds)
        _install()
        with self._lock:
            self._armed.add(handle)
            if handle.deadline < self._wake_at:
                if self._thread is None:
                    self._start()
                self._wake_at = handle.deadline
                self._cond.notify()
        return handle

    def disarm(self, handle: Handle) -> bool:
        """Withdraw ``handle``; True if its deadline had fired (any pending exception is cleared)."""
        with self._lock:  # a C lock: nothing between acquiring and the with-block can raise
            self._armed.discard(handle)
            self._fired.discard(handle)
            fired = handle.fired
        if fired:
            _clear_in(handle.ident, None)  # fired but not yet raised: it must not reach the caller's code
        return fired

    def interrupt(self, handle: Handle, exc_type: type[BaseException]) -> bool:
        """Raise ``exc_type`` in the handle's thread now (a cancellation); False if it was already disarmed or fired."""
        with self._lock:
            if handle not in self._armed:
                return False
            self._armed.remove(handle)
            self._fired.add(handle)
            handle.fired = True
            _raise_in(handle.ident, exc_type)
        return True

    def reraise(self, ident: int, exc_type: type[BaseException]) -> bool:
        """Have ``exc_type`` set again in thread ``ident``, 10 ms from now, if its handle fired and is not disarmed.

        Not from here: the hook runs in that thread, which would raise it at once, in the hook, where it is
        ignored again. If the finalizer still runs in 10 ms, it is ignored again, and this comes round again.
        """
        with self._lock:
            handle = next((h for h in self._fired if h.ident == ident), None)
            if handle is None:
                return False
            self._fired.remove(handle)
            handle.again, handle.deadline = exc_type, time.monotonic() + 0.01
            self._armed.add(handle)
            if self._thread is None:
                self._start()
            self._wake_at = min(self._wake_at, handle.deadline)
            self._cond.notify()
        return True

    def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="redisq-timelimit", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                due = [h for h in self._armed if h.deadline <= now]
                for h in due:
                    self._armed.remove(h)
                    self._fired.add(h)
                    if h.again is None:
                        self.fired += 1
                    h.fired = True
                    _raise_in(h.ident, h.again or TaskTimeout)
                self._wake_at = min((h.deadline for h in self._armed), default=float("inf"))
                self._cond.wait(None if self._wake_at == float("inf") else self._wake_at - now)



watchdog = Watchdog()
os.register_at_fork(after_in_child=watchdog.reset)  # in a forked child the watchdog thread does not exist


_chained = [sys.unraisablehook]
"""The hook ``_unraisable`` passes every report on to: the one it replaced."""


def _unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """``sys.unraisablehook``: what was ignored is reported as before, then ours is set again (see the module)."""
    _chained[0](unraisable)
    exc_type = unraisable.exc_type
    if exc_type is not None and issubclass(exc_type, (TaskTimeout, TaskCancelled)):
        watchdog.reraise(threading.get_ident(), exc_type)


def _install() -> None:
    """Put ``_unraisable`` in front of the process's hook, again if something replaced it since (a test runner does)."""
    if sys.unraisablehook is not _unraisable:
        _chained[0] = sys.unraisablehook
        sys.unraisablehook = _unraisable


def arm(ident: int, seconds: float) -> Handle:
    return watchdog.arm(ident, seconds)


def disarm(handle: Handle) -> bool:
    return watchdog.disarm(handle)


def interrupt(handle: Handle, exc_type: type[BaseException]) -> bool:
    return watchdog.interrupt(handle, exc_type)
