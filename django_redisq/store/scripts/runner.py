"""ScriptRunner: the one way the store runs its Lua steps, handed to every step family in its constructor.

A step family (the broker's own steps, the operator's, the schedules', the
presence poll's, a workflow's, a topic's) spells a script's KEYS and ARGV and
reads its reply; the runner does the rest, the same for all of them: the fast
EVALSHA path (connection/wire.py), loading a script again after NOSCRIPT (a
restart, ``SCRIPT FLUSH``), the WAIT of ``DURABLE_REPLICAS`` after the steps that
must survive a failover (store/scripts/durable.py), and text made safe for the
wire (``on_wire``). It also holds what every family needs beside it: the
options, the client (made on first use) and each queue's keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from django_redisq.connection.clients import get_client
from django_redisq.connection.wire import wire_for
from django_redisq.core.options import Options
from django_redisq.store import scripts
from django_redisq.store.keys import QueueKeys
from django_redisq.store.scripts import durable


def on_wire(value: Any) -> Any:
    """Text as Redis should get it: garbage ids and error texts may hold lone surrogates
    (undecodable bytes read back with 'surrogateescape'); send those as the original bytes."""
    if value.__class__ is str and not value.isascii():
        return value.encode("utf-8", "surrogateescape")
    return value


def ms(seconds: float) -> int:
    """``seconds`` as the scripts' whole milliseconds, at least 1 (a TTL or lease of 0 would mean none)."""
    return max(1, int(seconds * 1000))


class ScriptRunner:
    """Runs the scripts of one backend's options on one client. Cheap to build; the client is made on first use."""

    def __init__(self, options: Options, client: redis.Redis | None = None) -> None:
        self.options = options
        self._client = client
        self._keys: dict[str, QueueKeys] = {}
        self._calls: dict[str, Callable[[Sequence[Any], Sequence[Any], Any], Any]] = {}

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = get_client(self.options)
        return self._client

    def keys(self, queue: str) -> QueueKeys:
        """The keys of ``queue`` (one ``QueueKeys`` per queue, kept: the hot path asks for them on every step)."""
        k = self._keys.get(queue)
        if k is None:
            k = self._keys[queue] = QueueKeys(queue, self.options.key_prefix)
        return k

    def run(self, name: str, keys: Sequence[Any], args: Sequence[Any], *, pipe: Any = None) -> Any:
        """The reply of ``store/scripts/<name>.lua`` run on ``keys`` and ``args``.

        ``pipe``: add the call to that pipeline instead (its reply comes with the pipeline's; redis-py loads a
        missing script before executing it). A durable step (``DURABLE_REPLICAS``) is never pipelined.
        """
        call = self._calls.get(name)
        if call is None:
            call = self._calls[name] = self._made(name)
        return call(keys, args, pipe)

    def now_ms(self) -> int:
        """Redis server time in milliseconds (TIME): the one clock (DESIGN invariant 3)."""
        sec, usec = self.client.time()
        return int(sec) * 1000 + int(usec) // 1000

    def _made(self, name: str) -> Callable[[Sequence[Any], Sequence[Any], Any], Any]:
        script: Script = self.client.register_script(scripts.source(name))
        execute = wire_for(self.client)  # connection/wire.py: without execute_command's per-call wrappers
        durable_step = bool(self.options.durable_replicas) and name in durable.STEPS

        def call(keys: Sequence[Any], args: Sequence[Any], pipe: Any) -> Any:
            keys, args = [on_wire(k) for k in keys], [on_wire(a) for a in args]
            if durable_step:  # DURABLE_REPLICAS: the script then WAIT on one held connection (store/scripts/durable.py)
                return durable.call(self.client, self.options, script.sha, scripts.source(name), keys, args,
                                    lambda: durable.what(name, keys, args), settle=name != "enqueue")
            if pipe is not None:
                return script(keys=keys, args=args, client=pipe)
            try:  # EVALSHA directly: the hot path, without Script.__call__'s wrappers
                return execute("EVALSHA", script.sha, len(keys), *keys, *args)
            except NoScriptError:  # the server restarted or SCRIPT FLUSH: load it again
                self.client.script_load(script.script)
                return execute("EVALSHA", script.sha, len(keys), *keys, *args)

        return call
