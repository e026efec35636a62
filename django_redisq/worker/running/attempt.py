"""One attempt of a task: what running it needs (worked out once per task and queue) and what it leaves behind.

``Prepared`` is what every run of one task on one queue shares; ``Attempt`` is
one delivery about to be called, and turns what the call left into what the
settler stores: the metadata the task changed, the return value as JSON, each
checked against its size limit so a bad value fails the attempt, never the worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django_redisq.compat import Task, TaskContext, TaskResult, normalize_json
from django_redisq.core.fit import Fit
from django_redisq.core.message import Message, dumps
from django_redisq.core.metadata import encode, to_save
from django_redisq.core.options import Options
from django_redisq.exceptions import InvalidArguments
from django_redisq.store.steps.replies import Delivery


@dataclass(frozen=True, slots=True)
class Prepared:
    """What each run of one task on one queue needs, worked out once."""

    task: Task
    fit: Fit  # whether a message's arguments fit the function (core/fit.py)
    sender: type
    max_retries: int | None
    timeout: float | None
    is_async: bool
    result_class: type[TaskResult]  # the backend's (RedisQueueBackend.result_class): with raw_metadata where Django has it
    context_class: type[TaskContext]


@dataclass(slots=True)
class Attempt:
    """One delivery about to be called: its task, policy and the result object signals see."""

    d: Delivery
    message: Message
    prep: Prepared
    result: TaskResult
    args: list[Any]
    limit: float  # seconds, 0 = none
    max_retries: int
    opts: Options
    final: bool = False  # the task ran but its result cannot be stored: retrying cannot help
    context: TaskContext | None = None  # given to a task that takes one
    metadata: str | None = None  # what the end of the attempt saves (core/metadata.py); None: unchanged
    worker_id: str = ""  # the worker running it (progress reports prove it still holds the task)

    def keep_metadata(self) -> None:
        """What the task changed in ``context.metadata`` and did not save, ready for the settler to save.

        Runs when the call ends, however it ended. Metadata that cannot be stored
        raises here, and the attempt fails with that exception (``TypeError`` for
        an unsupported type), as in Django's ImmediateBackend; it is not retried,
        as the task would only leave the same metadata again.
        """
        if self.context is None:
            return
        try:
            raw = to_save(self.context)
            if raw is None:
                return
            value, self.metadata = encode(raw, self.opts.metadata_max_bytes)
        except BaseException:
            self.final = True
            raise
        object.__setattr__(self.result, "raw_metadata", value)  # what get_result will say once it is saved

    def result_json(self, value: Any) -> str:
        """The return value as JSON, or the exception Django's backends record for it.

        A value ``normalize_json`` refuses fails the attempt with that same exception
        class (``TypeError`` for an unsupported type, as ``ImmediateBackend`` records;
        ``ValueError`` for a string Redis cannot store as UTF-8, a lone surrogate),
        so code matching Django's ``exception_class`` sees no difference; it is never
        retried, since the task would only return the same value again.
        """
        self.final = True
        try:
            result_json = dumps(normalize_json(value))
        except (TypeError, ValueError, RecursionError) as exc:
            raise type(exc)(f"the return value of {self.message.task} is not JSON: {exc}") from None
        if not result_json.isascii():  # Redis stores UTF-8: a lone surrogate ("\ud800", which any outside JSON can hold) is not
            try:
                result_json.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(f"the return value of {self.message.task} cannot be stored: it holds a lone surrogate "
                                 f"({exc.object[exc.start:exc.end]!r} at {exc.start}), which is not UTF-8") from None
        cap = self.opts.result_max_bytes
        if len(result_json) > cap // 4 and (size := len(result_json.encode("utf-8"))) > cap:
            raise InvalidArguments(
                f"the return value of {self.message.task} is {size} bytes as JSON; the limit is {cap} (RESULT_MAX_BYTES). "
                "Store large results elsewhere and return their id."
            )
        return result_json
