"""The processes of a process pool as the worker sees them: a forked child, the template, a child with its pipe.

``Forked`` is a child the template forked, so its exit code comes from the
template's reports; ``OwnChild`` is one this process forked itself (the early
template); ``Child`` is either (or a child started afresh) with the pipe the
worker sends it tasks on. Each offers the part of ``subprocess.Popen``'s
interface the pool uses, so the pool need not know how a process was started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Protocol


class ExitReports(Protocol):
    """What a ``Forked`` child reads of its template: the exit codes it reported, whether it is gone."""

    exits: dict[int, int]
    gone: threading.Event

    def wait_exit(self, pid: int, timeout: float | None) -> int | None: ...


class Forked:
    """A child forked by the template, seen from the worker as ``subprocess.Popen`` shows a child of its own.

    The template is its parent and reaps it; its exit code comes from the template's report
    (``Template.exits``). Once the template is gone, a child no longer found is dead (it dies with the
    template) and counts as killed by SIGKILL.
    """

    def __init__(self, template: ExitReports, pid: int) -> None:
        self.template = template
        self.pid = pid

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def poll(self) -> int | None:
        code = self.template.exits.get(self.pid)
        if code is not None:
            return code
        if self.template.gone.is_set():
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return -signal.SIGKILL
            except PermissionError:
                pass
        return None

    def wait(self, timeout: float | None = None) -> int:
        code = self.template.wait_exit(self.pid, timeout)
        if code is None:
            code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(f"child {self.pid}", timeout or 0.0)
        return code

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class OwnChild:
    """A child this process forked itself, with the part of ``subprocess.Popen``'s interface the template uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL  # reaped elsewhere: gone
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"template {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return code

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclass(eq=False)
class Child:
    process: Forked | subprocess.Popen[bytes]
    conn: Connection
    tasks: int = 0  # run so far
    rss: int = 0  # resident bytes after its last task

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def join(self, timeout: float) -> bool:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
        self.join(5)
        self.conn.close()

    def end(self) -> None:
        """Ask it to leave after its task; kill it if it has not within 5 s."""
        if self.alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.join(5)
        self.kill()

    def death(self) -> str:
        """How it ended, for the attempt's error: 'was killed by SIGKILL', 'exited with status 1'."""
        return ended(self.process.returncode, running="exited with status None")


def ended(code: int | None, running: str = "died") -> str:
    """How a process with exit code ``code`` ended, in words (``running``: what to say of one with none yet)."""
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return running if code is None else f"exited with status {code}"
