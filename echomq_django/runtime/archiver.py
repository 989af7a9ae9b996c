"""The archiver: folds every job that ends into a ``JobRecord`` row
(``ECHOMQ["ARCHIVE"]``; docs/archive.md).

The scripts that end a job (done, dead, cancelled) append one event to the
queue's capped stream ``emq:{q}:archive`` while its archive is on
(``lua/includes/archive.lua``). One :class:`Archiver` thread in runechomq's
metronome process reads every served queue's stream with the consumer group
``archivers``; for a batch it reads the rows (one pipeline of HGETALL),
builds the records, inserts them in one ``bulk_create`` and only then
acknowledges (XACK) the events. So a crash loses no record (the events stay
pending and are read again) and writes none twice (``(queue, job_id)`` is
unique). No database call sits on a job's path.

Order of each pass: this consumer's own pending events (after a failed batch,
or at start: a restarted process has the same consumer name, so it reads at
once what it held when it died), another consumer's events idle more than
``claim_idle_ms`` (XAUTOCLAIM: a crashed archiver on another host), then new
events (one non-blocking XREADGROUP for all queues, COUNT ``batch`` each).
About once a minute, retention deletes records past ``ttl_ms`` and beyond
``max`` (oldest first).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any

import redis
from django.db import DatabaseError, close_old_connections, connection

from ..connection.resilience import SERVER_ERRORS, Backoff, Outage, passing
from ..connection.topology import by_slot, is_cluster
from ..protocol.clock import server_now_ms
from ..protocol.keyspace import ARCHIVE_GROUP, Keyspace
from ..protocol.records import JobRow
from .archive_records import bulk_insert, prune, record_of

__all__ = ["Archiver", "declare_archive", "CLAIM_IDLE_MS", "BATCH", "RETENTION_EVERY_S"]

log = logging.getLogger("echomq.archive")

#: Events another consumer has held this long are taken over (ms).
CLAIM_IDLE_MS = 30_000
#: Most events read per queue and pass.
BATCH = 500
#: How long a pass that found less than a full batch waits before the next
#: (s): events gather meanwhile, so a busy queue is archived in full batches
#: (one insert and one XACK per BATCH jobs), not a few at a time, and a record
#: lands at most about this long after its job ended.
IDLE_WAIT_S = 0.25
#: Records built between two yields of the GIL. Building a batch is pure
#: Python; held for the interpreter's whole switch interval (5 ms), it would
#: make every consumer thread of the process wait that long each time it comes
#: back from the server, so the archiver steps aside every few records.
YIELD_EVERY = 16
#: How often retention runs (s).
RETENTION_EVERY_S = 60.0
#: How often each queue's stale events are looked for with XAUTOCLAIM (s).
AUTOCLAIM_EVERY_S = 10.0


def declare_archive(queues: Any, names: list[str], archive: Any, outage: Outage,
                    persist_s: float = 60.0) -> None:
    """Write each queue's archive stream cap (``archive.stream_max``) into its
    limits hash, or remove it when ``archive`` is None, so the scripts that
    end a job append events exactly while an archiver is configured.
    ``queues``: a :class:`~echomq_django.protocol.queues.Queues`. Rides out a
    dropped connection for ``persist_s`` s, then raises the RedisError."""
    from ..connection.resilience import persist

    cap = None if archive is None else archive.stream_max
    for name in names:
        changed = persist(lambda q=name: queues.set_archive(q, cap),
                          deadline=time.monotonic() + persist_s, outage=outage)
        if changed:
            log.info("queue %s archive %s", name,
                     "off" if cap is None else f"on (stream capped at {cap} events)")


class Archiver:
    """A thread that moves archive events of ``queues`` into ``JobRecord``.

    ``archive``: the ARCHIVE setting (:class:`echomq_django.durability.Archive`:
    ``ttl_ms``, ``max``, ``stream_max``). ``consumer``: this reader's name in
    the group (default ``archiver@<host>``: stable across restarts on one
    host). ``claim_idle_ms``: events pending with another consumer this long
    are taken over. Raises ValueError for an empty queue list.
    """

    def __init__(self, conn: Any, queues: list[str], archive: Any, *,
                 outage: Outage | None = None, consumer: str | None = None,
                 claim_idle_ms: int = CLAIM_IDLE_MS, batch: int = BATCH) -> None:
        if not queues:
            raise ValueError("Archiver needs at least one queue")
        self.conn = conn
        self.keys = {Keyspace(q).archive: q for q in queues}
        self._by_slot = by_slot(list(self.keys)) if is_cluster(conn) else [list(self.keys)]
        self.archive = archive
        self.outage = outage or Outage("the EchoMQ server")
        self.consumer = consumer or f"archiver@{socket.gethostname()}"
        self.claim_idle_ms, self.batch = claim_idle_ms, batch
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._groups: set[str] = set()
        # Streams whose own pending events are read again (from id 0): all at
        # start, and one whose batch failed.
        self._own = set(self.keys)
        self._next_claim = {key: 0.0 for key in self.keys}
        self._cursor = {key: "0-0" for key in self.keys}
        self._next_retention = 0.0
        #: Records written by this archiver (for tests and logs).
        self.archived = 0

    # -- lifecycle --------------------------------------------------------

    def start(self) -> None:
        """Start the thread (a daemon named ``echomq-archiver``)."""
        self._thread = threading.Thread(target=self.run, name="echomq-archiver", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to stop after its current batch."""
        self._stop.set()

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for the thread to end (at most ``timeout_s`` s)."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    def run(self) -> None:
        """The loop: passes until stopped; failures are logged and retried
        with backoff, never raised. Closes this thread's DB connection at exit."""
        backoff = Backoff(first_s=0.1, cap_s=5.0)
        try:
            while not self._stop.is_set():
                try:
                    moved = self.pass_once()
                    self.outage.ok()
                    backoff.reset()
                except SERVER_ERRORS as err:
                    self._redis_failed(err)
                    self._stop.wait(backoff.next_s())
                    continue
                except DatabaseError as err:
                    log.warning("archive: database error (%s: %s); the batch stays pending "
                                "and is retried", type(err).__name__, err)
                    self._own = set(self.keys)
                    self._stop.wait(backoff.next_s())
                    continue
                except Exception:  # an error of ours: logged, the loop goes on
                    log.exception("archive: pass failed; retrying")
                    self._own = set(self.keys)
                    self._stop.wait(backoff.next_s())
                    continue
                if moved < self.batch:
                    self._stop.wait(IDLE_WAIT_S)
        finally:
            connection.close()

    def _redis_failed(self, err: Exception) -> None:
        self._own = set(self.keys)
        if passing(err):
            self.outage.failed(err)
        elif "NOGROUP" in str(err):
            # The stream or its group is gone (the server lost its data):
            # create them again on the next pass.
            self._groups.clear()
        else:
            log.warning("archive: %s: %s", type(err).__name__, err)

    # -- one pass ---------------------------------------------------------

    def pass_once(self) -> int:
        """Archive what is waiting now; run retention when due. Returns the
        number of events handled. Raises RedisError or DatabaseError (the
        events of a failed batch stay pending)."""
        self._ensure_groups()
        handled = 0
        for key in sorted(self._own):
            handled += self._own_pending(key)
        now = time.monotonic()
        for key in self.keys:
            if now >= self._next_claim[key]:
                handled += self._autoclaim(key)
                self._next_claim[key] = now + AUTOCLAIM_EVERY_S
        # One XREADGROUP per slot: a cluster refuses one naming several.
        for streams in self._by_slot:
            reply = self.conn.xreadgroup(ARCHIVE_GROUP, self.consumer,
                                         {k: ">" for k in streams}, count=self.batch)
            for key, entries in _streams(reply):
                handled += self._handle(key, entries)
        if now >= self._next_retention:
            self._next_retention = now + RETENTION_EVERY_S
            self.retention()
        return handled

    def _ensure_groups(self) -> None:
        for key in self.keys:
            if key in self._groups:
                continue
            try:
                self.conn.xgroup_create(key, ARCHIVE_GROUP, id="0", mkstream=True)
            except redis.ResponseError as err:
                if "BUSYGROUP" not in str(err):
                    raise
            self._groups.add(key)

    def _own_pending(self, key: str) -> int:
        """This consumer's delivered, unacknowledged events of ``key``."""
        handled = 0
        while True:
            reply = self.conn.xreadgroup(ARCHIVE_GROUP, self.consumer, {key: "0"},
                                         count=self.batch)
            entries = [e for _, es in _streams(reply) for e in es]
            if not entries:
                break
            handled += self._handle(key, entries)
        self._own.discard(key)
        return handled

    def _autoclaim(self, key: str) -> int:
        """Events another consumer held longer than ``claim_idle_ms``."""
        reply = self.conn.xautoclaim(key, ARCHIVE_GROUP, self.consumer, self.claim_idle_ms,
                                     start_id=self._cursor[key], count=self.batch)
        cursor, entries = reply[0], reply[1]
        self._cursor[key] = cursor.decode() if isinstance(cursor, bytes) else cursor
        return self._handle(key, entries) if entries else 0

    def _handle(self, key: str, entries: list) -> int:
        """Insert the records of one batch of events, then acknowledge them."""
        entries = [(eid, fields) for eid, fields in entries if fields is not None]
        if not entries:
            return 0
        queue = self.keys[key]
        job_ids = [_text(fields.get(b"id", fields.get("id", ""))) for _, fields in entries]
        unique = list(dict.fromkeys(j for j in job_ids if j))
        pipe = self.conn.pipeline(transaction=False)
        for job_id in unique:
            pipe.hgetall(Keyspace(queue).job(job_id))
        rows = pipe.execute()
        records, gone = [], []
        for n, (job_id, raw) in enumerate(zip(unique, rows)):
            if n % YIELD_EVERY == YIELD_EVERY - 1:
                time.sleep(0)   # let the consumers' threads have the GIL (see YIELD_EVERY)
            if not raw:
                gone.append(job_id)
                continue
            record = record_of(JobRow.from_hash(queue, job_id, raw))
            if record is not None:   # None: the job runs again (a dead letter retried)
                records.append(record)
        if gone:
            log.info("archive: %d job(s) of queue %s ended but their rows are gone "
                     "(expired or deleted) and are not recorded, e.g. %s", len(gone), queue,
                     gone[0])
        if records:
            close_old_connections()
            bulk_insert(records)
            self.archived += len(records)
        self.conn.xack(key, ARCHIVE_GROUP, *[eid for eid, _ in entries])
        return len(entries)

    # -- retention --------------------------------------------------------

    def retention(self) -> int:
        """Delete records finished more than ``ttl_ms`` ago (on the server
        clock) and the oldest beyond ``max``; bounded work per call. Returns
        how many were deleted. Raises RedisError or DatabaseError."""
        now_ms = server_now_ms(self.conn)
        close_old_connections()
        deleted = prune(now_ms - self.archive.ttl_ms, self.archive.max)
        if deleted:
            log.info("archive: retention deleted %d record(s)", deleted)
        return deleted


def _streams(reply: Any) -> list[tuple[str, list]]:
    """XREADGROUP's reply as ``[(key, [(entry_id, fields), ...])]``."""
    return [(_text(key), entries) for key, entries in (reply or [])]


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
