"""What the topology tests share: fast heartbeats on the cluster, and the tasks' effects on the single server."""

from __future__ import annotations

from typing import Any

import pytest

from tests.testapp import topology_tasks

FAST = {"HEARTBEAT_INTERVAL": 0.2, "WORKER_TIMEOUT": 1.5}
"""A dead worker is reaped within about 2 s (the default WORKER_TIMEOUT is minutes)."""


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    return FAST


@pytest.fixture(autouse=True)
def effects_on_the_single_server(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The topology tasks count their runs on the single (steady) Redis: a cluster node would redirect, a failover
    would lose them."""
    monkeypatch.setattr(topology_tasks, "EFFECTS_URL", redis_url)
