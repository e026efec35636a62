"""The step families the broker holds, each built with its ``ScriptRunner``, and the replies the steps hand back.

* ``replies.py``: a task to store (``NewTask``), a delivery, an enqueue's answer, a reaping;
* ``operator.py`` (``broker.operator``): replay, edit, purge, cancel, moves, pausing a queue;
* ``schedules.py`` (``broker.schedules``): periodic schedules' markers, fire, pause, resume, run now;
* ``presence.py`` (``broker.presence``): a worker's links, the poll lease, reaping by connection;
* ``reaping.py``: reap.lua, shared by the broker (by the clock) and the presence poll (by connection);
* ``running.py`` (``broker.running``): which held tasks a worker runs now;
* ``progress.py`` (``broker.progress``): a running task's progress reports.
"""
