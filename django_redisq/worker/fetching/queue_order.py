"""Queue order: which of a worker's queues gives the next task.

Two orders, chosen by how the queues are named:

- **strict** (``runworker a b c``): the first queue that has work, always;
  a later queue runs only while the earlier ones are empty.
- **weighted** (``runworker emails:6 default:3 low:1``): among the queues
  that have work, a queue is picked with probability proportional to its
  weight, so under a backlog on all three they run 60 %, 30 % and 10 % of
  the tasks, and no queue with work is ever starved.

The weighted pick is a race of exponential clocks (``expovariate(weight)``,
smallest wins). Ranking *all* queues that way and taking the first one that
has work picks each queue with probability weight / (sum of the weights of
the queues with work), whichever subset that is (Luce's choice axiom), which
is what lets an executor try queues in ``ranked()`` order and fetch from the
first that gives something. The strict order costs nothing: ``ranked()``
returns the same tuple every time.

A partitioned queue (core/partitions.py) is served as its physical queues, which
share its place and weight: in strict order they take turns (the partition
tried first rotates with each ``ranked()``), in weighted order each has the
queue's weight divided by their count, so the queue as a whole keeps its share.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence

from django_redisq.core.partitions import physical


class QueueOrder:
    """The order in which a worker's queues are served: strict, or weighted random.

    ``queues`` are logical; ``partitions`` gives those that are partitioned their count,
    and ``self.queues`` are then the physical queues served (core/partitions.py).
    """

    __slots__ = ("_dividing", "_logical", "_rng", "_turn", "groups", "queues", "weighted", "weights")

    def __init__(self, queues: Sequence[str], weights: Mapping[str, int] | None = None,
                 partitions: Mapping[str, int] | None = None) -> None:
        groups = [tuple(physical(q, (partitions or {}).get(q, 1))) for q in queues]
        self._logical = tuple(queues)
        self.queues = tuple(p for g in groups for p in g)
        self.groups = tuple(groups) if any(len(g) > 1 for g in groups) else None
        self.weights = ({p: int(weights[q]) / len(g) for q, g in zip(queues, groups, strict=True) for p in g}
                        if weights else None)
        self._dividing = {q: int(weights[q]) for q in queues} if weights else {}
        self.weighted = self.weights is not None
        self._rng = random.Random()
        self._turn = itertools.count()

    def ranked(self) -> Sequence[str]:
        """The queues in the order to try them for the next task."""
        if self.weights is None:
            if self.groups is None:
                return self.queues
            turn = next(self._turn)
            return tuple(p for g in self.groups for p in (g[turn % len(g):] + g[: turn % len(g)]))
        draw, w = self._rng.expovariate, self.weights
        return sorted(self.queues, key=lambda q: draw(w[q]))

    def pick(self, candidates: Sequence[str]) -> str:
        """One of ``candidates`` (queues that have work): the first in strict order, else by weight."""
        if len(candidates) == 1:
            return candidates[0]
        if self.weights is None:
            if self.groups is not None:
                ranked = self.ranked()
                return min(candidates, key=ranked.index)
            return min(candidates, key=self.queues.index)
        w = self.weights
        return self._rng.choices(candidates, [w[q] for q in candidates])[0]

    def describe(self) -> str:
        if self.weights is None:
            return ", ".join(self._logical)
        return ", ".join(f"{q}:{self._dividing[q]}" for q in self._logical)
