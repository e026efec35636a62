"""The worker's side of process-pool children: start them, wait until they are ready, keep a spare, end them.

``child.py`` is what runs in the template and in a child, ``template.py`` the
template they are forked from, ``handles.py`` a process as the worker sees it;
this module is how the pool gets its children and gives them back.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import wait

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from django_redisq.task import registered_modules
from django_redisq.worker.pools.child import CHILD_BOOTSTRAP, ChildConfig
from django_redisq.worker.pools.handles import Child, ended
from django_redisq.worker.pools.template import FORK_TIMEOUT, START_TIMEOUT, Template, TemplateGone, early_template, interpreter

__all__ = ["Child", "Children", "config_for", "early_template", "launch", "ready", "ready_afresh"]

logger = logging.getLogger("django_redisq")


def config_for(alias: str, worker_id: str) -> ChildConfig:
    """What a child needs to run exactly what this worker would: its task settings, task modules and import path."""
    modules = sorted(registered_modules() - {"__main__"})
    path = tuple(p for p in sys.path if isinstance(p, str))  # the import system skips any other entry
    return ChildConfig(alias, settings.TASKS, tuple(modules), worker_id, logging.getLogger("django_redisq").getEffectiveLevel(),
                       path, os.environ.get("DJANGO_SETTINGS_MODULE", ""))


def ready(child: Child) -> Child:
    """Wait until a forked ``child`` says it is ready; ``ImproperlyConfigured`` if it does not."""
    if wait([child.conn], FORK_TIMEOUT):
        try:
            msg = child.conn.recv()
        except (EOFError, OSError):
            msg = ("error", "")
        if msg[0] == "ready":
            return child
    child.kill()
    raise ImproperlyConfigured(f"a process-pool child (pid {child.pid}) forked from the template did not start: {child.death()}")


def launch(config: ChildConfig) -> Child:
    """A child started afresh (``python -c child.CHILD_BOOTSTRAP FD PATH...``), not forked; ``ready_afresh`` waits for it."""
    process, ours = interpreter(CHILD_BOOTSTRAP, config)
    try:
        ours.send(config)
    except OSError:
        pass  # it died at once: ready_afresh says so
    return Child(process, ours)


def ready_afresh(child: Child) -> Child:
    """Wait until a child started afresh has set up Django; ``ImproperlyConfigured`` with its reason if it could not."""
    detail = f"no answer within {START_TIMEOUT:g} s"
    if wait([child.conn], START_TIMEOUT):
        try:
            msg = child.conn.recv()
        except (EOFError, OSError):
            msg = ("error", "")
        if msg[0] == "ready":
            return child
        detail = msg[1]
    child.kill()
    lines = (detail or "it died while setting up").strip().splitlines()
    raise ImproperlyConfigured(f"a process-pool child could not start: {lines[-1]}" + "".join(f"\n  {x}" for x in lines[:-1]))


class Children:
    """Forks children for one pool from its template (started again if it died), keeps a spare, ends the ones it is given back."""

    def __init__(self, config: ChildConfig, early: Template | None = None) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._template_lock = threading.Lock()
        self._template: Template | None = None
        self._early = early  # forked at the pool's construction, configured when first needed
        self._warned = False
        self.templates_started = 0
        self._spare: Future[Child] | None = None
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="redisq-spawn")
        self._ender = ThreadPoolExecutor(1, thread_name_prefix="redisq-reap")
        self._closed = False

    @property
    def template(self) -> Template | None:
        return self._template

    def _live_template(self) -> Template:
        """The template, started (again) if there is none alive; ``ImproperlyConfigured`` if it cannot set up."""
        with self._template_lock:
            old = self._template
            if old is not None and old.alive():
                return old
            if self._closed:
                raise ImproperlyConfigured("the process pool is stopping")
            if old is not None:
                old.kill()
            early, self._early = self._early, None
            self._template = None
            self._template = (early.configure(self.config) if early is not None else Template.fresh(self.config)).ready()
            self.templates_started += 1
            if old is not None:
                logger.warning("process pool: the template (pid %s) %s; template %s replaces it", old.pid,
                               ended(old.process.returncode), self._template.pid)
            return self._template

    def new(self) -> Child:
        """A child forked from the template and ready; the template is started again once if it was gone."""
        for attempt in range(2):
            template = self._live_template()
            if self._afresh(template):
                return ready_afresh(launch(self.config))
            try:
                return ready(template.fork())
            except TemplateGone:
                template.process.poll()
                if attempt:
                    raise ImproperlyConfigured(f"the process-pool template (pid {template.pid}) died while forking a child") from None
        raise AssertionError("unreachable")

    def _afresh(self, template: Template) -> bool:
        """Whether children must be started afresh: the template has threads (a fork would copy the locks they hold,
        not the threads); said once in the log."""
        if template.threads <= 1:
            return False
        if not self._warned:
            self._warned = True
            logger.warning("process pool: the template has %d threads once Django is set up (started by the settings or a "
                           "task module): children are started afresh, not forked (each sets up Django itself, most of "
                           "a second)", template.threads)
        return True

    def start(self, n: int) -> list[Child]:
        """``n`` children, forked from one template (or started afresh side by side); none is left running if one
        cannot start."""
        started: list[Child] = []
        try:
            if self._afresh(self._live_template()):
                started = [launch(self.config) for _ in range(n)]
                return [ready_afresh(c) for c in started]
            for _ in range(n):
                started.append(self.new())
        except BaseException:
            for c in started:
                c.kill()
            self.close(kill=True)
            raise
        return started

    def take(self) -> Child:
        """The spare if one is ready or starting, else a new child; then a new spare is started."""
        with self._lock:
            spare, self._spare = self._spare, None
        try:
            if spare is not None:
                try:
                    child = spare.result()
                    if child.alive():
                        return child
                    child.kill()  # it died waiting (with its template?): a fresh one
                except ImproperlyConfigured:
                    pass
            return self.new()
        finally:
            with self._lock:
                if self._spare is None and not self._closed:
                    self._spare = self._spawner.submit(self.new)

    @property
    def spare(self) -> Future[Child] | None:
        return self._spare

    def retire(self, child: Child) -> None:
        """A recycled child leaves after its task in its own time; the lane goes on with the next."""
        self._ender.submit(child.end)

    def close(self, kill: bool = False) -> None:
        """No more children: the spare is stopped, then the template; with ``kill``, retiring ones are not waited for."""
        with self._lock:
            self._closed = True
            spare, self._spare = self._spare, None
        if spare is not None:
            try:
                spare.result(START_TIMEOUT).kill()
            except Exception:  # noqa: BLE001 - a spare that never started leaves nothing behind
                pass
        self._spawner.shutdown(wait=False)
        self._ender.shutdown(wait=not kill)
        with self._template_lock:
            template, self._template = self._template, None
            early, self._early = self._early, None
        if early is not None:
            early.kill()
        if template is not None:
            template.kill() if kill else template.stop()

    def kill_spare(self) -> None:
        spare = self._spare
        if spare is not None and spare.done() and spare.exception() is None:
            child = spare.result()
            if child.alive():
                child.process.kill()

    def kill_template(self) -> None:
        """At once: the template goes (and with it any child still alive)."""
        template = self._template
        if template is not None and template.process.poll() is None:
            template.process.kill()
