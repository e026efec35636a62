"""Fetching and holding: what the worker takes from its queues, and what it holds until it is settled.

``fetcher.py`` keeps each queue's budget fetched (BLMOVE once a queue is dry),
``queue_order.py`` says which queue gives the next task, ``held.py`` holds what
was fetched within a per-queue budget, ``handback.py`` gives back what waited
unstarted too long, ``pausing.py`` blocks a paused queue, and ``marks.py`` tells
Redis which held tasks run now.
"""
