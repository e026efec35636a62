"""What operators read and do about events: each subscription's lag, pending and drops; rewinding one.

Used by ``manage.py redisq topics`` (management/cli/topics.py), the admin's
Topics page (admin/topics.py), the metrics (``redisq_subscription_lag``) and
``redisq health`` (``HEALTH_MAX_LAG`` per topic). Reads are bounded: one
XINFO GROUPS, one XPENDING summary per group with pending entries, and, only
where Redis does not report a group's lag itself, a count capped at
``store.topics.LAG_SCAN_MAX``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from django.utils.dateparse import parse_datetime

from django_redisq.core.options import Options
from django_redisq.core.redact import redact
from django_redisq.events.subscriptions import Subscription, subscriptions_of, topics_of
from django_redisq.exceptions import RedisError, RedisQError
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.topics import NoSuchGroup, Topics, before, id_ms

logger = logging.getLogger("django_redisq")
ID_RE = re.compile(r"^\d{1,20}-\d{1,20}$")


class UnknownSubscription(RedisQError, LookupError):
    """A subscription the settings do not name, or one whose group does not exist yet."""


class BadRewindTarget(RedisQError, ValueError):
    """``--to`` is neither an entry id (``<ms>-<seq>``), an ISO 8601 time, nor ``earliest``."""


@dataclass(frozen=True)
class SubscriptionRow:
    """One subscription as operators see it (ages in seconds on the Redis clock)."""

    name: str
    topic: str
    task: str
    queue: str
    start: str
    exists: bool  # its consumer group exists (created by the first publish or worker)
    lag: int  # entries not delivered to the group yet
    lag_exact: bool  # False: at least ``lag`` (counted up to a cap)
    pending: int  # delivered, not yet turned into tasks (acknowledged)
    oldest_pending_age: float | None
    last_delivered: str
    generation: int  # bumped by each rewind; part of the task ids
    dropped: int  # entries the hard cap trimmed before the subscription turned them into tasks
    health_max_lag: int
    regrouped: int = 0  # times its consumer group was found deleted and recreated where it stood (nothing skipped)

    @property
    def breaches(self) -> list[str]:
        found = []
        if self.lag > self.health_max_lag:
            found.append(f"subscription {self.name} (topic {self.topic}) lags {self.lag}{'' if self.lag_exact else '+'} "
                         f"entries > {self.health_max_lag} (HEALTH_MAX_LAG)")
        if self.dropped:
            found.append(f"subscription {self.name} (topic {self.topic}) lost {self.dropped} event(s) to HARD_MAX_LEN")
        return found

    @property
    def notes(self) -> list[str]:
        """What operators should know that is not a breach: a group deleted and recreated (no event was skipped)."""
        if not self.regrouped:
            return []
        return [f"note: the consumer group of subscription {self.name} (topic {self.topic}) was found deleted and recreated "
                f"{self.regrouped} time(s); the events it had not acknowledged were delivered again, none skipped"]


class TopicOps:
    """The events of one backend alias, for the admin, the command, metrics and health."""

    def __init__(self, options: Options, broker: Broker | None = None) -> None:
        self.options = options
        self.topics = Topics(broker or Broker(options))

    @classmethod
    def for_alias(cls, alias: str = "default") -> TopicOps:
        return cls(get_options(alias))

    @property
    def subscriptions(self) -> list[Subscription]:
        return subscriptions_of(self.options)

    def rows(self) -> list[SubscriptionRow]:
        """Every configured subscription, by topic then name."""
        subs = sorted(self.subscriptions, key=lambda s: (s.topic, s.name))
        retention = topics_of(self.options)
        by_topic: dict[str, list[Subscription]] = {}
        for s in subs:
            by_topic.setdefault(s.topic, []).append(s)
        now = self.topics.broker.server_time_ms() if subs else 0
        rows = []
        for topic, group in by_topic.items():
            stats = self.topics.stats(topic, [s.name for s in group])
            for s in group:
                g = stats[s.name]
                age = (now - id_ms(g.oldest_pending_id)) / 1000 if g.oldest_pending_id else None
                rows.append(SubscriptionRow(s.name, s.topic, s.task, s.queue, s.start, g.exists, g.lag, g.lag_exact, g.pending,
                                            max(0.0, age) if age is not None else None, g.last_delivered, g.generation,
                                            g.dropped, retention[topic].health_max_lag, g.regrouped))
        return rows

    def find(self, name: str) -> Subscription:
        for s in self.subscriptions:
            if s.name == name:
                return s
        known = ", ".join(sorted(s.name for s in self.subscriptions)) or "none"
        raise UnknownSubscription(f"no subscription {name!r} in TASKS[{self.options.alias!r}]['OPTIONS']['SUBSCRIPTIONS'] "
                                  f"(configured: {known})")

    def target(self, sub: Subscription, to: str) -> str:
        """The id the group is set to for ``--to``: just before the entry id, or before the first entry at the time."""
        to = to.strip()
        if to == "earliest":
            return "0-0"
        if ID_RE.match(to):
            return before(to)
        when = None
        try:
            when = parse_datetime(to)
        except ValueError:
            pass
        if when is None:
            raise BadRewindTarget(f"--to {to!r}: give an entry id (<ms>-<seq>), an ISO 8601 time "
                                  "(2026-03-01T12:00:00+00:00; UTC if no offset) or 'earliest'")
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        return before(f"{int(when.timestamp() * 1000)}-0")

    def rewind(self, name: str, to: str) -> tuple[int, str]:
        """Set subscription ``name`` back (or forward) to ``to``; (its new generation, the id it was set to)."""
        sub = self.find(name)
        target = self.target(sub, to)
        try:
            return self.topics.rewind(sub.topic, sub.name, target), target
        except NoSuchGroup:
            raise UnknownSubscription(f"subscription {name!r} has no consumer group yet: nothing was published to "
                                      f"{sub.topic!r} and no worker serving {sub.queue!r} started") from None


def at(entry_id: str) -> datetime | None:
    """When an entry id was made (None for '' or 0-0)."""
    ms = id_ms(entry_id) if entry_id else 0
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc) if ms else None


def subscription_families(aliases: list[str]) -> Iterator[Any]:
    """``redisq_subscription_lag`` / ``_pending`` / ``_dropped_total`` / ``_regrouped_total`` of every subscription."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # optional: only a metrics scrape calls this

    labels = ["backend", "subscription", "topic"]
    lag = GaugeMetricFamily("redisq_subscription_lag", "Events of the topic not yet delivered to the subscription "
                            "(not yet turned into tasks).", labels=labels)
    pending = GaugeMetricFamily("redisq_subscription_pending", "Events delivered to the subscription and not yet "
                                "acknowledged (being turned into tasks, or left by a dead worker).", labels=labels)
    dropped = CounterMetricFamily("redisq_subscription_dropped", "Events the topic's HARD_MAX_LEN trimmed before the "
                                  "subscription turned them into tasks.", labels=labels)
    regrouped = CounterMetricFamily("redisq_subscription_regrouped", "Times the subscription's consumer group was found "
                                    "deleted and recreated where it stood (its unacknowledged events delivered again).",
                                    labels=labels)
    for alias in aliases:
        try:
            rows = TopicOps.for_alias(alias).rows()
        except RedisError as exc:
            logger.warning("metrics: subscriptions of backend %s not read (%s: %s)", alias, type(exc).__name__, redact(str(exc)))
            continue
        for r in rows:
            key = [alias, r.name, r.topic]
            lag.add_metric(key, float(r.lag))
            pending.add_metric(key, float(r.pending))
            dropped.add_metric(key, float(r.dropped))
            regrouped.add_metric(key, float(r.regrouped))
    yield from (lag, pending, dropped, regrouped)
