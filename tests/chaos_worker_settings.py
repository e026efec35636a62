"""Settings for the chaos run with workflows and events (bench/chaos.py ``--flows``): tests/worker_settings.py, and
the flows' tasks (tests/testapp/chaos_flow_tasks.py) among the modules a worker imports."""

from tests.worker_settings import *  # noqa: F403
from tests.worker_settings import TASKS

TASKS["default"]["OPTIONS"]["IMPORTS"] = [*TASKS["default"]["OPTIONS"].get("IMPORTS", []), "tests.testapp.chaos_flow_tasks"]
