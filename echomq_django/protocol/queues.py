"""Queues: control of a whole queue (pause, resume, limits), one atomic script each.

``Queues(conn).pause("mail")`` stops consumers claiming from ``mail``; the
metronome keeps promoting, so nothing due is lost while it is paused
(docs/protocol.md, "pause, resume"). The per-job surface is
:class:`~echomq_django.protocol.jobs.Jobs`.
"""

from __future__ import annotations

from ..limits import check_limits
from ..rules import MAX_MS, check_int
from . import scripts
from .keyspace import WAKE_CAP, Keyspace

#: The fields of ``emq:{q}:limits`` (lua/queues/set_limits.lua writes them).
LIMIT_FIELDS = ("concurrency", "lane_concurrency", "rate_count", "rate_per_ms",
                "lane_rate_count", "lane_rate_per_ms")

__all__ = ["Queues", "LIMIT_FIELDS", "limits_from_fields"]


def limits_from_fields(raw: dict) -> dict:
    """Type the fields of a limits hash (str -> str, absent = no limit) as
    :meth:`Queues.limits` returns them: ``{"concurrency": int | None,
    "lane_concurrency": int | None, "rate": (count, per_ms) | None,
    "lane_rate": (count, per_ms) | None}``."""

    def num(key):
        value = raw.get(key)
        return int(value) if value not in (None, "") else None

    def rate(prefix):
        count, per = num(f"{prefix}_count"), num(f"{prefix}_per_ms")
        return None if count is None or per is None else (count, per)

    return {"concurrency": num("concurrency"), "lane_concurrency": num("lane_concurrency"),
            "rate": rate("rate"), "lane_rate": rate("lane_rate")}


class Queues:
    """Queue-wide control on one connection. Thread-safe as redis-py is.

    Every method raises TypeError for a queue name that is not a str and
    ValueError for one that breaks the rule, before anything is sent.
    """

    def __init__(self, conn) -> None:
        self.conn = conn

    def pause(self, queue: str) -> bool:
        """Stop consumers claiming from ``queue`` (the metronome keeps promoting).
        Returns False when it was already paused."""
        return scripts.run(self.conn, "queues/pause", [Keyspace(queue).paused], []) == 1

    def resume(self, queue: str) -> bool:
        """Let consumers claim from ``queue`` again. Returns False when it was not paused."""
        ks = Keyspace(queue)
        return scripts.run(self.conn, "queues/resume", [ks.paused, ks.pending, ks.wake],
                           [WAKE_CAP]) == 1

    def is_paused(self, queue: str) -> bool:
        """True while ``queue`` is paused."""
        return bool(self.conn.exists(Keyspace(queue).paused))

    def set_limits(self, queue: str, concurrency: int | None = None,
                   lane_concurrency: int | None = None, rate: tuple[int, int] | None = None,
                   lane_rate: tuple[int, int] | None = None) -> bool:
        """Set ``queue``'s limits, replacing all the previous ones (None, or
        leaving one out: no such limit) (docs/protocol.md, "Limits"). Every
        claim of every process reads them. Returns False when the queue had
        exactly these limits already (nothing was touched).

        ``concurrency``: most jobs of the queue running at once.
        ``lane_concurrency``: most jobs of one group (lane) running at once.
        ``rate`` / ``lane_rate``: ``(count, per_ms)``, a token bucket for the
        queue / for each lane: at most ``count`` claims in a burst, then
        ``count`` per ``per_ms``, on the server clock. Lane limits apply to
        grouped jobs; ungrouped ones meet only the queue's.

        Raises TypeError or ValueError naming the argument (counts and
        per_ms in 1..2**53), sending nothing.
        """
        ks = Keyspace(queue)
        given = {"concurrency": concurrency, "lane_concurrency": lane_concurrency,
                 "rate": rate, "lane_rate": lane_rate}
        limits = {k: v for k, v in given.items() if v is not None}
        checked = check_limits("limits", limits)
        rate, lane_rate = checked["rate"] or ("", ""), checked["lane_rate"] or ("", "")
        return scripts.run(self.conn, "queues/set_limits", [ks.limits],
                           ["" if checked["concurrency"] is None else checked["concurrency"],
                            "" if checked["lane_concurrency"] is None
                            else checked["lane_concurrency"], *rate, *lane_rate]) == 1

    def set_archive(self, queue: str, stream_max: int | None) -> bool:
        """Turn ``queue``'s archive events on, capping its stream
        ``emq:{q}:archive`` at about ``stream_max`` events (XADD MAXLEN ~), or
        off with None (docs/protocol.md, "Archive"). Every script that ends a
        job reads it with the limits; :meth:`set_limits` keeps it. Returns
        False when it was already so.

        Raises TypeError or ValueError naming ``stream_max`` (1..2**53),
        sending nothing.
        """
        cap = "" if stream_max is None else check_int("stream_max", stream_max, 1, MAX_MS)
        return scripts.run(self.conn, "queues/set_archive", [Keyspace(queue).limits],
                           [cap]) == 1

    def archive_max(self, queue: str) -> int | None:
        """The cap of ``queue``'s archive stream, None while its archive is off."""
        value = self.conn.hget(Keyspace(queue).limits, "archive_max")
        return None if value is None else int(value)

    def limits(self, queue: str) -> dict:
        """``queue``'s limits: ``{"concurrency": int | None, "lane_concurrency":
        int | None, "rate": (count, per_ms) | None, "lane_rate": ... | None}``."""
        return limits_from_fields(scripts.decode_hash(self.conn.hgetall(Keyspace(queue).limits)))
