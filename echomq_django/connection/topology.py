"""What a redis-py client points at: one server, a Sentinel's primary, or a
cluster; and the few things that differ between them.

Every key of a queue carries the queue's ``{hash tag}``, so all of a queue's
keys live in one slot of a cluster, and every script runs on the node that
owns it (docs/protocol.md, "Cluster"). Python code that touches several keys
in one command (BLPOP over several lists) keeps them in one slot with
:func:`by_slot`; code that reads the clock for a queue reads it on the node
owning the queue (:mod:`echomq_django.protocol.clock`).
"""

from __future__ import annotations

from typing import Any, Sequence

from redis.crc import key_slot

__all__ = ["is_cluster", "by_slot", "connection_kwargs", "close_client", "node_for",
           "keyed_command", "load_script", "with_timeout"]


def is_cluster(client: Any) -> bool:
    """True for a ``redis.cluster.RedisCluster`` (or a subclass)."""
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)


def by_slot(keys: list[str]) -> list[list[str]]:
    """``keys`` grouped by cluster slot, each group in the order its first
    key came, keys in their order within a group."""
    groups: dict[int, list[str]] = {}
    for key in keys:
        raw = key.encode() if isinstance(key, str) else key
        groups.setdefault(key_slot(raw), []).append(key)
    return list(groups.values())


def connection_kwargs(client: Any) -> dict:
    """The options a client's connections are made with (host, port,
    socket_timeout, ...), or {} when it has none we can read."""
    if is_cluster(client):
        # The nodes' own clients hold the effective options (redis-py fills
        # in defaults there, such as a 5 s socket timeout).
        node = client.get_default_node()
        kwargs = {}
        if node is not None and node.redis_connection is not None:
            kwargs.update(node.redis_connection.connection_pool.connection_kwargs)
        kwargs.update(client.nodes_manager.connection_kwargs)
        return kwargs
    try:
        return client.connection_pool.connection_kwargs
    except AttributeError:
        return {}


def node_for(client: Any, key: str):
    """The cluster node owning ``key``'s slot (a ``ClusterNode``, for
    ``target_nodes=``), or None for a client that is not a cluster."""
    if not is_cluster(client):
        return None
    return client.get_node_from_key(key)


def keyed_command(target: Any, key: str, *args: Any) -> Any:
    """``target.execute_command(*args)`` (a client, or queued on a pipeline)
    for a command whose keys all share ``key``'s slot. On a cluster the
    command is sent to the node owning ``key``, named up front: redis-py's
    cluster pipeline refuses EVALSHA, MGET and TIME by name, and would find an
    EVAL's or EVALSHA's keys with a COMMAND GETKEYS round trip of its own."""
    if is_cluster(target):
        return target.execute_command(*args, target_nodes=target.get_node_from_key(key))
    return target.execute_command(*args)


def load_script(client: Any, text: str, keys: Sequence[str]) -> None:
    """SCRIPT LOAD ``text`` where calls keyed by ``keys`` run. On a cluster,
    on every primary (so one NOSCRIPT per script per cluster, not per node),
    but only the nodes owning the keys' slots must take it: a primary that is
    away fails only the calls that go to it, not those to the healthy ones.
    Raises what loading on a node owning one of ``keys`` raised."""
    if not is_cluster(client):
        client.script_load(text)
        return
    needed = {client.get_node_from_key(key).name for key in keys}
    for node in client.get_primaries():
        try:
            client.execute_command("SCRIPT LOAD", text, target_nodes=node)
        except Exception:  # noqa: BLE001 - only a node the calls need must take it
            if node.name in needed:
                raise


def close_client(client: Any) -> None:
    """Close every connection ``client`` holds (a cluster's on every node)."""
    if is_cluster(client):
        client.close()
    else:
        client.connection_pool.disconnect()


def with_timeout(client: Any, timeout_s: float, key: str | None = None) -> Any:
    """A new client to ``client``'s server whose connects and reads give up
    after ``timeout_s`` and are not retried: a one-server client, or a
    Sentinel primary's (found through the same sentinels). For a cluster, a
    one-server client of the node owning ``key``'s slot (a slot that moved
    meanwhile answers MOVED, an error: nothing follows it), so a cluster that
    does not answer costs one timeout, never a slot map read per node. Returns
    ``client`` itself when it cannot tell (a client of another kind, or a
    cluster node it has no connection settings for)."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    timeouts = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    if is_cluster(client):
        node = client.get_node_from_key(key or "emq:{~}:")
        node_client = getattr(node, "redis_connection", None)
        pool = getattr(node_client, "connection_pool", None)
        if pool is None:
            return client
        kwargs = {k: v for k, v in pool.connection_kwargs.items()
                  if k not in ("redis_connect_func", "retry")}
        return redis.Redis(connection_pool=type(pool)(connection_class=pool.connection_class,
                                                      **{**kwargs, **timeouts}))
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        return client
    manager = getattr(pool, "sentinel_manager", None)
    if manager is not None:
        return manager.master_for(pool.service_name, retry=Retry(NoBackoff(), 0), **timeouts)
    kwargs = dict(pool.connection_kwargs, **timeouts)
    return redis.Redis(connection_pool=type(pool)(connection_class=pool.connection_class,
                                                  **kwargs))
