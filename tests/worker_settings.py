"""Settings for runworker subprocesses started by the tests."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import TASKS

TASKS["default"]["OPTIONS"]["REDIS_URL"] = os.environ["REDISQ_TEST_REDIS_URL"]
if os.environ.get("REDISQ_OLD_ROOT"):  # the old-layout worker of tests/worker/test_rolling_deploy.py predates IMPORTS
    TASKS["default"]["OPTIONS"].pop("IMPORTS", None)
TASKS["default"]["OPTIONS"].update(
    {k[len("REDISQ_OPT_"):]: float(v) for k, v in os.environ.items() if k.startswith("REDISQ_OPT_")}
)
if os.environ.get("REDISQ_TEST_CLUSTER"):  # REDISQ_TEST_REDIS_URL names a node of a Redis Cluster (tests/topologies/test_cluster.py)
    TASKS["default"]["OPTIONS"]["CLUSTER"] = True
if os.environ.get("REDISQ_TEST_SENTINELS"):  # a sentinel topology pass (tests/conftest.py REDISQ_TEST_TOPOLOGY)
    import json

    TASKS["default"]["OPTIONS"]["SENTINELS"] = [tuple(s) for s in json.loads(os.environ["REDISQ_TEST_SENTINELS"])]
    TASKS["default"]["OPTIONS"]["SENTINEL_MASTER"] = os.environ["REDISQ_TEST_SENTINEL_MASTER"]
if os.environ.get("REDISQ_QUEUE_OPTIONS"):  # e.g. partitioned queues (tests/topologies/test_cluster.py)
    import json

    TASKS["default"]["OPTIONS"]["QUEUE_OPTIONS"] = json.loads(os.environ["REDISQ_QUEUE_OPTIONS"])
if os.environ.get("REDISQ_SCHEDULES"):
    import json

    TASKS["default"]["OPTIONS"]["SCHEDULES"] = json.loads(os.environ["REDISQ_SCHEDULES"])
if os.environ.get("REDISQ_TEST_DURABLE_REPLICAS"):  # an int, which REDISQ_OPT_ (floats) cannot give (tests/topologies/test_cluster_failover.py)
    TASKS["default"]["OPTIONS"]["DURABLE_REPLICAS"] = int(os.environ["REDISQ_TEST_DURABLE_REPLICAS"])
if os.environ.get("REDISQ_SUBSCRIPTIONS"):  # events (tests/events)
    import json

    TASKS["default"]["OPTIONS"]["SUBSCRIPTIONS"] = json.loads(os.environ["REDISQ_SUBSCRIPTIONS"])
    TASKS["default"]["OPTIONS"]["TOPICS"] = json.loads(os.environ.get("REDISQ_TOPICS", "{}"))
if os.environ.get("REDISQ_LIFECYCLE_EVENTS"):  # task transitions as events (bench/events.py)
    TASKS["default"]["OPTIONS"]["LIFECYCLE_EVENTS"] = True
