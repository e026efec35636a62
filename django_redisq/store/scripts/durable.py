"""Durable mode (``DURABLE_REPLICAS``): a write counts as done once that many replicas have it.

Redis replicates asynchronously: a write the master acknowledged can vanish
when a replica that had not received it is promoted. With ``DURABLE_REPLICAS:
N`` the steps that must survive a failover (enqueue, ack, retry, bury) send
``WAIT N <DURABLE_TIMEOUT in ms>`` right after their script, pipelined on the
SAME connection: WAIT counts the replicas that have the writes of its own
connection, so on another connection it would answer at once and prove
nothing. Hence the held connection here (``Pinned``): a pool's connection,
health-checked at checkout (a durable step is never re-sent blindly after a
lost connection: a re-sent enqueue of a stored id writes nothing, and its WAIT
would prove nothing), on the master a sentinel names or on the node of the
queue's slot in a cluster.

Fewer replicas than asked within the timeout: ``NotDurable``. The write IS on
the master; an enqueue raises it to the caller; a settle step carries
``again`` (the WAIT once more, on the same connection), which the worker's
settle retries (worker/settler.py) until the replicas catch up. Off (0, the default):
no WAIT, no held connection, no cost.

The checks of these options (ids E068-E070) are here too.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import AskError, MovedError, NoScriptError, ResponseError

from django_redisq.core.redact import redact, shown
from django_redisq.exceptions import NotDurable

if TYPE_CHECKING:
    from django_redisq.core.options import Options

logger = logging.getLogger("django_redisq")

DEFAULT_TIMEOUT = 0.5
"""Seconds a durable step waits for its replicas by default: a healthy replica on a LAN answers in about a millisecond."""
MAX_TIMEOUT = 10.0
"""The longest DURABLE_TIMEOUT: below the pools' socket timeout (connection.BLOCK_TIMEOUT + 10), so WAIT's reply is never a socket timeout."""
STEPS = frozenset({"enqueue", "ack", "retry", "bury"})
"""The scripts whose writes wait for replicas (reap, release, promote and the operator's steps do not)."""


def validate(w: str, opts: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The problems of DURABLE_REPLICAS / DURABLE_TIMEOUT as ``(check id, message, hint)``."""
    problems: list[tuple[str, str, str]] = []
    replicas = opts.get("DURABLE_REPLICAS", 0)
    timeout = opts.get("DURABLE_TIMEOUT", DEFAULT_TIMEOUT)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 0 <= replicas <= 100:
        problems.append(("E068", f"{w}['DURABLE_REPLICAS'] must be a whole number of replicas from 0 (off) to 100, got {shown(replicas)}.",
                         'For a master with one replica: "DURABLE_REPLICAS": 1.'))
        replicas = 0
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or not 0 < timeout <= MAX_TIMEOUT:
        problems.append(("E069", f"{w}['DURABLE_TIMEOUT'] must be seconds, more than 0 and at most {MAX_TIMEOUT:g}, got {shown(timeout)}.",
                         f"How long an enqueue or ack waits for its replicas; the default is {DEFAULT_TIMEOUT:g}. "
                         "(WAIT with 0 would block for ever.)"))
    elif timeout * 1000 < 1:
        problems.append(("E069", f"{w}['DURABLE_TIMEOUT'] is {timeout!r} s, under the millisecond WAIT counts in.",
                         f"The default is {DEFAULT_TIMEOUT:g} s."))
    if replicas and opts.get("EMBEDDED"):
        problems.append(("E070", f"{w} sets DURABLE_REPLICAS with EMBEDDED; the embedded server has no replicas, so every enqueue would fail.",
                         "Remove DURABLE_REPLICAS, or point REDIS_URL / SENTINELS / CLUSTER at a Redis with replicas."))
    return problems


def timeout_ms(options: Options) -> int:
    return max(1, int(options.durable_timeout * 1000))


def refused(options: Options, acked: int, what: str, task_ids: Sequence[str] = ()) -> NotDurable:
    """The error of a write only ``acked`` of ``DURABLE_REPLICAS`` replicas took within ``DURABLE_TIMEOUT``."""
    wanted = options.durable_replicas
    msg = (f"{what} stored on the Redis master, but only {acked} of {wanted} replica(s) acknowledged it within "
           f"{options.durable_timeout:g} s (DURABLE_REPLICAS={wanted}, DURABLE_TIMEOUT={options.durable_timeout:g}): "
           "it may or may not survive a failover")
    return NotDurable(msg, acked=acked, wanted=wanted, timeout=options.durable_timeout, task_ids=task_ids)


def what(name: str, keys: Sequence[Any], args: Sequence[Any]) -> str:
    """What a durable step wrote, for its NotDurable message: "enqueue of task <id>", "ack of 3 task(s) on <queue>"..."""
    if name == "enqueue":
        n = int(args[1])
        ids = [str(args[2 + i * 7]) for i in range(min(n, 3))] if len(args) >= 2 + n * 7 else []
        return f"enqueue of task {ids[0]}" if n == 1 and ids else f"enqueue of {n} tasks ({', '.join(ids)}{', ...' if n > 3 else ''})"
    if name == "ack":
        return f"ack of {(len(args) - 7 - int(args[6]) * 3) // 2} task(s) of worker list {keys[0]}"
    return f"{name} of task {args[1]}"


def settled(step: Callable[[], Any], finish: Callable[[Any], Any]) -> Any:
    """``finish(step())``; a ``NotDurable`` from the step gets an ``again`` that finishes the same way (store/scripts/durable.py)."""
    try:
        reply = step()
    except NotDurable as exc:
        if exc.again is not None:
            rewait = exc.again
            exc.again = lambda: settled(rewait, finish)
        raise
    return finish(reply)


class Pinned:
    """One connection of a pool, held for a write and the WAITs after it; released once, at the end."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.conn: Any = pool.get_connection()  # health-checked: a connection the server closed is replaced here

    def send(self, *commands: Sequence[Any]) -> list[Any]:
        """The replies of ``commands``, written back to back and read in order; an error reply is its exception, returned."""
        conn = self.conn
        try:
            conn.send_packed_command(conn.pack_commands(commands), check_health=False)
            out: list[Any] = []
            for _ in commands:
                try:
                    out.append(conn.read_response())
                except ResponseError as exc:  # read in full: the connection is in step
                    out.append(exc)
            return out
        except BaseException:
            conn.disconnect()
            self.release()
            raise

    def release(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            self.pool.release(conn)


def _moved(reply: Any) -> bool:
    """A MOVED or ASK reply (redis-py's MovedError drops the "MOVED " of the reply's text; a bare ResponseError keeps it)."""
    return isinstance(reply, (MovedError, AskError)) or (isinstance(reply, ResponseError) and str(reply).startswith(("MOVED ", "ASK ")))


def _pool(client: Any, key: Any) -> Any:
    """Where a script on ``key`` runs: the node of its slot in a cluster, else the client's pool (a sentinel's: the master)."""
    if isinstance(client, RedisCluster):
        return client.get_redis_connection(client.get_node_from_key(key)).connection_pool
    return client.connection_pool


def call(client: Any, options: Options, sha: str, source: str, keys: Sequence[Any], args: Sequence[Any],
         what: Callable[[], str], settle: bool) -> Any:
    """EVALSHA then WAIT on one held connection; the script's reply once enough replicas have it, else ``NotDurable``.

    ``settle``: the error carries ``again`` (WAIT once more on the same connection,
    then the same reply) for the worker's retries; an enqueue's carries none.
    """
    wait = ("WAIT", options.durable_replicas, timeout_ms(options))
    evalsha = ("EVALSHA", sha, len(keys), *keys, *args)
    pinned = Pinned(_pool(client, keys[0]))
    reply, acked = pinned.send(evalsha, wait)
    for _ in range(4):  # a redirect and a load each, in either order, twice: a failover may move the slot on again
        if isinstance(reply, NoScriptError):  # a restart, SCRIPT FLUSH, a promoted replica: load it on this connection, run it again
            pinned.send(("SCRIPT", "LOAD", source))
        elif _moved(reply) and isinstance(client, RedisCluster):  # the slot moved (a failover, resharding)
            pinned.release()  # learn the layout and go to its new node, which has its own script cache
            client.nodes_manager.initialize()
            pinned = Pinned(_pool(client, keys[0]))
        else:
            break
        reply, acked = pinned.send(evalsha, wait)
    if isinstance(acked, Exception) or isinstance(reply, Exception):
        pinned.release()
        raise reply if isinstance(reply, Exception) else acked
    if int(acked) >= options.durable_replicas:
        pinned.release()
        return reply
    if not settle:
        pinned.release()
        raise refused(options, int(acked), what())
    return _wait_again(pinned, options, reply, int(acked), what)


def _wait_again(pinned: Pinned, options: Options, reply: Any, acked: int, what: Callable[[], str]) -> Any:
    """``NotDurable`` whose ``again`` repeats the WAIT on the held connection (the step itself is not sent again)."""

    def again() -> Any:
        try:
            (acked,) = pinned.send(("WAIT", options.durable_replicas, timeout_ms(options)))
        except (redis.ConnectionError, redis.TimeoutError) as exc:  # the master may be gone: what it had is Redis's to keep
            logger.warning("%s: replication not confirmed (%s: %s); after a failover it may have to be done again", what(),
                           type(exc).__name__, redact(str(exc)))
            return reply
        if isinstance(acked, Exception):
            pinned.release()
            raise acked
        if int(acked) >= options.durable_replicas:
            pinned.release()
            return reply
        return _wait_again(pinned, options, reply, int(acked), what)

    exc = refused(options, acked, what())
    exc.again = again
    raise exc
