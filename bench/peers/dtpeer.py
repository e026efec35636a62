"""What the two Django Tasks peers (``vtasks_peer``, ``tasks_redis_peer``) share: Django set up from ``dtpeer_settings``."""

from __future__ import annotations

import os
from typing import Any


def setup(peer: str) -> dict[str, Any]:
    """Set up Django for ``peer`` in this process (and, through the environment, in the workers it starts): the tasks by kind."""
    os.environ["BENCH_DT_PEER"] = peer
    os.environ["DJANGO_SETTINGS_MODULE"] = "dtpeer_settings"
    import django

    django.setup()
    import dtpeer_tasks

    return {"noop": dtpeer_tasks.noop, "rpush": dtpeer_tasks.rpush, "sleep": dtpeer_tasks.sleep_io, "stamp": dtpeer_tasks.stamp}
