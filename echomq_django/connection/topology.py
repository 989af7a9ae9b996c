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

from typing import Any

from redis.crc import key_slot

__all__ = ["is_cluster", "by_slot", "connection_kwargs", "close_client", "node_for"]


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
        return dict(client.nodes_manager.connection_kwargs)
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


def close_client(client: Any) -> None:
    """Close every connection ``client`` holds (a cluster's on every node)."""
    if is_cluster(client):
        client.close()
    else:
        client.connection_pool.disconnect()
