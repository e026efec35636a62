"""``runworker``'s process: one module per component, composed by ``worker.py``.

``Worker`` builds each component with what it needs (the broker, the options,
the callables it reports to) and none of them knows the worker: the fetcher
(``fetcher.py``, ``queue_order.py``, ``pausing.py``) feeds ``held.py``'s
tasks to a pool (``pools/``), the runner (``runner.py``, ``timelimit.py``)
runs each one into an ``Outcome`` (``outcome.py``), the settler (``settler.py``)
writes outcomes back in batches; ``heartbeat.py``, ``upkeep.py`` and
``scheduler.py`` keep the lease, the reaper and the periodic ticks; the
observer (``observer.py``, ``metrics.py`` and its endpoint ``metrics_server.py``,
``health_file.py``) tells the world,
and ``tasklog.py`` writes the log lines of settled tasks. ``attempt.py`` is one
attempt of a task as the runner prepares it. Every Redis step goes through ``django_redisq.store``.
"""
