"""The ``ECHOMQ["URL"]`` forms and the redis-py client each one builds.

Forms (docs/deployment.md, "Where the server is"):

``redis://[user[:password]@]host:port/db``, ``rediss://...``, ``unix:///path?db=N``
    One server: ``redis.Redis.from_url``.
``redis+cluster://[user[:password]@]host:port[,host:port...][/0][?option=value]``
    A Redis Cluster (or Valkey cluster) reached through any of the seed
    nodes: ``redis.cluster.RedisCluster``. ``rediss+cluster://`` uses TLS.
    A cluster has database 0 only.
``redis+sentinel://[user[:password]@]host:port[,host:port...]/service[/db][?option=value]``
    The primary Sentinel names ``service``, found through any of the listed
    sentinels and followed through failovers: ``Sentinel.master_for``.
    ``rediss+sentinel://`` uses TLS to the sentinels and the servers. The
    user and password are the servers'; ``sentinel_username`` and
    ``sentinel_password`` in the query are the sentinels' own (none by default).

Query options are redis-py's connection options as ``redis://`` URLs take
them (``socket_timeout=2``, ``client_name=x``, ...); CONNECTION_KWARGS adds
and overrides options for every form.

Errors: :func:`check_url` returns why a URL is refused (for ``manage.py
check``, ``echomq.E004``); :func:`build_client` raises ValueError with the
same text.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode

import redis
from redis.connection import parse_url

__all__ = ["SCHEMES", "check_url", "check_cache", "build_client", "Target", "parse_target",
           "redacted"]

#: Every accepted scheme (besides the literal "embedded").
SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster",
           "redis+sentinel", "rediss+sentinel")

_SENTINEL_ONLY = ("sentinel_username", "sentinel_password")


class Target:
    """A parsed URL: ``kind`` is "single", "cluster" or "sentinel";
    ``nodes`` the ``(host, port)`` seeds (cluster) or sentinels; ``service``
    the Sentinel service name; ``kwargs`` redis-py connection options (TLS,
    user, password, db, query options); ``sentinel_kwargs`` the sentinels' own."""

    __slots__ = ("kind", "url", "nodes", "service", "kwargs", "sentinel_kwargs")

    def __init__(self, kind: str, url: str, nodes=(), service: str | None = None,
                 kwargs: dict | None = None, sentinel_kwargs: dict | None = None) -> None:
        self.kind, self.url, self.nodes, self.service = kind, url, tuple(nodes), service
        self.kwargs = kwargs or {}
        self.sentinel_kwargs = sentinel_kwargs or {}


def _hosts(netloc: str, scheme: str) -> list[tuple[str, int]]:
    """The ``host:port`` list (``[v6]:port`` for an IPv6 address; the port
    defaults to 6379, 26379 for sentinels)."""
    nodes = []
    for part in netloc.split(","):
        host, sep, port = part.rpartition(":")
        if not sep or part.endswith("]"):   # no port (an IPv6 address ends in "]")
            host, port = part, "6379" if "sentinel" not in scheme else "26379"
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if (not host or host != host.strip() or not port.isascii() or not port.isdigit()
                or not 0 < int(port) < 65536):
            raise ValueError(f"URL {scheme}:// wants host:port[,host:port...], got {part!r}")
        nodes.append((host, int(port)))
    return nodes


def redacted(url: str) -> str:
    """``url`` with the password of its ``user:password@``, and the value of
    every query option named ``*password`` (``?password=``,
    ``sentinel_password=``), replaced by ``***``, for messages (manage.py
    check and the admin print them)."""
    url = re.sub(r"([?&][^=&#]*password=)[^&#]*", r"\1***", url)
    scheme, sep, rest = url.partition("://")
    userinfo, at, hosts = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:***@{hosts}"


def parse_target(url: str) -> Target:
    """Parse ``url`` (one of :data:`SCHEMES`). Raises ValueError naming the
    rule a malformed URL breaks."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ValueError("URL must use scheme " + ", ".join(f"{s}://" for s in SCHEMES)
                         + f', or be the literal "embedded", got {redacted(url)!r}')
    if "+" not in scheme:
        try:
            parse_url(url)  # redis-py's own checks
        except ValueError as exc:
            raise ValueError(f"URL is not a valid {scheme}:// URL: {exc}") from None
        return Target("single", url)
    base, _, kind = scheme.partition("+")
    rest, _, query = rest.partition("?")
    userinfo, at, hostpart = rest.rpartition("@")
    netloc, _, path = hostpart.partition("/")
    nodes = _hosts(netloc, scheme)
    segments = [unquote(s) for s in path.split("/") if s]
    options = dict(parse_qsl(query, keep_blank_values=True))
    sentinel_kwargs = {k: options.pop(k) for k in _SENTINEL_ONLY if k in options}
    service = None
    if kind == "sentinel":
        if not segments:
            raise ValueError(f"URL {scheme}:// wants the service name as its path "
                             f"(host:port/mymaster[/db]), got {redacted(url)!r}")
        service, segments = segments[0], segments[1:]
    if len(segments) > 1 or (segments and not segments[0].isdigit()):
        after = "the service name" if kind == "sentinel" else "the hosts"
        raise ValueError(f"URL {scheme}:// takes at most one path segment after {after}, "
                         f"the database number, got {path!r}")
    db = int(segments[0]) if segments else 0
    if kind == "cluster" and (db != 0 or options.get("db", "0") != "0"):
        db = db or options.get("db")
        raise ValueError(f"URL {scheme}:// names database {db}, but a cluster has database 0 only")
    # redis-py's parse_url converts the credentials and query options; the
    # hosts are ours.
    host = f"[{nodes[0][0]}]" if ":" in nodes[0][0] else nodes[0][0]
    single = f"{base}://{userinfo}{at}{host}:{nodes[0][1]}/{db}"
    if options:
        single += "?" + urlencode(options)
    kwargs = parse_url(single)
    for key in ("host", "port"):
        kwargs.pop(key, None)
    if kind == "cluster":
        kwargs.pop("db", None)
    if base == "rediss":
        sentinel_kwargs.setdefault("ssl", True)
    if kind == "sentinel":
        for key, value in list(sentinel_kwargs.items()):
            if key in _SENTINEL_ONLY:
                sentinel_kwargs[key.removeprefix("sentinel_")] = sentinel_kwargs.pop(key)
    return Target(kind, url, nodes, service, kwargs, sentinel_kwargs)


def check_url(url: Any) -> str | None:
    """Why ``url`` is not an acceptable ``ECHOMQ["URL"]``, or None."""
    if url == "embedded":
        return None
    if not isinstance(url, str):
        return f"URL must be a string, got {type(url).__name__}"
    try:
        parse_target(url)
    except ValueError as exc:
        return str(exc)
    return None


def check_cache(alias: Any) -> str | None:
    """Why ``alias`` is not a usable ``ECHOMQ["CACHE"]`` (a django_redis cache
    alias in ``settings.CACHES``), or None (``echomq.E005``)."""
    from django.conf import settings

    if not isinstance(alias, str):
        return f"CACHE must be a cache alias (a string), got {type(alias).__name__}"
    caches = getattr(settings, "CACHES", {}) or {}
    if alias not in caches:
        return f"CACHE names {alias!r}, which is not in settings.CACHES"
    backend = caches[alias].get("BACKEND", "")
    if not isinstance(backend, str) or not backend.startswith("django_redis."):
        return (
            f"CACHE names {alias!r}, whose BACKEND {backend!r} is not django_redis "
            "(for example django_redis.cache.RedisCache)"
        )
    options = caches[alias].get("OPTIONS") or {}
    client_class = options.get("REDIS_CLIENT_CLASS", "") if isinstance(options, dict) else ""
    if "cluster" in str(getattr(client_class, "__name__", client_class)).lower():
        # django-redis builds one-server pools: every node of the cluster
        # client would be reached through the one LOCATION names.
        return (f"CACHE names {alias!r}, whose REDIS_CLIENT_CLASS is a cluster client; "
                "django-redis has no cluster support: set URL = \"redis+cluster://...\" instead")
    return None


def build_client(url: str, **connection_kwargs: Any):
    """The redis-py client for ``url``: ``redis.Redis`` (one server or a
    Sentinel's primary) or ``redis.cluster.RedisCluster``. Connects lazily,
    except that a cluster client asks a seed node for the slot map at once
    (``redis.RedisError`` when none answers). Raises ValueError for a
    malformed URL."""
    target = parse_target(url)
    if target.kind == "single":
        return redis.Redis.from_url(url, **connection_kwargs)
    kwargs = {**target.kwargs, **connection_kwargs}
    if target.kind == "cluster":
        from redis.backoff import NoBackoff
        from redis.cluster import ClusterNode, RedisCluster
        from redis.retry import Retry

        kwargs.pop("connection_class", None)
        if target.url.startswith("rediss"):
            kwargs["ssl"] = True
        # As on one server, a command is not repeated behind our back: a
        # script repeated after a lost reply must be repeated where the
        # repeat is known (connection/resilience.py), or a first try that
        # was written reads as a duplicate. Redirections (MOVED, ASK) are
        # still followed, and the slot map is read again after an error.
        kwargs.setdefault("retry", Retry(NoBackoff(), 0))
        return RedisCluster(startup_nodes=[ClusterNode(h, p) for h, p in target.nodes], **kwargs)
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    from redis.sentinel import Sentinel

    if target.url.startswith("rediss"):
        kwargs.pop("connection_class", None)
        kwargs["ssl"] = True
    sentinel_kwargs = dict(target.sentinel_kwargs)
    for key in ("socket_timeout", "socket_connect_timeout"):
        if key in kwargs:
            sentinel_kwargs.setdefault(key, kwargs[key])
    # A sentinel that does not answer is left for the next one at once:
    # redis-py's default retry waited about 5 s for each (its backoff), which
    # held every call and admin page that much while the sentinels were away.
    # Our own callers repeat what passes (connection/resilience.py).
    sentinel_kwargs.setdefault("retry", Retry(NoBackoff(), 0))
    sentinel = Sentinel(list(target.nodes), sentinel_kwargs=sentinel_kwargs)
    return sentinel.master_for(target.service, **kwargs)
