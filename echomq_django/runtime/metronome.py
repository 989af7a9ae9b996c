"""The metronome: the per-queue beat that promotes, reaps and pumps recurrences.

For each queue it runs one beat, then sleeps until the next instant anything
is due: the earliest head of ``schedule`` (run-at), ``active`` (lease
deadline) and ``repeat`` (next run), all read against the SERVER clock by the
``horizon`` script. The sleep is a local timed wait measured from that server
reading, so it is as precise as the host's timer, not the server's ``hz``.
A second thread per queue blocks on ``emq:{q}:beat`` and cuts the sleep short
when a script marks an earlier instant (an earlier schedule, a retry, a new
earliest lease). Any number of metronomes may run on any number of hosts:
every beat is an atomic script, so they never double anything.

Given a ``resync`` callable (runechomq passes its boot-time sync of the
declared schedules), the metronome also watches each queue's sync marker
``emq:{q}:synced``, read by the same ``horizon`` call: when it is gone, the
server lost its data (a flush, a restart without persistence) and the
declared schedules are synced again, at the latest one sleep (30 s) after
the loss.

See docs/protocol.md ("Metronome").
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from typing import Callable

from ..protocol.jobs import DEFAULT_DEAD_MAX, DEFAULT_DEAD_TTL_MS, DEFAULT_KEEP_MS, Jobs
from ..protocol.keyspace import Keyspace
from ..protocol.presence import signal_stop
from ..connection import block_timeout_s
from ..connection.resilience import Backoff, Outage, passing
from .outcome import Retention

log = logging.getLogger("echomq.metronome")

#: The protocol's defaults, for a metronome built without settings.
DEFAULT_RETENTION = Retention(DEFAULT_KEEP_MS, DEFAULT_DEAD_TTL_MS, DEFAULT_DEAD_MAX)

#: Longest sleep without a beat, a safety net for a lost marker (s).
MAX_SLEEP_S = 30.0
#: How long the listener blocks on the beat list before it re-checks stop (s).
LISTEN_BLOCK_S = 30.0

#: A pump for recurrences: (queue) -> how many occurrences it minted.
Pump = Callable[[str], int]
#: Syncs the declared schedules into every queue's registry and writes the
#: queues' sync markers (runechomq's boot-time sync).
Resync = Callable[[], object]


class Metronome:
    """Beat ``queues`` until :meth:`stop` (or ``stop_event`` is set).

    Args:
        conn: a redis-py client.
        queues: queue names.
        batch: most jobs promoted or leases reaped per script call.
        pump: called with the queue on every beat to mint due recurrences.
        max_stalls: expired leases a job survives before reap ends it dead.
        retention: the consumer's :class:`~.outcome.Retention`: a stalled
            death is kept ``dead_ttl_ms`` and trims the dead set to
            ``dead_max``, as any other; a row reap ends cancelled is kept
            ``result_ttl_ms``.
        outage: the process's view of the server (one log line per outage).
        resync: called when a queue's sync marker is gone (see the module
            doc); None to ignore the marker.
    """

    def __init__(self, conn, queues, *, batch: int = 1000, pump: Pump | None = None,
                 max_stalls: int = 1, retention: Retention = DEFAULT_RETENTION,
                 stop_event: threading.Event | None = None,
                 outage: Outage | None = None, resync: Resync | None = None) -> None:
        self.jobs = Jobs(conn)
        self.conn = conn
        self.queues = list(queues)
        self.batch = batch
        self.pump = pump
        self.max_stalls = max_stalls
        self.retention = retention
        self.stop_event = stop_event or threading.Event()
        self.outage = outage or Outage()
        self.resync = resync
        self._resync_lock = threading.Lock()
        self._wakers = {q: threading.Event() for q in self.queues}
        self._threads: list[threading.Thread] = []
        # Each listener blocks on its beat list and on this metronome's stop
        # list, which stop() pushes to.
        me = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self._stop_keys = {q: Keyspace(q).stop(me) for q in self.queues}

    def start(self) -> None:
        """Start a ticker and a listener thread per queue (daemons)."""
        for queue in self.queues:
            for target, role in ((self._tick_loop, "tick"), (self._listen_loop, "listen")):
                thread = threading.Thread(target=target, args=(queue,), daemon=True,
                                          name=f"echomq-metronome-{role}-{queue}")
                thread.start()
                self._threads.append(thread)

    def stop(self) -> None:
        """Stop beating; returns at once (the threads are woken and end soon)."""
        self.stop_event.set()
        for waker in self._wakers.values():
            waker.set()
        if self._threads:
            signal_stop(self.conn, list(self._stop_keys.values()), 1)

    def join(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` s per thread for the beat threads to end."""
        for thread in self._threads:
            thread.join(timeout)

    def beat(self, queue: str) -> tuple[int, int, int]:
        """One beat for ``queue``: promote, reap, pump. Returns the three counts."""
        promoted = self.jobs.promote(queue, self.batch)
        keep = self.retention
        reaped = self.jobs.reap(queue, self.batch, max_stalls=self.max_stalls,
                                dead_ttl_ms=keep.dead_ttl_ms, keep_ms=keep.result_ttl_ms,
                                dead_max=keep.dead_max)
        minted = self.pump(queue) if self.pump else 0
        if promoted or reaped or minted:
            log.debug("queue %s: promoted %d, reaped %d, minted %d",
                      queue, promoted, reaped, minted)
        if reaped:
            log.warning("queue %s: %d expired lease(s) reaped (back to pending, or dead once "
                        "past max_stalls)", queue, reaped)
        return promoted, reaped, minted

    def sleep_s(self, queue: str) -> float:
        """Seconds until the next due instant of ``queue`` on the server clock;
        0 after re-syncing a lost registry (beat again at once)."""
        now_ms, next_ms, synced = self.jobs.horizon(queue)
        if not synced and self.resync is not None:
            self._resync(queue)
            return 0.0
        if next_ms is None:
            return MAX_SLEEP_S
        return min(MAX_SLEEP_S, max(0.0, (next_ms - now_ms) / 1000))

    def _resync(self, queue: str) -> None:
        # One sync serves every queue: the tickers of the others wait for it
        # and then find their markers back.
        with self._resync_lock:
            if self.conn.exists(Keyspace(queue).synced):
                return
            log.warning("queue %s: the sync marker is gone (the server lost its data?); "
                        "re-syncing the declared schedules", queue)
            self.resync()

    def _tick_loop(self, queue: str) -> None:
        waker = self._wakers[queue]
        backoff = Backoff()
        while not self.stop_event.is_set():
            waker.clear()
            try:
                promoted, reaped, minted = self.beat(queue)
                if promoted >= self.batch or reaped >= self.batch:
                    continue  # More are due: beat again at once.
                delay_s = self.sleep_s(queue)
                if delay_s == 0 and not (promoted or reaped or minted):
                    # Something is due that no beat could move (a broken
                    # registry entry): never spin on it.
                    delay_s = 0.01
                self.outage.ok()
                backoff.reset()
            except Exception as err:  # noqa: BLE001 - a lost connection must not stop the beat
                if passing(err):
                    self.outage.failed(err)
                else:
                    log.exception("metronome beat for queue %s failed", queue)
                delay_s = backoff.next_s()
            if delay_s > 0:
                # The horizon is in whole ms and a due score is due at that ms:
                # wake just past it so promote sees it due.
                waker.wait(delay_s + 0.0005)

    def _listen_loop(self, queue: str) -> None:
        keys = [Keyspace(queue).beat, self._stop_keys[queue]]
        waker = self._wakers[queue]
        backoff = Backoff()
        failing = False
        while not self.stop_event.is_set():
            try:
                if failing:
                    # A BLPOP answers only when its block ends, seconds
                    # later; a PING says at once that the server is back, so
                    # the outage is reported over when it is, not when the
                    # ticker next wakes (up to MAX_SLEEP_S on).
                    self.conn.ping()
                    failing = False
                    self.outage.ok()
                    backoff.reset()
                if self.conn.blpop(keys, timeout=block_timeout_s(self.conn, LISTEN_BLOCK_S)):
                    waker.set()
                self.outage.ok()
            except Exception as err:  # noqa: BLE001
                failing = True
                if passing(err):
                    self.outage.failed(err)
                else:
                    log.exception("metronome listener for queue %s failed", queue)
                self.stop_event.wait(backoff.next_s())
