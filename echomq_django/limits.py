"""Rate limits a handler takes from: token buckets on the server clock.

``RateLimiter(conn).take("chat-7", 1, 1_000)`` takes one token from the bucket
named ``chat-7`` (at most 1 a second) and answers 0, or the ms to wait until
the next token, so a handler over its budget can defer instead of blocking a
consumer thread (seed 004, move 3: ``RateLimiter.take(chat)`` answers
``{:wait, ms}`` and the worker re-enqueues the notice with ``enqueue_in`` and
acks). The limits a queue or a lane puts on every claim are
:meth:`echomq_django.Queues.set_limits`'; both use the same bucket
(``lua/includes/bucket.lua``). Specified in docs/protocol.md ("limits/take").

The grammar of the queue and lane limits (:func:`check_limits`, which
``Queues.set_limits`` and ``ECHOMQ["QUEUE_LIMITS"]`` share) lives here too,
beside the rates it describes (docs/protocol.md, "Limits").
"""

from __future__ import annotations

from . import rules
from .protocol import keyspace, scripts

__all__ = ["RateLimiter", "LIMIT_NAMES", "check_limits", "check_rate"]


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


def check_rate(name: str, rate: object) -> tuple[int, int] | None:
    """Return a rate, ``(count, per_ms)``: ``count`` tokens per ``per_ms``
    (a token bucket holding at most ``count``), or None for no rate.

    Raises:
        TypeError: not a 2-tuple (or list) of ints, nor None.
        ValueError: count or per_ms below 1 or past 2**53.
    """
    if rate is None:
        return None
    if not isinstance(rate, (tuple, list)) or len(rate) != 2:
        raise TypeError(f"{name} must be (count, per_ms), got {rate!r}")
    return (rules.check_int(f"{name} count", rate[0], 1),
            rules.check_int(f"{name} per_ms", rate[1], 1))


#: The limit names ``Queues.set_limits`` takes and ``ECHOMQ["QUEUE_LIMITS"]`` uses.
LIMIT_NAMES = ("concurrency", "lane_concurrency", "rate", "lane_rate")


def check_limits(name: str, limits: object) -> dict:
    """Return a queue's limits as ``{"concurrency": int | None, "lane_concurrency":
    int | None, "rate": (count, per_ms) | None, "lane_rate": ... | None}``
    from a dict of some of those keys (counts >= 1).

    Raises:
        TypeError: not a dict, or a value of the wrong type (naming it).
        ValueError: an unknown key, or a value out of its range.
    """
    if not isinstance(limits, dict):
        raise TypeError(f"{name} must be a dict of {', '.join(LIMIT_NAMES)}, "
                        f"got {type(limits).__name__}")
    unknown = sorted(set(limits) - set(LIMIT_NAMES), key=str)
    if unknown:
        raise ValueError(f"{name} has unknown keys {unknown}; known: {list(LIMIT_NAMES)}")
    count = rules.optional_count
    return {"concurrency": count(f"{name}['concurrency']", limits.get("concurrency")),
            "lane_concurrency": count(f"{name}['lane_concurrency']",
                                      limits.get("lane_concurrency")),
            "rate": check_rate(f"{name}['rate']", limits.get("rate")),
            "lane_rate": check_rate(f"{name}['lane_rate']", limits.get("lane_rate"))}
