"""Clients on the shared test server, whichever it is: one server or a
cluster (tests/conftest.py, ECHOMQ_TEST_CLUSTER).

``client_for(url, **kwargs)`` builds the client the package would build for
``url`` (``echomq_django.connection.urls.build_client``): ``redis.Redis`` for
one server, ``redis.cluster.RedisCluster`` for a cluster. A cluster client
sends KEYS, INFO, CLIENT, CONFIG and TIME to one node of its choosing, so
tests that mean the whole server use :func:`primaries` (one ``redis.Redis``
per primary: CLIENT KILL, CLIENT PAUSE, CONFIG SET, INFO) or :func:`keys`.
"""

from __future__ import annotations

import os

from echomq_django.connection.topology import by_slot, is_cluster
from echomq_django.connection.urls import build_client

__all__ = ["client_for", "primaries", "keys", "on_cluster", "command_calls", "crosses_slots",
           "CROSS_SLOT"]

#: What redis-py (RedisClusterException) or the server (CROSSSLOT) says when
#: one command names keys of several slots.
CROSS_SLOT = r"same key slot|CROSSSLOT"


def client_for(url: str, **kwargs):
    """The client for ``url`` with redis-py options ``kwargs``; the caller
    closes it (``topology.close_client``)."""
    return build_client(url, **kwargs)


def on_cluster(url: str | None = None) -> bool:
    """True when ``url`` (default: the session's server, from
    ECHOMQ_TEST_SERVER_URL) is a cluster."""
    url = url if url is not None else os.environ.get("ECHOMQ_TEST_SERVER_URL", "")
    return "+cluster://" in url


def primaries(client) -> list:
    """One ``redis.Redis`` per primary of ``client``'s cluster (sharing the
    cluster client's connections and options), or ``[client]`` for a client of
    one server."""
    if not is_cluster(client):
        return [client]
    return [client.get_redis_connection(node)
            for node in sorted(client.get_primaries(), key=lambda node: (node.host, node.port))]


def keys(client, pattern: str) -> list:
    """Every key matching ``pattern`` on every primary (KEYS, test-only)."""
    return [key for node in primaries(client) for key in node.keys(pattern)]


def command_calls(client, *names: str) -> int:
    """The calls INFO commandstats counts for the commands ``names`` (lower
    case, e.g. "evalsha"), summed over every primary."""
    total = 0
    for node in primaries(client):
        stats = node.info("commandstats")
        total += sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in names)
    return total


def crosses_slots(client, keys) -> bool:
    """True when ``client`` is a cluster's and ``keys`` lie in more than one
    slot: the cluster refuses such a command (CROSS_SLOT) before it runs."""
    return is_cluster(client) and len(by_slot(list(keys))) > 1
