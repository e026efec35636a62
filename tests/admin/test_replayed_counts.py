"""A replayed task's page counts its attempts and deliveries truthfully: in all, and since the last replay.

replay.lua restarts a task's ``failures`` and ``deliveries`` at zero (a full set
of retries), and keeps its error history and its workers' list (one entry a
delivery); the page must not call the restarted count "in all".
"""

from __future__ import annotations

import re

import pytest

from django_redisq.ops.inspector import Inspector
from django_redisq.ops.operations import REPLAY, Operations
from django_redisq.settings.read import get_options
from tests.admin.test_site import detail_url, fast_passwords  # noqa: F401 - the autouse fixture
from tests.helpers import drain
from tests.testapp import tasks

pytestmark = pytest.mark.django_db


def attempts_cell(html: str) -> str:
    return " ".join(re.search(r'<td id="redisq-attempts">(.*?)</td>', html, re.S).group(1).split())


def test_a_task_replayed_once_counts_both_runs(r, make_worker, admin_client):
    result = tasks.always_fails.delay("twice dead")  # max_retries=1: two failed attempts, then dead
    drain(make_worker, [result])
    assert "2; delivered 2 times" in attempts_cell(admin_client.get(detail_url(result.id)).content.decode())
    Operations(Inspector(get_options("default"))).act(REPLAY, "default", [result.id])
    drain(make_worker, [result])
    cell = attempts_cell(admin_client.get(detail_url(result.id)).content.decode())
    assert cell == ("4 in all, 2 since the last replay; delivered 4 times in all, 2 since the last replay "
                    "(replayed 1 time)"), cell
