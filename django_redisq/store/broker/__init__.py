"""The broker: a task's own life, enqueue to ack (``Broker``, broker.py), and its twin on an event loop
(``AsyncBroker``, async_broker.py, imported from there: only code that runs a loop loads redis.asyncio)."""

from django_redisq.store.broker.broker import Broker

__all__ = ["Broker"]
