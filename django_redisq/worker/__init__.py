"""``runworker``'s process: components grouped by what they are, composed by ``worker.py``.

``Worker`` builds each component with what it needs (``parts.py``: every
collaborator passed by keyword) and none of them knows the worker:

- ``fetching/``: the fetcher feeds the held tasks, in the queue order, to the executor lanes;
- ``pools/``: where the tasks run (threads, processes, an event loop);
- ``running/``: the runner turns a delivery into an ``Outcome``;
- ``settling/``: the settler writes outcomes back in batches, through its settle hooks;
- ``background/``: the heartbeat, upkeep, the scheduler and the event pump;
- ``observability/``: signals, metrics, the health file and the task log.

Every Redis step goes through ``django_redisq.store``.
"""
