"""The redis-py client for ``settings.ECHOMQ``, one per process.

Usage::

    from echomq_django.connection import get_connection
    client = get_connection()      # redis.Redis or RedisCluster; bytes unless
                                   # CONNECTION_KWARGS sets decode_responses

Where the client comes from (see :mod:`echomq_django.conf`):

- ``URL = "redis://..." | "rediss://..." | "unix://..."``:
  ``redis.Redis.from_url(URL, **CONNECTION_KWARGS)``.
- ``URL = "redis+cluster://..." | "redis+sentinel://..."`` (and ``rediss+``):
  a ``RedisCluster`` or a Sentinel's ``master_for`` client
  (:mod:`echomq_django.connection.urls`).
- ``CACHE = "<alias>"``: ``django_redis.get_redis_connection(alias)``, so the
  cache and echomq share one connection pool.
- ``URL = "embedded"``: :func:`echomq_django.connection.embedded.ensure_started` on
  ``EMBEDDED_DIR``, then ``from_url`` on the URL it returns.

The client is cached per process and per :class:`~echomq_django.conf.Config`:
a forked child never reuses its parent's client or sockets (the cache is
dropped in the child by ``os.register_at_fork``, and keyed by pid as a second
guard), and a settings change (``setting_changed`` for ECHOMQ or CACHES)
drops it too.

Errors: :class:`~echomq_django.exceptions.ConfigurationError` from
``get_config``; :class:`~echomq_django.exceptions.EmbeddedServerError` when
the embedded server cannot be started. Connecting is lazy: network errors
surface as ``redis.RedisError`` on the first command.

Signals emitted: none.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import redis
from django.core.signals import setting_changed
from django.dispatch import receiver

from ..conf import Config, get_config
from .topology import close_client, connection_kwargs, is_cluster
from .urls import build_client, redacted

__all__ = ["get_connection", "reset_connection", "describe", "describe_setting",
           "block_timeout_s"]

_lock = threading.Lock()
# (pid, config, client): valid while the pid matches and get_config() returns
# this very Config object (it is cached until settings change).
_cached: tuple[int, Config, redis.Redis] | None = None


def _build(config: Config) -> redis.Redis:
    if config.cache is not None:
        import django_redis

        return django_redis.get_redis_connection(config.cache)
    url = config.url
    if url == "embedded":
        from . import embedded

        url = embedded.ensure_started(config.embedded_dir)
    return build_client(url, **config.connection_kwargs)


def get_connection() -> redis.Redis:
    """Return this process's redis-py client for the ECHOMQ setting
    (``redis.Redis``, or ``redis.cluster.RedisCluster`` for a cluster URL).

    Built once per process (and rebuilt after settings change or a fork).
    Response decoding follows CONNECTION_KWARGS (or the cache's options); it is
    not forced, so callers must accept bytes or str. Raises ConfigurationError
    for an invalid setting and EmbeddedServerError when URL is "embedded" and
    the server cannot be started.
    """
    global _cached
    config = get_config()
    pid = os.getpid()
    cached = _cached
    if cached is not None and cached[0] == pid and cached[1] is config:
        return cached[2]
    with _lock:
        cached = _cached
        if cached is not None and cached[0] == pid and cached[1] is config:
            return cached[2]
        client = _build(config)
        _cached = (pid, config, client)
        return client


def describe(client: Any) -> str:
    """Where ``client`` points, for a log line or an error message, without
    its password: ``redis://host:port/db``, ``rediss://...`` for TLS (the
    pool's connection class is an SSLConnection, as ``rediss://`` URLs and
    ``ssl=True`` make it), ``unix:///path?db=N``,
    ``redis+cluster://host:port,...`` (the seed nodes) or
    ``redis+sentinel://host:port,.../service/db``. Reads the client's
    settings only: never connects."""
    kwargs = connection_kwargs(client)
    tls = kwargs.get("ssl")
    if is_cluster(client):
        nodes = ",".join(client.nodes_manager.startup_nodes)
        return f"{'rediss' if tls else 'redis'}+cluster://{nodes}"
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        return repr(client)
    db = kwargs.get("db", 0)
    connection_class = getattr(pool, "connection_class", None)
    tls = tls or (isinstance(connection_class, type)
                  and (issubclass(connection_class, redis.connection.SSLConnection)))
    scheme = "rediss" if tls else "redis"
    user = f"{kwargs['username']}@" if kwargs.get("username") else ""
    manager = getattr(pool, "sentinel_manager", None)
    if manager is not None:
        sentinels = ",".join("{host}:{port}".format(**s.connection_pool.connection_kwargs)
                             for s in manager.sentinels)
        return f"{scheme}+sentinel://{user}{sentinels}/{pool.service_name}/{db}"
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}?db={db}"
    return f"{scheme}://{user}{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{db}"


def describe_setting() -> str:
    """Where the ECHOMQ setting points, for a message, without a password and
    without building a client or connecting (a cluster's client connects as
    it is built): :func:`describe` of this process's client when it has built
    one for the current setting, else the URL with its passwords hidden
    (``urls.redacted``), or ``CACHE "<alias>"``. Raises ConfigurationError as
    ``get_config`` does."""
    config = get_config()
    cached = _cached
    if cached is not None and cached[0] == os.getpid() and cached[1] is config:
        return describe(cached[2])
    if config.cache is not None:
        return f"CACHE {config.cache!r}"
    return redacted(config.url or "")


def block_timeout_s(client: Any, wanted_s: float) -> float:
    """How long a blocking command (BLPOP) may wait on ``client``: ``wanted_s``,
    but under the client's socket timeout (redis-py's default is 5 s), since
    a read that times out in the client drops the connection."""
    kwargs = connection_kwargs(client)
    # redis-py keeps the effective value under one of these names (its
    # from_url default of 5 s only under the second).
    socket_timeout = kwargs.get("socket_timeout", kwargs.get("orig_socket_timeout"))
    if socket_timeout:
        return max(0.05, min(wanted_s, socket_timeout * 0.8))
    return wanted_s


def reset_connection(close: bool = False) -> None:
    """Forget the cached client; the next :func:`get_connection` builds a new one.

    The old client is not closed unless ``close`` is true (runechomq's
    supervisor closes it before it forks), since other code may still hold
    it; otherwise its connections close when it is garbage collected.
    """
    global _cached
    cached, _cached = _cached, None
    if close and cached is not None and cached[0] == os.getpid():
        close_client(cached[2])


def _after_fork_in_child() -> None:
    global _cached, _lock
    _cached = None
    # Another parent thread may have held the lock at fork time; the child
    # would wait on it forever.
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


@receiver(setting_changed)
def _on_setting_changed(setting: str, **kwargs: Any) -> None:
    if setting in ("ECHOMQ", "CACHES", "BASE_DIR"):
        reset_connection()
