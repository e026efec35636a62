"""Events on Redis Streams: publishing (publish), the SUBSCRIPTIONS and TOPICS settings (subscriptions), and task
lifecycle events (lifecycle). The pump that delivers them to handlers is the worker's (worker/background/pump.py).

``from django_redisq.events import publish, apublish, publish_on_commit`` is the documented path.
"""

from django_redisq.events.publish import InvalidEvent, apublish, publish, publish_on_commit

__all__ = ["InvalidEvent", "apublish", "publish", "publish_on_commit"]
