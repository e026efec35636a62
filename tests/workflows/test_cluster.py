"""A workflow on a Redis Cluster: a chain across two queues whose slots are on different masters,
with the workflow's own keys in a third slot (its hash tag ``{wf:<id>}``)."""

from __future__ import annotations

import pytest

from django_redisq import chain, chord
from django_redisq.compat import TaskResultStatus
from django_redisq.store.keys import QueueKeys, WorkflowKeys
from django_redisq.worker.worker import Worker
from tests.testapp import workflow_tasks as wt

pytestmark = pytest.mark.cluster


@pytest.fixture(autouse=True)
def effects_on_the_single_server(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tasks' records go to the single Redis (``r``): a cluster node would redirect them."""
    monkeypatch.setenv("REDISQ_WF_EFFECTS_URL", redis_url)
    monkeypatch.setattr(wt, "_clients", {})


def test_a_chain_across_two_masters(cluster):
    default, emails = (cluster.get_node_from_key(QueueKeys(q).pending).name for q in ("default", "emails"))
    assert default != emails
    wf = chain(wt.add.s(1, 2), wt.double.s(), wt.add.s(4), wt.double.s()).enqueue()
    assert [x.task.queue_name for x in wf.refresh().results] == ["default", "emails", "default", "emails"]
    cb = chord([wt.add.s(i, 0) for i in range(4)], wt.total.using(queue_name="low").s()).enqueue()
    for _ in range(40):
        Worker(["default", "emails", "low"], burst=True, concurrency=2).run()
        if wf.refresh().status == cb.refresh().status == TaskResultStatus.SUCCESSFUL:
            break
    assert wf.status == TaskResultStatus.SUCCESSFUL and wf.return_value == ((1 + 2) * 2 + 4) * 2
    assert cb.status == TaskResultStatus.SUCCESSFUL and cb.return_value == 6
    assert [n for _, n, _ in wt.runs()].count("total") == 1
    assert cluster.exists(WorkflowKeys(wf.id).meta) and cluster.ttl(WorkflowKeys(wf.id).meta) > 0
