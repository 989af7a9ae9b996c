"""The redis-py client for ``settings.ECHOMQ``, one per process.

Usage::

    from echomq_django.connection import get_connection
    client = get_connection()      # redis.Redis; replies are bytes unless
                                   # CONNECTION_KWARGS sets decode_responses

Where the client comes from (see :mod:`echomq_django.conf`):

- ``URL = "redis://..." | "rediss://..." | "unix://..."``:
  ``redis.Redis.from_url(URL, **CONNECTION_KWARGS)``.
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

__all__ = ["get_connection", "reset_connection", "describe", "block_timeout_s"]

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
    return redis.Redis.from_url(url, **config.connection_kwargs)


def get_connection() -> redis.Redis:
    """Return this process's ``redis.Redis`` client for the ECHOMQ setting.

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
    ``ssl=True`` make it), or ``unix:///path?db=N``. Reads the client's
    settings only: never connects."""
    try:
        kwargs = client.connection_pool.connection_kwargs
    except AttributeError:
        return repr(client)
    db = kwargs.get("db", 0)
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}?db={db}"
    connection_class = getattr(client.connection_pool, "connection_class", None)
    tls = kwargs.get("ssl") or (isinstance(connection_class, type)
                                and issubclass(connection_class, redis.connection.SSLConnection))
    scheme = "rediss" if tls else "redis"
    user = f"{kwargs['username']}@" if kwargs.get("username") else ""
    return f"{scheme}://{user}{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{db}"


def block_timeout_s(client: Any, wanted_s: float) -> float:
    """How long a blocking command (BLPOP) may wait on ``client``: ``wanted_s``,
    but under the client's socket timeout (redis-py's default is 5 s), since
    a read that times out in the client drops the connection."""
    try:
        kwargs = client.connection_pool.connection_kwargs
    except AttributeError:
        return wanted_s
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
        cached[2].connection_pool.disconnect()


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
