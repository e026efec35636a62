"""The store's bounded reads: nothing here changes Redis.

* ``queues.py`` (``QueueReads``): a queue's figures, its workers and limits, schedule markers;
* ``tasks.py`` (``TaskReads``): the tasks in them, dead-letter pages and scans, one task's detail;
* ``dead_scan.py``: a partitioned queue's dead letters as one list (a k-way merge);
* ``partitions.py``: a partitioned queue's figures summed;
* ``records.py``: what the reads return (rows, pages, figures) and what a stored hash means;
* ``priority.py``: the ready tasks in the order they run; ``durations.py``: run times per task and minute.
"""
