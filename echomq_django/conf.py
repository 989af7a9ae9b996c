"""The ``ECHOMQ`` setting, read lazily and validated once.

Usage::

    from echomq_django.conf import get_config
    config = get_config()          # a frozen Config; cached until ECHOMQ changes
    config.lease_ms                # 30000

Settings are never read at import: :func:`get_config` reads ``settings.ECHOMQ``
on first call and caches the result; Django's ``setting_changed`` signal clears
the cache, so ``override_settings(ECHOMQ=...)`` works in tests.

Options (``settings.ECHOMQ`` keys, defaults in brackets):

``URL`` ["embedded" when neither URL nor CACHE is set]
    ``redis://[user:password@]host:port/db``, ``rediss://...`` (TLS),
    ``unix:///path.sock?db=N``, ``redis+cluster://host:port[,host:port...]``
    (``rediss+cluster://``), ``redis+sentinel://host:port[,...]/service[/db]``
    (``rediss+sentinel://``; the forms: :mod:`echomq_django.connection.urls`),
    or the literal ``"embedded"`` (a Valkey server this package starts for
    development; see :mod:`echomq_django.connection.embedded`).
``CACHE`` [None]
    Alias of a ``django_redis`` cache in ``settings.CACHES`` whose connection
    pool is shared. Exactly one of URL and CACHE may be set.
``CONNECTION_KWARGS`` [{}]
    Extra keyword arguments for the redis-py client (``redis.Redis.from_url``,
    ``RedisCluster`` or ``Sentinel.master_for``).
``QUEUES`` [("default",)]
    Queue names, each 1-100 characters of ``[A-Za-z0-9._-]``.
``LEASE_MS`` [30000, 1..2**53]; ``MAX_ATTEMPTS`` [3, >= 1];
``BACKOFF`` [("jitter", ("exponential", 1000, 300000))]
    A backoff policy tuple, validated by :func:`echomq_django.api.backoff.check_backoff`
    (every ms parameter at most 2**53, jitter nested at most 8 policies deep); lists
    are converted to tuples here.
``MAX_PAYLOAD_BYTES`` [524288, > 0]; ``RESULT_TTL_MS`` [86400000, > 0];
``DEAD_TTL_MS`` [604800000, > 0]; ``DEAD_MAX`` [10000, > 0];
``PROMOTE_BATCH`` [1000, 1..100000]; ``SHUTDOWN_GRACE_MS`` [30000, >= 0];
``MAX_STALLS`` [1, >= 0]: expired leases a job may survive before reap ends it
    dead with reason "stalled" (BullMQ's maxStalledCount)
``EMBEDDED_DIR`` [BASE_DIR/.echomq, or ./.echomq without BASE_DIR]
    Where the embedded server keeps its config, lock, log and AOF files.
``SCHEDULES`` [{}]
    Recurring jobs, name -> dict; only the outer dict is validated here.
``PRUNE_SCHEDULES`` [False]
``QUEUE_LIMITS`` [{}]
    queue -> ``{"concurrency": n, "lane_concurrency": n, "rate": (count,
    per_ms), "lane_rate": (count, per_ms)}`` (any subset), written to the
    server at runechomq's boot (``Queues.set_limits``).
``METRICS_TOKEN`` [None]: a str of at least 16 characters a scraper sends as
    ``Authorization: Bearer <token>`` to the metrics view (docs/observability.md).
``REPLICAS`` [None]: ``{"min": n, "timeout_ms": ms}`` (n 1..1000, ms
    1..60000) makes an enqueue return only once ``n`` replicas hold the job
    (``WAIT n ms`` in the enqueue's round trip), and raise NotReplicatedError
    otherwise: what keeps an acknowledged job through a failover
    (:mod:`echomq_django.protocol.replication`, docs/deployment.md); on a
    cluster, replicas of the primary owning the queue.

Errors: :func:`get_config` raises
:class:`~echomq_django.exceptions.ConfigurationError`; :func:`validate`
returns the same problems as ``(check_id, key, message)`` tuples, and
:mod:`echomq_django.checks` reports them as system check errors with these
stable ids:

- ``echomq.E001`` ECHOMQ is not a dict.
- ``echomq.E002`` ECHOMQ has an unknown key.
- ``echomq.E003`` URL and CACHE are both set.
- ``echomq.E004`` URL is not a string in one of the forms of
  :mod:`echomq_django.connection.urls` (redis, rediss, unix, redis+cluster,
  rediss+cluster, redis+sentinel, rediss+sentinel), nor the literal "embedded".
- ``echomq.E005`` CACHE names an alias that is not in settings.CACHES or whose
  BACKEND is not django_redis.
- ``echomq.E006`` An integer option is not an integer or breaks its range
  (bools are not integers).
- ``echomq.E007`` QUEUES is not a non-empty list of distinct valid queue names.
- ``echomq.E008`` CONNECTION_KWARGS is not a dict.
- ``echomq.E009`` SCHEDULES is not a dict.
- ``echomq.E010`` EMBEDDED_DIR is not a path, or PRUNE_SCHEDULES is not a bool.
- ``echomq.E011`` a recurring schedule is invalid (reported by
  :func:`echomq_django.checks.check_schedules`).
- ``echomq.E012`` BACKOFF is not a valid backoff policy (an unknown kind, a
  parameter that is not an int in its range, up to 2**53 ms, or jitter nested
  deeper than 8 policies).
- ``echomq.E013`` a schedule in SCHEDULES names a job no ``@job`` registered
  (reported by :func:`echomq_django.checks.check_schedules`).
- ``echomq.E014`` a recurring schedule's args/kwargs do not fit its job's
  signature, so every occurrence would fail (reported by
  :func:`echomq_django.checks.check_schedules`; a recurring ``@job`` whose
  function needs arguments raises TypeError at decoration).
- ``echomq.E015`` QUEUE_LIMITS is not a dict of queue name -> limits
  (``concurrency``, ``lane_concurrency``: ints >= 1; ``rate``, ``lane_rate``:
  ``(count, per_ms)``; see docs/protocol.md, "Limits").
- ``echomq.E016`` ENQUEUE_ON_COMMIT, OUTBOX or ARCHIVE breaks its rule
  (:mod:`echomq_django.durability`, docs/durability.md).
- ``echomq.E017`` METRICS_TOKEN is not None or a str of at least 16 characters.
- ``echomq.E018`` REPLICAS is not None or ``{"min": 1..1000, "timeout_ms":
  1..60000}``.

Signals emitted: none.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import threading
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver

from .exceptions import ConfigurationError
from . import durability
from .api.backoff import check_backoff
from .limits import check_limits
from .rules import MAX_MS, check_int, check_queue_name

__all__ = ["Config", "get_config", "validate"]

DEFAULT_BACKOFF = ("jitter", ("exponential", 1000, 300000))

# Integer options: key -> (default, minimum, maximum). Checked with
# rules.check_int, whose message names the key and the range.
_INT_RULES: dict[str, tuple[int, int, int]] = {
    "LEASE_MS": (30000, 1, MAX_MS),
    "MAX_ATTEMPTS": (3, 1, MAX_MS),
    "MAX_PAYLOAD_BYTES": (524288, 1, MAX_MS),
    "RESULT_TTL_MS": (86400000, 1, MAX_MS),
    "DEAD_TTL_MS": (604800000, 1, MAX_MS),
    "DEAD_MAX": (10000, 1, MAX_MS),
    "PROMOTE_BATCH": (1000, 1, 100000),
    "SHUTDOWN_GRACE_MS": (30000, 0, MAX_MS),
    "MAX_STALLS": (1, 0, 1_000_000),
}

KNOWN_KEYS = frozenset(
    {
        "URL",
        "CACHE",
        "CONNECTION_KWARGS",
        "QUEUES",
        "BACKOFF",
        "EMBEDDED_DIR",
        "SCHEDULES",
        "PRUNE_SCHEDULES",
        "QUEUE_LIMITS",
        "METRICS_TOKEN",
        "REPLICAS",
        *durability.KEYS,
        *_INT_RULES,
    }
)



@dataclasses.dataclass(frozen=True)
class Config:
    """The validated ``ECHOMQ`` setting; field names are the keys in lower case.

    Times are in milliseconds (``*_ms``), sizes in bytes. ``url`` is None when
    ``cache`` is set, and vice versa.
    """

    url: str | None = "embedded"
    cache: str | None = None
    connection_kwargs: dict = dataclasses.field(default_factory=dict)
    queues: tuple[str, ...] = ("default",)
    lease_ms: int = 30000
    max_attempts: int = 3
    backoff: Any = DEFAULT_BACKOFF
    max_payload_bytes: int = 524288
    result_ttl_ms: int = 86400000
    dead_ttl_ms: int = 604800000
    dead_max: int = 10000
    max_stalls: int = 1
    promote_batch: int = 1000
    shutdown_grace_ms: int = 30000
    embedded_dir: str = ""
    schedules: dict = dataclasses.field(default_factory=dict)
    prune_schedules: bool = False
    #: queue -> its limits, as limits.check_limits returns them.
    queue_limits: dict = dataclasses.field(default_factory=dict)
    #: The persistence floor (echomq_django.durability, docs/durability.md).
    enqueue_on_commit: bool = True
    outbox: Any = False
    archive: Any = None
    metrics_token: str | None = None
    #: How many replicas must hold an admission (protocol.replication.Replicas), or None.
    replicas: Any = None


def validate(raw: Any) -> list[tuple[str, str, str]]:
    """Check a raw ``ECHOMQ`` value without raising.

    ``raw`` is the setting as written (normally a dict). Returns a list of
    ``(check_id, key, message)`` problems, empty when valid; ``check_id`` is one
    of the stable ids in this module's docstring, ``key`` the offending setting
    key ("" for the setting as a whole). Reads ``settings.CACHES`` for CACHE.
    """
    if not isinstance(raw, dict):
        return [("echomq.E001", "", f"ECHOMQ must be a dict, got {type(raw).__name__}")]
    problems: list[tuple[str, str, str]] = []
    known = ", ".join(sorted(KNOWN_KEYS))
    for key in raw:
        if key not in KNOWN_KEYS:
            close = difflib.get_close_matches(str(key), KNOWN_KEYS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(("echomq.E002", str(key),
                             f"ECHOMQ has unknown key {key!r}{hint}; known keys: {known}"))
    url, cache = raw.get("URL"), raw.get("CACHE")
    if url is not None and cache is not None:
        problems.append(("echomq.E003", "URL", "URL and CACHE are both set; set exactly one"))
    from .connection.urls import check_cache, check_url

    for key, value, check, check_id in (("URL", url, check_url, "echomq.E004"),
                                        ("CACHE", cache, check_cache, "echomq.E005")):
        why = check(value) if value is not None else None
        if why:
            problems.append((check_id, key, why))
    for key, (_default, low, high) in _INT_RULES.items():
        if key in raw:
            try:
                check_int(key, raw[key], low, high)
            except (TypeError, ValueError) as err:
                problems.append(("echomq.E006", key, str(err)))
    problems.extend(_check_queues(raw))
    for key, types, rule, check_id in (
            ("CONNECTION_KWARGS", dict, "a dict", "echomq.E008"),
            ("SCHEDULES", dict, "a dict", "echomq.E009"),
            ("EMBEDDED_DIR", (str, os.PathLike), "a path (str or os.PathLike)", "echomq.E010"),
            ("PRUNE_SCHEDULES", bool, "a bool", "echomq.E010")):
        if key in raw and not isinstance(raw[key], types):
            problems.append((check_id, key,
                             f"{key} must be {rule}, got {type(raw[key]).__name__}"))
    if "BACKOFF" in raw:
        try:
            check_backoff(raw["BACKOFF"])
        except ValueError as err:
            problems.append(("echomq.E012", "BACKOFF", f"BACKOFF: {err}"))
    problems.extend(_check_queue_limits(raw.get("QUEUE_LIMITS", {})))
    problems.extend(durability.check(raw))
    token = raw.get("METRICS_TOKEN")
    if token is not None and not (isinstance(token, str) and len(token) >= 16):
        problems.append(("echomq.E017", "METRICS_TOKEN", "METRICS_TOKEN must be None or a str "
                         "of at least 16 characters, got "
                         + (f"{len(token)}" if isinstance(token, str) else type(token).__name__)))
    problems.extend(_check_replicas(raw))
    return problems


def _check_replicas(raw: dict) -> list[tuple[str, str, str]]:
    """E018 problems of REPLICAS (the rules: protocol.replication)."""
    try:
        _replicas(raw.get("REPLICAS"))
    except (TypeError, ValueError) as err:
        return [("echomq.E018", "REPLICAS", str(err))]
    return []


def _replicas(value: Any) -> Any:
    from .protocol.replication import check_replicas

    return check_replicas(value)


def _check_queues(raw: dict) -> list[tuple[str, str, str]]:
    """E007 problems of QUEUES: a non-empty list of distinct valid names."""
    if "QUEUES" not in raw:
        return []
    queues = raw["QUEUES"]
    if not isinstance(queues, (list, tuple)) or not queues:
        return [("echomq.E007", "QUEUES",
                 f"QUEUES must be a non-empty list of queue names, got {queues!r}")]
    problems = []
    for name in _unique(queues):
        try:
            check_queue_name(name)
        except (TypeError, ValueError) as exc:
            problems.append(("echomq.E007", "QUEUES", f"QUEUES: {exc}"))
    dupes = sorted({q for q in queues if isinstance(q, str) and queues.count(q) > 1})
    if dupes:
        problems.append(("echomq.E007", "QUEUES", f"QUEUES lists {dupes} more than once"))
    return problems


def _check_queue_limits(limits: Any) -> list[tuple[str, str, str]]:
    """E015 problems of QUEUE_LIMITS: queue name -> limits.check_limits' dict."""
    if not isinstance(limits, dict):
        return [("echomq.E015", "QUEUE_LIMITS",
                 f"QUEUE_LIMITS must be a dict of queue -> limits, got {type(limits).__name__}")]
    problems = []
    for queue, spec in limits.items():
        try:
            check_queue_name(queue)
            check_limits(f"QUEUE_LIMITS[{queue!r}]", spec)
        except (TypeError, ValueError) as err:
            problems.append(("echomq.E015", "QUEUE_LIMITS", f"QUEUE_LIMITS: {err}"))
    return problems


def _unique(items: Any) -> list:
    """``items`` in order without repeats (unhashable items compared by equality)."""
    seen: list = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _default_embedded_dir() -> str:
    from django.conf import settings

    base_dir = getattr(settings, "BASE_DIR", None)
    if base_dir is not None:
        return os.path.join(os.fspath(base_dir), ".echomq")
    return os.path.join(os.getcwd(), ".echomq")


def _build(raw: dict) -> Config:
    url, cache = raw.get("URL"), raw.get("CACHE")
    if url is None and cache is None:
        url = "embedded"
    embedded_dir = raw.get("EMBEDDED_DIR")
    embedded_dir = (
        os.path.abspath(os.fspath(embedded_dir))
        if embedded_dir is not None
        else _default_embedded_dir()
    )
    ints = {key.lower(): raw.get(key, rule[0]) for key, rule in _INT_RULES.items()}
    return Config(
        url=url,
        cache=cache,
        connection_kwargs=dict(raw.get("CONNECTION_KWARGS", {})),
        queues=tuple(raw.get("QUEUES", ("default",))),
        # Lists become tuples, so a policy from settings is hashable.
        backoff=check_backoff(raw.get("BACKOFF", DEFAULT_BACKOFF)),
        embedded_dir=embedded_dir,
        schedules=dict(raw.get("SCHEDULES", {})),
        prune_schedules=raw.get("PRUNE_SCHEDULES", False),
        queue_limits={q: check_limits(f"QUEUE_LIMITS[{q!r}]", spec)
                      for q, spec in raw.get("QUEUE_LIMITS", {}).items()},
        **durability.build(raw),
        metrics_token=raw.get("METRICS_TOKEN"),
        replicas=_replicas(raw.get("REPLICAS")),
        **ints,
    )


_MISSING = object()
_lock = threading.Lock()
_config: Config | None = None


def get_config() -> Config:
    """Return the validated :class:`Config` for ``settings.ECHOMQ``.

    Reads the setting on first call (an absent setting means all defaults) and
    caches the result until ``setting_changed`` fires for ECHOMQ, CACHES or
    BASE_DIR. Raises :class:`~echomq_django.exceptions.ConfigurationError`
    naming every offending key, its rule and check id.
    """
    global _config
    config = _config
    if config is not None:
        return config
    from django.conf import settings

    with _lock:
        if _config is None:
            raw = getattr(settings, "ECHOMQ", _MISSING)
            if raw is _MISSING:
                raw = {}
            problems = validate(raw)
            if problems:
                detail = "; ".join(f"{msg} ({cid})" for cid, _key, msg in problems)
                raise ConfigurationError(f"settings.ECHOMQ is invalid: {detail}")
            _config = _build(raw)
        return _config


def clear_config_cache() -> None:
    """Forget the cached :class:`Config`; the next :func:`get_config` re-reads settings."""
    global _config
    with _lock:
        _config = None


@receiver(setting_changed)
def _on_setting_changed(setting: str, **kwargs: Any) -> None:
    # CACHES decides whether CACHE is valid and BASE_DIR the default
    # EMBEDDED_DIR, so either change can change the Config too.
    if setting in ("ECHOMQ", "CACHES", "BASE_DIR"):
        clear_config_cache()
