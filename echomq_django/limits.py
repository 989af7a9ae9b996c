"""Rate limits a handler takes from: token buckets on the server clock.

``RateLimiter(conn).take("chat-7", 1, 1_000)`` takes one token from the bucket
named ``chat-7`` (at most 1 a second) and answers 0, or the ms to wait until
the next token, so a handler over its budget can defer instead of blocking a
consumer thread (seed 004, move 3: ``RateLimiter.take(chat)`` answers
``{:wait, ms}`` and the worker re-enqueues the notice with ``enqueue_in`` and
acks). The limits a queue or a lane puts on every claim are
:meth:`echomq_django.Queues.set_limits`'; both use the same bucket
(``lua/includes/bucket.lua``). Specified in docs/protocol.md ("limits/take").
"""

from __future__ import annotations

from . import rules
from .protocol import keyspace, scripts

__all__ = ["RateLimiter"]


class RateLimiter:
    """Token buckets shared by every process on one server, one per key.

    A bucket holds at most ``count`` tokens and refills ``count`` per
    ``per_ms``, measured on the server's clock (``TIME``), so hosts whose
    clocks disagree share one budget; a key never taken from, or left alone
    for ``per_ms``, is a full bucket. Thread-safe as redis-py is: each take is
    one atomic script.
    """

    def __init__(self, conn) -> None:
        self.conn = conn

    def take(self, key: str, count: int, per_ms: int) -> int:
        """Take one token from ``key``'s bucket; return 0 when one was taken,
        else the ms (>= 1) until the bucket next holds one, taking nothing.

        ``key``: the bucket's name, 1-200 bytes of UTF-8 without whitespace or
        braces (a chat id, say); it is stored as ``emq:{rl:<key>}``, which
        expires ``per_ms`` after the last token taken. ``count``: tokens in a
        burst, an int >= 1. ``per_ms``: ms in which ``count`` tokens refill,
        an int >= 1. ``take(k, 30, 1_000)`` allows 30 at once and then one
        every 33.3 ms. Callers sharing a key should pass the same rate; a
        bucket holds at most the ``count`` of the call reading it.

        A wait is exact for this bucket alone: another caller may take the
        token first, and the next take answers a new wait.

        Raises:
            TypeError: ``key`` is not a str, ``count`` or ``per_ms`` not an
                int (bools are not ints here).
            ValueError: ``key`` breaks its rule (a lone surrogate included),
                ``count`` or ``per_ms`` is outside 1..2**53.
            Nothing is sent for a bad argument.
        """
        name = keyspace.rate_limit(key)
        count = rules.check_int("count", count, 1)
        per_ms = rules.check_int("per_ms", per_ms, 1)
        return int(scripts.run(self.conn, "limits/take", [name], [count, per_ms]))
