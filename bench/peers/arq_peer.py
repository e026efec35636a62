"""arq (asyncio jobs on Redis), results kept (its default); worker: ``arq arq_peer.WorkerSettingsC<N>`` (max_jobs N).

arq runs ``async def`` jobs only, so its round-trip task awaits the same ``RPUSH`` with ``redis.asyncio`` and its
I/O stand-in awaits ``asyncio.sleep(0.001)`` (``common.arpush_one`` / ``asleep_one``). Its enqueue is a coroutine:
the sync enqueue loop runs each ``enqueue_job`` to completion on one event loop. Logging: the ``arq``
command's own (INFO to stderr, its default: a line per job started and finished).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import redis
from arq.connections import RedisSettings, create_pool
from common import arpush_one, asleep_one, record_start

NAME = "arq"
PACKAGE = "arq"
URL = os.environ["BENCH_REDIS_URL"]
DEFAULT_CONC = 10  # arq's default max_jobs
WORKER = f"1 process, max_jobs {DEFAULT_CONC} (its default)"


async def noop(ctx: dict[str, Any], x: int) -> int:
    return x


async def rpush(ctx: dict[str, Any], x: int) -> int:
    return await arpush_one(x)


async def sleep_io(ctx: dict[str, Any], x: int) -> int:
    return await asleep_one(x)


async def stamp(ctx: dict[str, Any], x: int) -> int:
    return record_start(x)


RESULTS_DEFAULT = True
RESULTS = os.environ.get("BENCH_RESULTS", "") != "off"  # the redis-cost section's switch: keep_result=0
RESULTS_SWITCH = True


class WorkerSettings:
    functions = [noop, rpush, sleep_io, stamp]
    redis_settings = RedisSettings.from_dsn(URL)
    max_jobs = DEFAULT_CONC
    keep_result = 3600 if RESULTS else 0


for _c in (1, 2, 4, 8):  # arq reads a settings class's own attributes, not inherited ones
    globals()[f"WorkerSettingsC{_c}"] = type(f"WorkerSettingsC{_c}", (), {**{k: v for k, v in vars(WorkerSettings).items()
                                                                          if not k.startswith("__")}, "max_jobs": _c})

KINDS = {"noop": "noop", "rpush": "rpush", "sleep": "sleep_io", "stamp": "stamp"}
_loop: asyncio.AbstractEventLoop | None = None
_pool: Any = None


def _client() -> tuple[asyncio.AbstractEventLoop, Any]:
    global _loop, _pool
    if _loop is None:
        _loop = asyncio.new_event_loop()
        _pool = _loop.run_until_complete(create_pool(WorkerSettings.redis_settings))
    return _loop, _pool


def enqueue(kind: str, i: int) -> None:
    loop, pool = _client()
    loop.run_until_complete(pool.enqueue_job(KINDS[kind], i))


def fill(kind: str, n: int) -> None:
    loop, pool = _client()

    async def batch(start: int, stop: int) -> None:
        await asyncio.gather(*(pool.enqueue_job(KINDS[kind], i) for i in range(start, stop)))

    for start in range(0, n, 500):
        loop.run_until_complete(batch(start, min(n, start + 500)))


def done_count(r: redis.Redis, n: int) -> int:
    """A job leaves the sorted set ``arq:queue`` when it finishes."""
    return n - int(r.zcard("arq:queue"))


def worker_desc(conc: int | None) -> str:
    return WORKER if conc is None else f"max_jobs {conc}"


def worker_argv(bindir: Path, conc: int | None, index: int = 0) -> list[str] | None:
    return [str(bindir / "arq"), "arq_peer.WorkerSettings" if conc is None else f"arq_peer.WorkerSettingsC{conc}"]
