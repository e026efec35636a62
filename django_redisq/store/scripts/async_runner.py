"""AsyncScriptRunner: the store's Lua steps on the running event loop (the async twin of ``ScriptRunner``).

The same scripts and the same text made safe for the wire (``on_wire``) as the
sync runner, sent on the loop's own wire (connection/async_pools.py,
connection/async_wire.py); after NOSCRIPT (a restart, ``SCRIPT FLUSH``) a
script is loaded and run again. Kept apart from store/scripts/runner.py so
that code which never runs a loop never imports redis.asyncio.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from hashlib import sha1
from typing import Any

from redis.exceptions import NoScriptError

from django_redisq.connection.async_pools import LoopPools, get_wire
from django_redisq.connection.async_wire import AsyncWire
from django_redisq.core.options import Options
from django_redisq.store import scripts
from django_redisq.store.scripts.durable import timeout_ms
from django_redisq.store.scripts.runner import on_wire


@cache
def _sha(name: str) -> str:
    return sha1(scripts.source(name).encode()).hexdigest()  # the name Redis gives a script


class AsyncScriptRunner:
    """Runs the scripts of one backend's options on the running loop's wire. Cheap to build: all state is per loop."""

    def __init__(self, options: Options) -> None:
        self.options = options

    async def wire(self) -> tuple[AsyncWire, LoopPools]:
        """The running loop's wire to these options' Redis, and what the loop holds (per-loop state)."""
        return await get_wire(self.options)

    async def run(self, name: str, keys: Sequence[Any], args: Sequence[Any], wire: AsyncWire | None = None) -> Any:
        """The reply of ``store/scripts/<name>.lua`` (EVALSHA on ``wire``, the running loop's by default)."""
        if wire is None:
            wire, _ = await self.wire()
        packed = [on_wire(k) for k in keys] + [on_wire(a) for a in args]
        try:
            return await wire.execute("EVALSHA", _sha(name), len(keys), *packed)
        except NoScriptError:
            await wire.script_load(scripts.source(name))
            return await wire.execute("EVALSHA", _sha(name), len(keys), *packed)

    async def run_then_wait(self, name: str, keys: Sequence[Any], args: Sequence[Any], wire: AsyncWire) -> list[Any] | None:
        """``DURABLE_REPLICAS``: the script then ``WAIT`` back to back on the wire's own socket: [reply, replicas that
        acknowledged], each an exception if it failed; None where the wire has no socket of its own (a cluster's or a
        sentinel's routing client: then the caller runs the sync step, store/scripts/durable.py)."""
        packed = [on_wire(k) for k in keys] + [on_wire(a) for a in args]
        wait = ("WAIT", self.options.durable_replicas, timeout_ms(self.options))
        evalsha = ("EVALSHA", _sha(name), len(keys), *packed)
        replies = await wire.execute_pinned(evalsha, wait)
        if replies is not None and isinstance(replies[0], NoScriptError):
            await wire.script_load(scripts.source(name))
            replies = await wire.execute_pinned(evalsha, wait)
            assert replies is not None
        return replies
