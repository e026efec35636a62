"""A running task's progress reports (``broker.progress``): one write per stored report, one script.

The reads need nothing of their own: the report is two fields of the task hash
(``progress``, ``progress_at``), so ``Broker.get_task`` and the async broker's
read it with the rest of the task (progress.py decodes it).
"""

from __future__ import annotations

from django_redisq.store.scripts.runner import ScriptRunner


class ProgressSteps:
    """Stores the reports of the tasks a worker runs."""

    def __init__(self, runner: ScriptRunner) -> None:
        self.runner = runner

    def save(self, queue: str, task_id: str, worker: str, report_json: str) -> bool:
        """Store a report of task ``task_id`` that ``worker`` runs; False when nothing was written (gone, or not held)."""
        k = self.runner.keys(queue)
        return bool(self.runner.run("progress", keys=[k.task(task_id), k.status(task_id)], args=[report_json, f"running:{worker}"]))
