"""The outbox relay: moves ``OutboxEntry`` rows to the bus (docs/durability.md,
"Outbox").

A thread of runechomq's metronome process. Each round, per database that
holds the outbox table, it locks up to :data:`BATCH` entries (oldest first;
``SELECT ... FOR UPDATE SKIP LOCKED`` where the database has it, so several
relays take disjoint entries), admits them with the idempotent batch enqueue
and deletes them in the same transaction. A crash between the admission and
the commit leaves the rows; the next round admits them again, and their ids
make that a no-op: every entry reaches the bus once. While the server is
away the rows wait (one log line per outage); while the outbox is empty the
relay looks again every :data:`IDLE_S` seconds. No database call sits on a
job's path: only enqueues that chose the outbox write rows.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis
from django.db import DatabaseError, close_old_connections, connections, transaction

from ..api.admission import deliver_entries
from ..connection.resilience import Outage
from ..protocol.jobs import Jobs

__all__ = ["Relay", "BATCH", "IDLE_S"]

log = logging.getLogger("echomq.outbox")

#: Most entries one round admits per database.
BATCH = 500
#: How long the relay waits when it found nothing (or the server was away), s.
IDLE_S = 0.5
#: How long it waits when no database has the outbox table (not migrated,
#: or no database at all), s: then it looks for the table again.
NO_TABLE_S = 60.0


class Relay:
    """The relay thread; ``relay_once()`` is one round (also for tests)."""

    def __init__(self, conn: Any, *, outage: Outage | None = None,
                 aliases: list[str] | None = None) -> None:
        self.jobs = Jobs(conn)
        self.outage = outage or Outage()
        self._aliases = aliases
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="echomq-relay", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float | None = None) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def aliases(self) -> list[str]:
        """The databases whose outbox this relay empties: those given, else
        every configured database that has the table (looked up again while
        there is none)."""
        if not self._aliases:
            from ..models import OutboxEntry

            table = OutboxEntry._meta.db_table
            found = []
            for alias in connections:
                try:
                    if table in connections[alias].introspection.table_names():
                        found.append(alias)
                except Exception as err:  # noqa: BLE001 - a database that cannot be reached
                    log.warning("outbox: database %r cannot be read (%s); skipped", alias, err)
            self._aliases = found
        return self._aliases

    def relay_once(self) -> int:
        """One round over every database; returns how many entries went to
        the bus. Raises a redis or database error (nothing is lost: the rows
        stay)."""
        from ..models import OutboxEntry

        moved = 0
        for alias in self.aliases():
            with transaction.atomic(using=alias):
                entries = list(OutboxEntry.objects.using(alias)
                               .select_for_update(skip_locked=True).order_by("id")[:BATCH])
                if entries:
                    moved += deliver_entries(self.jobs, entries, alias)
        return moved

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    moved = self.relay_once()
                    self.outage.ok()
                except redis.RedisError as err:
                    self.outage.failed(err)
                    moved = 0
                except DatabaseError as err:
                    log.warning("outbox: the database failed (%s); trying again", err)
                    close_old_connections()
                    moved = 0
                except Exception:  # noqa: BLE001 - the relay must outlive one bad round
                    log.exception("outbox: a relay round failed; trying again")
                    moved = 0
                if moved < BATCH:
                    self._stop.wait(IDLE_S if self._aliases else NO_TABLE_S)
        finally:
            for alias in self._aliases or []:
                connections[alias].close()
