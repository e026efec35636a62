"""The worker's background loops besides fetching: the lease, upkeep, periodic schedules and events.

``heartbeat.py`` keeps the worker registered and fences it after a reap,
``upkeep.py`` (the main thread) promotes due tasks, reaps dead workers and stops
cancelled tasks, ``scheduler.py`` claims the due ticks of periodic schedules,
``pump.py`` turns subscribed events into tasks.
"""
