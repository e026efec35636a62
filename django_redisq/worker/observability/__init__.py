"""What the worker tells the world: signals, per-worker metrics and their endpoint, the health file, the task log.

``observer.py`` turns the components' reports into signals, ``metrics.py``'s
metrics (served by ``metrics_server.py``) and ``health_file.py``'s file;
``tasklog.py`` writes the log lines of settled tasks.
"""
