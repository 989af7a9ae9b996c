"""Presence: which runechomq processes are alive, and what they serve.

Each process announces itself every couple of seconds (``lua/presence/announce.lua``)
and withdraws on the way out; an announcement nobody renews expires. The
admin's overview lists them. Keys: ``emq:{~}:workers``, ``emq:{~}:worker:<id>``
and ``emq:{~}:queues`` (docs/protocol.md, "Keys").
"""

from __future__ import annotations

import json

from ..rules import check_int, check_queue_name
from . import keyspace, scripts

__all__ = ["Presence"]


class Presence:
    """The live-process registry on one connection. Thread-safe as redis-py is."""

    def __init__(self, conn) -> None:
        self.conn = conn

    def announce(self, worker_id: str, fields: dict, queues: list[str], ttl_ms: int) -> int:
        """Record that runechomq process ``worker_id`` is alive for ``ttl_ms``.

        ``fields`` is a flat dict of str/int values. Returns the server time (ms).
        Raises ValueError for a bad queue name or ttl.
        """
        for q in queues:
            check_queue_name(q)
        return scripts.run(self.conn, "presence/announce",
                           [keyspace.WORKERS, keyspace.worker(worker_id), keyspace.QUEUES],
                           [worker_id, check_int("ttl_ms", ttl_ms, 1),
                            json.dumps(fields), json.dumps(list(queues))])

    def retire(self, worker_id: str) -> None:
        """Withdraw process ``worker_id``'s announcement."""
        scripts.run(self.conn, "presence/retire",
                    [keyspace.WORKERS, keyspace.worker(worker_id)], [worker_id])
