"""The only door to Redis: keys, the Lua scripts, one method per atomic step, bounded reads.

* ``keys.py``: every key name of the schema (cluster-ready hash tags);
* ``scripts/``: one ``.lua`` per atomic step, each with its KEYS/ARGV header; their loader,
  ``ScriptRunner`` (runner.py; async_runner.py on an event loop), which every step family is
  built with, and ``durable.py`` for ``DURABLE_REPLICAS``;
* ``broker/``: ``Broker``, the steps of a task's own life, enqueue to ack, holding the other
  step families; ``AsyncBroker``, the same steps on a running event loop;
* ``steps/``: the step families (operator, schedules, presence, running marks, progress)
  and the replies every step hands back (a new task, a delivery, an enqueue's answer);
* ``workflows/``: a workflow's steps and reads, in its own slot;
* ``topics/``: events' steps, a topic's stream and its subscriptions' groups;
* ``reads/``: the bounded reads (a queue's figures, the tasks in it, dead-letter scans);
* ``server.py``: the server itself (there, new enough, able to keep tasks).

Above this package nothing builds a pipeline, loads a script or makes a client;
below it is ``django_redisq.connection``.
"""
