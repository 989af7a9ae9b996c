"""Read back what a test server holds, to assert that a call changed nothing."""

from __future__ import annotations


def snapshot(client, *patterns: str, with_ttl: bool = False) -> dict:
    """Every key matching ``patterns`` (SCAN, test-only) with its type and full
    content: whole hashes, sorted sets with scores, lists, strings; with
    ``with_ttl`` also whether the key expires. ``client`` must decode responses."""
    state = {}
    for pattern in patterns:
        for key in client.scan_iter(match=pattern, count=1000):
            kind = client.type(key)
            if kind == "hash":
                value = client.hgetall(key)
            elif kind == "zset":
                value = client.zrange(key, 0, -1, withscores=True)
            elif kind == "list":
                value = client.lrange(key, 0, -1)
            else:
                value = client.get(key)
            state[key] = (kind, value, client.pttl(key) > 0) if with_ttl else (kind, value)
    return state


def queue_pattern(queue: str) -> str:
    """The SCAN pattern of every key of ``queue``."""
    return f"emq:{{{queue}}}:*"
