"""Read back what a test server holds, to assert that a call changed nothing."""

from __future__ import annotations

from tests.nodes import keys as every_key

#: The read that returns a key's full content, by its TYPE.
_READS = {
    "hash": lambda pipe, key: pipe.hgetall(key),
    "zset": lambda pipe, key: pipe.zrange(key, 0, -1, withscores=True),
    "list": lambda pipe, key: pipe.lrange(key, 0, -1),
}


def snapshot(client, *patterns: str, with_ttl: bool = False) -> dict:
    """Every key matching ``patterns`` (KEYS, test-only) with its type and full
    content: whole hashes, sorted sets with scores, lists, strings; with
    ``with_ttl`` also whether the key expires. ``client`` must decode responses.

    One KEYS per pattern (on every primary of a cluster), then two pipelined
    round trips (the types, then the contents): the test servers hold tens of
    thousands of keys by the end of a session, and a SCAN walks all of them in
    a round trip per thousand."""
    keys = sorted({key for pattern in patterns for key in every_key(client, pattern)})
    if not keys:
        return {}
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.type(key)
    kinds = pipe.execute()
    for key, kind in zip(keys, kinds):
        _READS.get(kind, lambda pipe, key: pipe.get(key))(pipe, key)
        if with_ttl:
            pipe.pttl(key)
    replies = iter(pipe.execute())
    state = {}
    for key, kind in zip(keys, kinds):
        value = next(replies)
        state[key] = (kind, value, next(replies) > 0) if with_ttl else (kind, value)
    return state


def queue_pattern(queue: str) -> str:
    """The KEYS pattern of every key of ``queue``."""
    return f"emq:{{{queue}}}:*"
