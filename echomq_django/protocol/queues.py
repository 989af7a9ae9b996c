"""Queues: control of a whole queue (pause, resume), one atomic script each.

``Queues(conn).pause("mail")`` stops consumers claiming from ``mail``; the
metronome keeps promoting, so nothing due is lost while it is paused
(docs/protocol.md, "pause, resume"). The per-job surface is
:class:`~echomq_django.protocol.jobs.Jobs`.
"""

from __future__ import annotations

from . import scripts
from .keyspace import WAKE_CAP, Keyspace

__all__ = ["Queues"]


class Queues:
    """Queue-wide control on one connection. Thread-safe as redis-py is.

    Every method raises ValueError for a bad queue name before anything is sent.
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
