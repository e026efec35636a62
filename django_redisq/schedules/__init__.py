"""Periodic tasks: ``@periodic`` and ``SCHEDULES`` declare them (registry), and a tick says what one firing enqueues (ticks).

``from django_redisq.schedules import periodic`` is the documented path.
"""

from django_redisq.schedules.registry import Schedule, periodic
from django_redisq.schedules.words import cron_in_words, every_in_words

__all__ = ["Schedule", "cron_in_words", "every_in_words", "periodic"]
