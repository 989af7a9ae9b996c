"""Leaderboards: members ranked by their best score in one sorted set.

``Board(conn, "cm:RND01...:board")`` is the chapter's leaderboard reading of
the sorted set (seed 002, R4.05; seed 004, move 5): ``submit`` ZADDs a
member's score keeping its best (``GT``), ``top`` is a ZREVRANGE ... WITHSCORES,
``rank`` a ZREVRANK, all O(log N) and computed on read, never stored. Each is
one command, so each is atomic without a script. The key is the caller's
own, outside EchoMQ's ``emq:`` keys. Specified in docs/protocol.md
("Leaderboards").
"""

from __future__ import annotations

from . import rules
from .protocol.scripts import decode

__all__ = ["Board", "TOP_MAX"]

#: The most entries one :meth:`Board.top` call reads.
TOP_MAX = 1000


class Board:
    """One leaderboard: a sorted set at ``key``, member -> best score, highest first.

    ``key``: 1-200 bytes of UTF-8, not starting with ``emq:`` (EchoMQ's own
    keys; a board written over a queue's set would corrupt it). Members are
    1-200 bytes of UTF-8; scores are finite numbers (ints within 2**53 or
    floats), read back as floats.

    Equal scores rank in Redis's order for reverse ranges: the member whose
    bytes sort last comes first; :meth:`rank` always agrees with :meth:`top`.

    Raises (construction): TypeError for a key that is not a str, ValueError
    for one that breaks the rule. Thread-safe as redis-py is.
    """

    def __init__(self, conn, key: str) -> None:
        rules.check_key_text("key", key)
        if key.startswith("emq:"):
            raise ValueError(f"key must not be one of EchoMQ's own keys (emq:...), got {key!r}")
        self.conn = conn
        self.key = key

    def submit(self, member: str, score: int | float) -> bool:
        """Record ``score`` for ``member``, keeping the member's best: a lower
        or equal score than the one held changes nothing (ZADD GT CH).

        Returns True when the board changed (a new member, or a higher score).

        Raises:
            TypeError: ``member`` is not a str, ``score`` not an int or float.
            ValueError: ``member`` breaks its rule; ``score`` is NaN, an
                infinity or an int past 2**53. Nothing is sent.
        """
        member = rules.check_key_text("member", member)
        score = rules.check_score("score", score)
        return self.conn.zadd(self.key, {member: score}, gt=True, ch=True) == 1

    def top(self, n: int = 10) -> list[tuple[str, float]]:
        """The ``n`` best as ``[(member, score), ...]``, best first (fewer when
        the board holds fewer; [] for an empty or missing board).

        Raises:
            TypeError: ``n`` is not an int.
            ValueError: ``n`` is outside 1..1000 (:data:`TOP_MAX`).
        """
        n = rules.check_int("n", n, 1, TOP_MAX)
        return [(decode(member), float(score))
                for member, score in self.conn.zrevrange(self.key, 0, n - 1, withscores=True)]

    def rank(self, member: str) -> int | None:
        """``member``'s 0-based rank, best first (0 is the top), or None when
        it has no score. Raises as :meth:`submit` does for ``member``."""
        return self.conn.zrevrank(self.key, rules.check_key_text("member", member))

    def score(self, member: str) -> float | None:
        """``member``'s best score, or None when it has none. Raises as
        :meth:`submit` does for ``member``."""
        value = self.conn.zscore(self.key, rules.check_key_text("member", member))
        return None if value is None else float(value)
