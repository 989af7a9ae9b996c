"""The outbox relay: moves ``OutboxEntry`` rows to the bus (docs/durability.md,
"Outbox").

A thread of runechomq's metronome process. Each round, per database that
holds the outbox table, it locks up to :data:`BATCH` entries not yet
admitted (oldest first; ``SELECT ... FOR UPDATE SKIP LOCKED`` where the
database has it, so several relays take disjoint entries), admits them with
the idempotent batch enqueue and marks them admitted, with the queue's epoch
(``emq:{q}:epoch``), in the same transaction. A crash between the admission
and the commit leaves them unmarked; the next round admits them again, and
their ids make that a no-op: every entry reaches the bus once.

Every :data:`RECONCILE_S` seconds it also looks at the admitted entries: one
whose job has ended (done, dead, cancelled) is deleted; one whose job row is
gone while the queue's epoch is the one it was admitted in, admitted longer
ago than ``RESULT_TTL_MS``, ended and expired, and is deleted too; one whose
job is gone otherwise (the epoch gone: the server lost its data; or sooner
than a row expires: it lost its last writes) is admitted again. So an
outbox job survives the server losing its data until it has ended (a job
that was running then runs again: at least once). The admin's delete
removes the job's entry too, so a deleted job is not admitted again. While
the server is away the rows wait (one log line per outage); while the
outbox is empty the relay looks again every
:data:`IDLE_S` seconds. No database call sits on a job's path: only enqueues
that chose the outbox write rows.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import Any

from django.db import DatabaseError, close_old_connections, connections, transaction
from django.utils import timezone

from ..api.admission import deliver_entries
from ..conf import get_config
from ..connection.resilience import SERVER_ERRORS, Outage
from ..protocol.jobs import Jobs
from ..protocol.keyspace import Keyspace

__all__ = ["Relay", "BATCH", "IDLE_S", "RECONCILE_S"]

log = logging.getLogger("echomq.outbox")

#: Most entries one round admits per database.
BATCH = 500
#: How long the relay waits when it found nothing (or the server was away), s.
IDLE_S = 0.5
#: How long it waits when no database has the outbox table (not migrated,
#: or no database at all), s: then it looks for the table again.
NO_TABLE_S = 60.0
#: How often the admitted entries are checked against the bus, s.
RECONCILE_S = 2.0
#: The states a job ends in: its entry has done its work.
FINAL = frozenset({"done", "dead", "cancelled"})


class Relay:
    """The relay thread; ``relay_once()`` is one round (also for tests)."""

    def __init__(self, conn: Any, *, outage: Outage | None = None,
                 aliases: list[str] | None = None) -> None:
        self.jobs = Jobs(conn)
        self.outage = outage or Outage()
        self._aliases = aliases
        self._unread = False   # a database could not be read when the list was made
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
        if not self._aliases or self._unread:
            from ..models import OutboxEntry

            table = OutboxEntry._meta.db_table
            found, unread = [], False
            for alias in connections:
                try:
                    if table in connections[alias].introspection.table_names():
                        found.append(alias)
                except Exception as err:  # noqa: BLE001 - a database that cannot be reached
                    unread = True
                    log.warning("outbox: database %r cannot be read (%s); looking again in "
                                "%.1f s", alias, err, IDLE_S * 4)
            self._aliases, self._unread = found, unread
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
                               .select_for_update(skip_locked=True)
                               .filter(admitted_at__isnull=True).order_by("id")[:BATCH])
                if entries:
                    moved += deliver_entries(self.jobs, entries, alias)
        return moved

    def reconcile_once(self) -> tuple[int, int]:
        """Check every admitted entry against the bus, :data:`BATCH` at a
        time; returns ``(deleted, admitted again)``. Raises a redis or
        database error (nothing is lost: a batch not finished stays as it
        was)."""
        from ..models import OutboxEntry

        deleted = again = 0
        for alias in self.aliases():
            after = 0
            while True:
                with transaction.atomic(using=alias):
                    entries = list(OutboxEntry.objects.using(alias)
                                   .select_for_update(skip_locked=True)
                                   .filter(admitted_at__isnull=False, pk__gt=after)
                                   .order_by("id")[:BATCH])
                    if not entries:
                        break
                    after = entries[-1].pk
                    gone, lost = self._judge(entries)
                    OutboxEntry.objects.using(alias).filter(pk__in=gone).delete()
                    if lost:
                        log.warning("outbox: the server no longer has %d admitted job(s) "
                                    "(it lost its data); admitting them again", len(lost))
                        deliver_entries(self.jobs, lost, alias)
                    deleted, again = deleted + len(gone), again + len(lost)
                if len(entries) < BATCH:
                    break
        return deleted, again

    def _judge(self, entries: list[Any]) -> tuple[list[int], list[Any]]:
        """(ids of entries whose work is done, entries the server lost)."""
        queues = sorted({e.queue for e in entries})
        pipe = self.jobs.conn.pipeline(transaction=False)
        for queue in queues:
            pipe.get(Keyspace(queue).epoch)
        for entry in entries:
            pipe.hget(Keyspace(entry.queue).job(entry.job_id), "state")
        replies = [r.decode() if isinstance(r, bytes) else r for r in pipe.execute()]
        epochs = dict(zip(queues, replies[:len(queues)]))
        # A job row outlives its end by RESULT_TTL_MS (a dead one longer): a
        # row missing sooner, in the same epoch, was never kept (a server that
        # lost its last writes: appendfsync everysec) or was deleted.
        expired_before = timezone.now() - dt.timedelta(milliseconds=get_config().result_ttl_ms)
        gone, lost = [], []
        for entry, state in zip(entries, replies[len(queues):]):
            if state in FINAL:
                gone.append(entry.pk)
            elif state is not None:
                continue
            elif epochs[entry.queue] == entry.epoch and entry.admitted_at < expired_before:
                gone.append(entry.pk)      # it ended, and its row expired since
            else:
                lost.append(entry)         # the server lost it: its data, or its last writes
        return gone, lost

    def _run(self) -> None:
        next_reconcile = time.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    moved = self.relay_once()
                    if time.monotonic() >= next_reconcile:
                        next_reconcile = time.monotonic() + RECONCILE_S
                        self.reconcile_once()
                    self.outage.ok()
                except SERVER_ERRORS as err:
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
                    # No table anywhere: look for one once a minute; a database
                    # that could not be read: soon.
                    idle = IDLE_S * 4 if self._unread else IDLE_S
                    self._stop.wait(idle if self._aliases or self._unread else NO_TABLE_S)
        finally:
            for alias in self._aliases or []:
                connections[alias].close()
