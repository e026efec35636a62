"""The only door to Redis: keys, the Lua scripts, one method per atomic step, bounded reads.

* ``keys.py``: every key name of the schema (cluster-ready hash tags);
* ``scripts/``: one ``.lua`` per atomic step, each with its KEYS/ARGV header;
* ``broker.py`` (``Broker``): the steps of a task's life, enqueue to ack, with
  ``operator_steps.py`` and ``schedule_steps.py`` for what operators and the
  scheduler change, ``durable.py`` for ``DURABLE_REPLICAS`` and
  ``async_broker.py`` for the same steps on a running event loop;
* ``replies.py``: what the steps take and hand back (a delivery, an enqueue's answer);
* the bounded reads: ``queue_reads.py`` (a queue's figures), ``task_reads.py``
  and ``dead_scan.py`` (the tasks in it), ``partition_stats.py`` (a partitioned
  queue's summed), ``records.py`` (what a stored hash means), ``priority.py``,
  ``durations.py``;
* ``server.py``: the server itself (there, new enough, able to keep tasks).

Above this package nothing builds a pipeline, loads a script or makes a client;
below it is ``django_redisq.connection``.
"""
