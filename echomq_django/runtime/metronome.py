"""The metronome: the per-queue beat that promotes, reaps and pumps recurrences.

For each queue a ticker asks the ``horizon`` script for the server's now and
the heads of ``schedule`` (run-at), ``active`` (lease deadline) and
``repeat`` (next run), and sleeps until the earliest of them, at most
:data:`MAX_SLEEP_S`. The same script stores that instant as the metronome's
plan (``emq:{q}:beat_at``), and a script that creates an earlier instant
pushes a marker onto ``emq:{q}:beat``, which a listener thread per queue
BLPOPs to cut the sleep short; an instant at or after the plan wakes nobody,
so the metronome is woken when its next instant moves earlier, never once
per job. The sleep is a local timed wait measured from the server's reading
in microseconds, less half the reply's round trip, so the promote that ends
it reaches the server at the planned millisecond: as precise as the host's
timer, not the server's ``hz``. When it
ends on a planned instant the ticker runs only the steps that are due
(promote, reap, the registry's pump) and reads the horizon again; when it
ends on the cap or on a marker it reads the horizon first. An idle queue so
costs one horizon per :data:`MAX_SLEEP_S` and the listener's blocked wait.
Any number of metronomes may run on any number of hosts: every beat is an
atomic script, so they never double anything.

Once a server minute the ticker also records the queue latency
(``queues/sample_latency``, into ``emq:{q}:latency``) for the admin's chart.

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
import time
from typing import Callable, NamedTuple

from ..connection import block_timeout_s
from ..connection.resilience import Backoff, Outage, passing
from ..protocol.jobs import DEFAULT_DEAD_MAX, DEFAULT_DEAD_TTL_MS, DEFAULT_KEEP_MS, Jobs
from ..protocol.keyspace import Keyspace
from ..protocol.presence import signal_stop
from .outcome import Retention

log = logging.getLogger("echomq.metronome")

#: The protocol's defaults, for a metronome built without settings.
DEFAULT_RETENTION = Retention(DEFAULT_KEEP_MS, DEFAULT_DEAD_TTL_MS, DEFAULT_DEAD_MAX)

#: Longest sleep without reading the horizon (s): the safety net for a lost
#: marker (the metronome's own, and, through the horizon's nudge, the
#: consumers' wake markers), and the plan of a queue with nothing due.
MAX_SLEEP_S = 30.0
#: How long the listener blocks on the beat list before it re-checks stop (s).
LISTEN_BLOCK_S = 30.0
#: The most the sleep is shortened by for the half round trip of the
#: horizon's reply (s): a slow reply must not wake the ticker early.
MAX_LEAD_S = 0.001
#: A beat that moved nothing while the horizon still says due (a broken
#: registry entry no beat can move) sleeps this long before the next (s).
STUCK_SLEEP_S = 0.01

#: How often the horizon also nudges the consumers (the wake-marker safety
#: net), at most (s); a little under MAX_SLEEP_S, so an idle queue's one
#: horizon per sleep carries it.
NUDGE_EVERY_S = MAX_SLEEP_S * 0.9

#: The steps of a beat, each run when its set's head is due.
STEPS = ("promote", "reap", "pump")

#: A pump for recurrences: (queue) -> how many occurrences it minted.
Pump = Callable[[str], int]
#: Syncs the declared schedules into every queue's registry and writes the
#: queues' sync markers (runechomq's boot-time sync).
Resync = Callable[[], object]


class Plan(NamedTuple):
    """What the ticker does next for one queue (:meth:`Metronome.plan`)."""

    #: Seconds to sleep (0: beat at once), from the horizon's reply.
    delay_s: float
    #: The steps due at the end of the sleep (empty when the sleep ends on
    #: the cap, :data:`MAX_SLEEP_S`: read the horizon again first).
    steps: frozenset[str]
    #: Something was due at the horizon's reading of the server clock.
    due: bool = False
    #: The horizon's reading of the server clock (ms).
    now_ms: int = 0


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
        # Each listener blocks on this metronome's stop list and on its beat
        # list; stop() pushes to the first.
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
        """Stop beating; returns at once (the threads are woken and end soon).

        Each queue's beat list gets one marker after this metronome's stop
        markers: another metronome serving the queue, if any, reads the
        horizon again, since the plan this one stored dies with it."""
        self.stop_event.set()
        for waker in self._wakers.values():
            waker.set()
        if self._threads:
            signal_stop(self.conn, list(self._stop_keys.values()), 1)
            try:
                pipe = self.conn.pipeline(transaction=False)
                for queue in self.queues:
                    beat = Keyspace(queue).beat
                    pipe.lpush(beat, "1")
                    pipe.ltrim(beat, 0, 0)
                pipe.execute()
            except Exception:  # noqa: BLE001 - a server that is gone has nobody to wake
                pass

    def join(self, timeout: float | None = None) -> None:
        """Wait up to ``timeout`` s per thread for the beat threads to end."""
        for thread in self._threads:
            thread.join(timeout)

    def beat(self, queue: str, steps=STEPS) -> tuple[int, int, int]:
        """One beat for ``queue``: promote, reap, pump (those of ``steps``).
        Returns the three counts (0 for a step not run)."""
        promoted = self.jobs.promote(queue, self.batch) if "promote" in steps else 0
        reaped = 0
        if "reap" in steps:
            keep = self.retention
            reaped = self.jobs.reap(queue, self.batch, max_stalls=self.max_stalls,
                                    dead_ttl_ms=keep.dead_ttl_ms, keep_ms=keep.result_ttl_ms,
                                    dead_max=keep.dead_max)
        minted = self.pump(queue) if self.pump and "pump" in steps else 0
        if promoted or reaped or minted:
            log.debug("queue %s: promoted %d, reaped %d, minted %d",
                      queue, promoted, reaped, minted)
        if reaped:
            log.warning("queue %s: %d expired lease(s) reaped (back to pending, or dead once "
                        "past max_stalls)", queue, reaped)
        return promoted, reaped, minted

    def plan(self, queue: str, nudge: bool = False) -> Plan:
        """Read the horizon of ``queue`` and store this metronome's plan on
        the server (one script; ``nudge`` as :meth:`Jobs.horizon`). Returns
        the :class:`Plan`: beat at once (delay 0) with the steps that are due,
        after re-syncing a lost registry with every step; else sleep until
        the plan, then run the steps due at it (none when the plan is the
        :data:`MAX_SLEEP_S` cap)."""
        sent = time.monotonic()
        horizon = self.jobs.horizon(queue, int(MAX_SLEEP_S * 1000), nudge=nudge)
        answered = time.monotonic()
        if not horizon.synced and self.resync is not None:
            self._resync(queue)
            return Plan(0.0, frozenset(STEPS), now_ms=horizon.now_ms)
        plan_ms = horizon.plan_ms
        steps = frozenset(step for step, head in zip(STEPS, horizon.heads)
                          if head is not None and head <= plan_ms)
        # The sleep runs from the server's reading in microseconds, less the
        # half round trip the reply took (the promote that ends the sleep
        # takes about as long to reach the server): the promote lands at the
        # planned millisecond, not up to 2 ms past it.
        lead_s = min((answered - sent) / 2, MAX_LEAD_S)
        delay_s = (plan_ms * 1000 - horizon.now_us) / 1e6 - lead_s
        return Plan(max(0.0, delay_s), steps, plan_ms <= horizon.now_ms, horizon.now_ms)

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
        steps = frozenset(STEPS)  # The first beat runs every step: whatever came due meanwhile.
        nudged_at = time.monotonic()
        sampled_minute = None
        while not self.stop_event.is_set():
            waker.clear()
            try:
                moved = None
                if steps:
                    promoted, reaped, minted = self.beat(queue, steps)
                    if promoted >= self.batch or reaped >= self.batch:
                        continue  # More are due: beat again at once.
                    moved = promoted or reaped or minted
                nudge = time.monotonic() - nudged_at >= NUDGE_EVERY_S
                plan = self.plan(queue, nudge=nudge)
                if nudge:
                    nudged_at = time.monotonic()
                # Once a server minute: the horizon is read at least every
                # MAX_SLEEP_S (under a minute), so no minute is skipped.
                if plan.now_ms // 60_000 != sampled_minute:
                    self.jobs.sample_latency(queue)
                    sampled_minute = plan.now_ms // 60_000
                self.outage.ok()
                backoff.reset()
            except Exception as err:  # noqa: BLE001 - a lost connection must not stop the beat
                if passing(err):
                    self.outage.failed(err)
                else:
                    log.exception("metronome beat for queue %s failed", queue)
                steps = frozenset(STEPS)
                self.stop_event.wait(backoff.next_s())
                continue
            steps = plan.steps
            delay_s = plan.delay_s
            if plan.due and moved is not None and not moved:
                # Something is due that no beat could move (a broken
                # registry entry): never spin on it.
                delay_s = STUCK_SLEEP_S
            if delay_s > 0 and waker.wait(delay_s):
                steps = frozenset()  # A marker: an earlier instant; read the horizon first.

    def _listen_loop(self, queue: str) -> None:
        # The stop list comes first: BLPOP serves the first key with a
        # marker, so the handoff marker stop() pushes is left to others.
        keys = [self._stop_keys[queue], Keyspace(queue).beat]
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
