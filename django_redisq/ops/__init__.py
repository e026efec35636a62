"""What operators read and do, for the admin, ``manage.py redisq`` and metrics.

``inspector.py`` (``Inspector``) reads a backend's queues, tasks, workers and
schedules; ``operations.py`` (``Operations``) changes them (replay, purge,
cancel, pause, edit); ``metrics.py`` renders the fleet's Prometheus figures.
Each is a thin layer over the store's bounded reads (store/reads/queues.py,
store/reads/tasks.py) and atomic steps (store/broker/broker.py).
"""
