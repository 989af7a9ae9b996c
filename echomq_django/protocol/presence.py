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

__all__ = ["Presence", "signal_stop", "STOP_TTL_MS"]


class Presence:
    """The live-process registry on one connection. Thread-safe as redis-py is."""

    def __init__(self, conn) -> None:
        self.conn = conn

    def announce(self, worker_id: str, fields: dict, queues: list[str], ttl_ms: int) -> int:
        """Record that runechomq process ``worker_id`` is alive for ``ttl_ms``.

        ``fields`` is a flat dict of str/int values. Returns the server time (ms).
        Raises ValueError for a bad queue name or ttl (TypeError for one of
        the wrong type).
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


#: How long an unread stop marker lives (ms).
STOP_TTL_MS = 60_000


def signal_stop(conn, keys: list[str], markers: int) -> None:
    """Push ``markers`` stop markers onto each of ``keys`` (``Keyspace.stop``),
    expiring after :data:`STOP_TTL_MS`, to wake this process's blocked waits
    at shutdown. Never raises: a server that is gone has nobody to wake."""
    try:
        pipe = conn.pipeline(transaction=False)
        for key in keys:
            pipe.lpush(key, *(["1"] * markers))
            pipe.pexpire(key, STOP_TTL_MS)
        pipe.execute()
    except Exception:  # noqa: BLE001
        pass
