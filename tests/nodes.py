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
import time

from echomq_django.connection.topology import by_slot, is_cluster
from echomq_django.connection.urls import build_client

__all__ = ["client_for", "job_client", "steady", "on_cluster", "primaries", "keys", "command_stats",
           "reset_stats", "crosses_slots", "on_pipeline", "is_cluster", "CROSS_SLOT"]

#: What redis-py (RedisClusterException) or the server (CROSSSLOT) says when
#: one command names keys of several slots.
CROSS_SLOT = r"same key slot|CROSSSLOT"


def client_for(url: str, **kwargs):
    """The client for ``url`` with redis-py options ``kwargs``; the caller
    closes it (``topology.close_client``)."""
    return build_client(url, **kwargs)


#: The test jobs' cluster clients, by (process, URL): building one reads the
#: slot map, a round trip the timing tests would count in a handler's time.
_JOB_CLIENTS: dict = {}


def job_client():
    """The client the test jobs and tasks (tests/testapp) record through, on
    the server ECHOMQ_TEST_SERVER_URL names, decoding replies. It repeats a
    command whose connection was dropped (the fault tests kill connections).
    A new one-server client each call (connecting lazily); a cluster's is kept
    per process."""
    from redis.backoff import ExponentialWithJitterBackoff
    from redis.retry import Retry

    url = os.environ["ECHOMQ_TEST_SERVER_URL"]
    kept = (os.getpid(), url) if on_cluster(url) else None
    if kept in _JOB_CLIENTS:
        return _JOB_CLIENTS[kept]
    client = build_client(url, decode_responses=True,
                          retry=Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.5), 20))
    if kept is not None:
        _JOB_CLIENTS[kept] = client
    return client


def steady(call, tries: int = 50):
    """``call()``, repeated while its connection drops under it (at most
    ``tries`` times): the fault tests kill connections every few ms, and
    redis-py's pool raises a pooled connection the server closed, when the
    fresh one it opens instead is closed too, outside the client's Retry. For
    a command that is safe to repeat (SADD of a fixed member)."""
    import redis

    for attempt in range(tries):
        try:
            return call()
        except (redis.ConnectionError, redis.TimeoutError):
            if attempt == tries - 1:
                raise
            time.sleep(0.01)


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


def command_stats(client) -> dict[str, int]:
    """INFO commandstats as ``{command: calls}`` ("evalsha", "hmget", ...),
    summed over every primary. Each primary counts the INFO that reads it."""
    calls: dict[str, int] = {}
    for node in primaries(client):
        for name, stat in node.info("commandstats").items():
            name = name.removeprefix("cmdstat_")
            calls[name] = calls.get(name, 0) + stat["calls"]
    return calls


def reset_stats(client) -> None:
    """CONFIG RESETSTAT on every primary."""
    for node in primaries(client):
        node.config_resetstat()


def crosses_slots(client, keys) -> bool:
    """True when ``client`` is a cluster's and ``keys`` lie in more than one
    slot: the cluster refuses such a command (CROSS_SLOT) before it runs."""
    return is_cluster(client) and len(by_slot(list(keys))) > 1


def on_pipeline(pipe, script):
    """A function ``(keys, args)`` that queues redis-py Script ``script`` on
    ``pipe``. A cluster's pipeline refuses the evalsha method and loads no
    script before it runs, so there the script is loaded on every primary
    first and EVALSHA sent as a plain command (routed by its keys)."""
    if not is_cluster(pipe):
        return lambda keys, args: script(keys=keys, args=args, client=pipe)
    script.registered_client.script_load(script.script)
    return lambda keys, args: pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
