"""``runworker --health-file PATH``: a file whose age says whether the worker still reaches Redis.

The worker rewrites the file after every heartbeat Redis answered, so a
liveness probe only checks its age (``find PATH -mmin -1``, or a few lines of
shell: see the Monitoring guide, docs/howto/monitoring.md). A file is cheaper and more
honest than asking the worker over the broker (Celery's ``inspect ping``
needs the very broker whose outage it should detect): a worker wedged after
a reconnect stops touching it, whatever its threads still do.

When no heartbeat has reached Redis for ``WORKER_TIMEOUT`` (other workers may
reap this one by now), the worker says so once in its log at ERROR and in the
file, whose time is then set back to the last good heartbeat, so the age the
probe sees keeps growing.

Whoever controls the file controls the liveness signal, so the worker refuses,
at start, a path that exists and belongs to another user, and one in a
directory any user may write to without the sticky bit (anyone there could
replace the file); a path in no directory is refused too. Each write goes to a new temporary file in the same
directory (created exclusively, mode 0600), renamed over the path; if any step
fails, the temporary file is removed.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
import time
from datetime import datetime

from django.core.exceptions import ImproperlyConfigured

from django_redisq.compat import UTC

logger = logging.getLogger("django_redisq")


class HealthFile:
    """Tells a file of every good heartbeat, and of a Redis silence past ``timeout`` seconds."""

    def __init__(self, path: str, timeout: float, worker_id: str) -> None:
        self.path, self.timeout, self.worker_id = os.path.abspath(path), timeout, worker_id
        self.last_ok = time.monotonic()  # a worker that never reached Redis goes stale after timeout too
        self.last_ok_wall = time.time()
        self.stale = False
        refuse_foreign(self.path)

    def beat(self, ok: bool) -> None:
        """One heartbeat's result (called from the heartbeat thread)."""
        if ok:
            if self.stale:
                logger.warning("worker %s reaches Redis again after %.1fs; %s is fresh", self.worker_id, self.silence(), self.path)
            self.last_ok, self.last_ok_wall, self.stale = time.monotonic(), time.time(), False
            self._write(f"ok {self.worker_id} {self._iso(self.last_ok_wall)}\n")
        elif not self.stale and self.silence() >= self.timeout:
            self.stale = True
            logger.error(
                "worker %s has had no Redis round trip for %.1fs (WORKER_TIMEOUT %.1fs): it may be reaped; "
                "restart it if this lasts (%s no longer ages well)", self.worker_id, self.silence(), self.timeout, self.path)
            self._write(f"stale {self.worker_id} no Redis round trip since {self._iso(self.last_ok_wall)}\n",
                        mtime=self.last_ok_wall)

    def silence(self) -> float:
        return time.monotonic() - self.last_ok

    @staticmethod
    def _iso(ts: float) -> str:
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")

    def _write(self, text: str, mtime: float | None = None) -> None:
        """Replace the file in one step (a probe never reads half a line); no temporary file outlives a failure."""
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(self.path), prefix=".redisq-health-")
            with os.fdopen(fd, "w") as f:
                f.write(text)
            if mtime is not None:
                os.utime(tmp, (mtime, mtime))
            os.replace(tmp, self.path)
            tmp = None
        except OSError as exc:
            logger.warning("cannot write the health file %s (%s)", self.path, exc)
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


def refuse_foreign(path: str) -> None:
    """``ImproperlyConfigured`` unless ``path`` (absolute) can be this worker's own: it exists and another user
    owns it, its directory is writable by every user without the sticky bit, or there is no such directory."""
    uid = os.geteuid()
    try:
        owner = os.lstat(path).st_uid
    except FileNotFoundError:
        pass
    else:
        if owner != uid:
            raise ImproperlyConfigured(f"{path} belongs to uid {owner}, not to this worker's uid {uid}: another user "
                                       "controls it; choose a path in a directory only the worker's user can write to")
    folder = os.path.dirname(path)
    try:
        mode = os.stat(folder).st_mode
    except FileNotFoundError:
        raise ImproperlyConfigured(f"{path}: the directory {folder} does not exist") from None
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise ImproperlyConfigured(f"{path}: every user may replace files in {folder} (world-writable, no sticky bit); "
                                   "choose a path in a directory only the worker's user can write to (in a volume created "
                                   "world-writable, such as a Kubernetes emptyDir, a subdirectory made with mode 0700)")
