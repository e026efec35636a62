"""Whether a call's arguments fit a function, at the cost of a length check where that says it all.

Both ends check it: an enqueue refuses a call that can never run, and the worker
dead-letters a message whose arguments do not fit (another producer, a deploy
that changed the function). ``inspect.Signature.bind`` costs a few microseconds
per call; most tasks take plain positional parameters and are called with
positional arguments, where counting them is the whole answer.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

PLAIN = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True, slots=True)
class Fit:
    """A function's signature and how many positional arguments alone bind to it."""

    signature: inspect.Signature
    least: int
    most: int  # with least, (1, 0) when no count can say (*args, **kwargs, keyword-only parameters): bind() decides

    @classmethod
    def of(cls, func: Callable[..., Any]) -> Fit:
        sig = inspect.signature(func)
        params = list(sig.parameters.values())
        if not all(p.kind in PLAIN for p in params):
            return cls(sig, 1, 0)
        return cls(sig, sum(p.default is p.empty for p in params), len(params))

    def check(self, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """``TypeError`` (``Signature.bind``'s) if ``args`` and ``kwargs`` cannot be bound to the function."""
        if not kwargs and self.least <= len(args) <= self.most:
            return
        self.signature.bind(*args, **kwargs)
