"""The lease keeper: a consumer process's heartbeat.

While handlers run, one thread per consumer process:

- renews the lease of every running job a third of the way into it (and at
  least every :data:`CANCEL_CHECK_S`), so a handler that outlives its lease
  is not reaped while it is alive: one ``extend`` call per queue for all of
  them, which also answers their cancel flags (``context.cancelled`` reads
  them from memory);
- fails a job that overran its ``timeout_ms`` (reason "timeout");
- announces the process (what the admin lists): every :data:`ANNOUNCE_S`
  while it runs jobs or its busy count changed since the last announcement,
  every :data:`IDLE_ANNOUNCE_S` while it idles; an announcement lives
  :data:`ANNOUNCE_TTL_MS`.

A worker that dies (or is paused) stops renewing, and reap returns its jobs
after the lease (docs/protocol.md, "Lease", "Time limit").
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from typing import Callable

from ..api import registry
from ..connection.resilience import Outage, passing
from ..exceptions import JobTimeoutError, class_path
from ..protocol.jobs import Jobs
from ..protocol.presence import Presence
from .outcome import decide_failure
from .slots import Slot, Slots

__all__ = ["ANNOUNCE_S", "ANNOUNCE_TTL_MS", "CANCEL_CHECK_S", "IDLE_ANNOUNCE_S", "LeaseKeeper"]

log = logging.getLogger("echomq.consumer")

#: How often a consumer process that runs jobs announces itself (s).
ANNOUNCE_S = 2.0
#: While jobs run, their leases are renewed at least this often (s): the
#: renewal also reads their cancel flags, so a cancel reaches
#: ``context.cancelled`` within about this long.
CANCEL_CHECK_S = 1.0
#: How often an idle one does (s): an idle queue costs at most 2 server
#: commands a second, the announcement included (docs/protocol.md, "Consumer").
IDLE_ANNOUNCE_S = 10.0
#: How long an announcement lives (ms): three idle announcements, so a
#: process the admin lists is one that announced within this.
ANNOUNCE_TTL_MS = 30_000


#: Called with a slot whose job overran its time limit, after its outcome
#: was recorded: the consumer decides what happens to the process.
OnTimeout = Callable[[Slot], None]


class LeaseKeeper:
    """Renew, time-limit and announce for one consumer process.

    Args:
        jobs: the protocol surface.
        slots: the process's running jobs.
        finish: records a timed-out job's outcome (``Runner.finish``).
        stop: the consumer's stop event; the keeper runs on while jobs remain.
        lease_ms: the lease taken at claim.
        describe: returns the announcement's fields.
        on_timeout: called after a job timed out (see :data:`OnTimeout`).
        outage: the process's view of the server.

    The keeper survives any error: it logs it and keeps renewing.
    """

    def __init__(self, jobs: Jobs, slots: Slots, *, finish, stop: threading.Event,
                 lease_ms: int, name: str, queues: list[str], describe: Callable[[], dict],
                 on_timeout: OnTimeout | None = None, outage: Outage | None = None) -> None:
        self.jobs = jobs
        self.presence = Presence(jobs.conn)
        self.slots = slots
        self.finish = finish
        self.stop = stop
        self.lease_ms = lease_ms
        self.name = name
        self.queues = queues
        self.describe = describe
        self.on_timeout = on_timeout
        self.outage = outage or Outage()

    def start(self) -> threading.Thread:
        """Start the keeper thread (a daemon)."""
        thread = threading.Thread(target=self._loop, name="echomq-heartbeat", daemon=True)
        thread.start()
        return thread

    def _loop(self) -> None:
        self._renewed_at = self._announced_at = 0.0
        self._announced_busy = -1
        while not self.stop.is_set() or len(self.slots):
            try:
                wait_s = self._beat()
            except Exception:  # noqa: BLE001 - the heartbeat never dies: leases depend on it
                log.exception("the lease keeper's beat failed; it goes on")
                wait_s = 0.1
            time.sleep(max(0.005, wait_s))
        self.retire()

    def _beat(self) -> float:
        """Time limits, renewals and the announcement that are due; returns
        how long to sleep (s)."""
        now = time.monotonic()
        running = self.slots.running()
        for slot in running:
            if slot.overdue(now):
                self._time_out(slot)
        period_s = min(min([slot.lease_ms for slot in running] + [self.lease_ms]) / 3000,
                       CANCEL_CHECK_S)
        if now - self._renewed_at >= period_s:
            self._renewed_at = now
            self._renew(running)
        busy = len(running)
        idle = busy == 0 and self._announced_busy == 0
        if now - self._announced_at >= (IDLE_ANNOUNCE_S if idle else ANNOUNCE_S):
            self._announced_at, self._announced_busy = now, busy
            self.announce(busy)
        wait_s = min(period_s, ANNOUNCE_S) / 2
        for slot in running:
            if slot.timeout_ms is not None and not slot.timed_out:
                due_s = slot.started + slot.timeout_ms / 1000 - now
                wait_s = min(wait_s, max(0.0, due_s) + 0.001)
        return wait_s

    def _renew(self, running: list[Slot]) -> None:
        """Renew every running lease, one ``extend`` call per queue, and note
        each job's cancel flag on its slot (what ``context.cancelled`` reads)."""
        by_queue: dict[str, list[Slot]] = {}
        for slot in running:
            if not slot.timed_out and not slot.freed:
                by_queue.setdefault(slot.claim.queue, []).append(slot)
        for queue, slots in by_queue.items():
            try:
                renewals = self.jobs.extend_many(
                    queue, [(s.claim.job_id, s.claim.token, s.lease_ms) for s in slots])
                self.outage.ok()
            except Exception as err:  # noqa: BLE001 - keep beating through a lost connection
                if passing(err):
                    self.outage.failed(err)
                else:
                    log.exception("lease renewal for queue %s failed", queue)
                continue
            for slot, renewal in zip(slots, renewals):
                # A stale one was recorded meanwhile, or its lease was lost.
                if renewal.cancel_requested:
                    slot.cancel_requested = True

    def _time_out(self, slot: Slot) -> None:
        """Fail a job that overran its time limit (reason "timeout"): a retry
        with backoff while attempts remain, else dead. The handler's thread
        runs on (Python cannot stop a thread); its late outcome is refused."""
        slot.timed_out = True
        claim = slot.claim
        err = JobTimeoutError(f"the handler overran its time limit of {slot.timeout_ms} ms")
        outcome, delay_ms = decide_failure(registry.lookup(slot.path), err, claim,
                                           slot.max_attempts, slot.policy)
        self.finish(claim, slot.path, slot.started, outcome, reason="timeout",
                    error="".join(traceback.format_exception_only(err)), delay_ms=delay_ms,
                    error_class=class_path(err))
        if self.on_timeout is not None:
            self.on_timeout(slot)

    def announce(self, busy: int) -> None:
        """Announce this process (never raises: the admin's view must never
        stop the work)."""
        try:
            self.presence.announce(self.name, dict(self.describe(), busy=busy), self.queues,
                                   ttl_ms=ANNOUNCE_TTL_MS)
        except Exception as err:  # noqa: BLE001
            if passing(err):
                self.outage.failed(err)
            else:
                log.exception("announcing this worker failed")

    def retire(self) -> None:
        """Withdraw this process's announcement (never raises)."""
        try:
            self.presence.retire(self.name)
        except Exception as err:  # noqa: BLE001
            if not passing(err):
                log.exception("withdrawing this worker's announcement failed")
