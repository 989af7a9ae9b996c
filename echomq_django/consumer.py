"""The consumer: claim -> run -> ack, retry or dead, in N threads.

Each thread claims from its queues in the order given (the first queue is
served first), runs the registered handler, and records the outcome through
the atomic scripts of :class:`~echomq_django.jobs.Jobs`:

- the handler returns: ``ack`` (the JSON return value is kept as the result);
- it raises and attempts < max_attempts: ``retry`` after
  ``Backoff.delay_ms(policy, attempts)``;
- it raises on the last attempt: ``dead`` with reason "failed" and the traceback;
- the payload names a job this process did not register, or is not an
  envelope: ``dead`` at once (never an import of an arbitrary module).

Idle threads block on the queues' wake lists (BLPOP), never busy-poll.
Django database connections are reset around each job. See docs/protocol.md
("Consumer") for the outcomes and the shutdown hand-back.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from dataclasses import dataclass

from django.db import close_old_connections

from . import payload, registry
from .backoff import Backoff
from .context import JobContext
from .exceptions import StaleTokenError
from .outcomes import Discard, Retry, Snooze
from .jobs import Claim, Jobs
from .keyspace import Keyspace

log = logging.getLogger("echomq.consumer")

#: How long an idle thread blocks on the wake lists before it re-checks stop.
IDLE_BLOCK_S = 1.0
#: How often a consumer process announces itself (s); the announcement lives 5x this.
ANNOUNCE_S = 2.0
#: Exit code of a consumer process that replaced itself after a time limit.
EXIT_TIMEOUT = 75


@dataclass
class Slot:
    """One thread's running job, as the heartbeat sees it."""

    claim: Claim
    lease_ms: int
    started: float  # time.monotonic() at claim
    timeout_ms: int | None = None
    max_attempts: int = 1
    policy: tuple = ("fixed", 0)
    timed_out: bool = False
    path: str = "?"

    def overdue(self, now: float) -> bool:
        return (self.timeout_ms is not None and not self.timed_out
                and (now - self.started) * 1000 > self.timeout_ms)


@dataclass(frozen=True)
class Retention:
    """How long finished rows are kept (ms) and how many dead letters."""

    result_ttl_ms: int
    dead_ttl_ms: int
    dead_max: int


class Consumer:
    """Run jobs from ``queues`` in ``concurrency`` threads of this process.

    Args:
        conn: a redis-py client.
        queues: queue names, served in order.
        concurrency: threads (>= 1).
        lease_ms: the lease taken at claim; a job's own ``lease_ms`` extends it.
        retention: see :class:`Retention`.
        burst: each thread exits once no queue has a ready job.
        max_jobs: stop claiming after this many jobs in this process (None: no limit).
        stop: set it to stop claiming; running handlers finish.
    """

    def __init__(self, conn, queues, *, concurrency: int, lease_ms: int, retention: Retention,
                 burst: bool = False, max_jobs: int | None = None,
                 stop: threading.Event | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.jobs = Jobs(conn)
        self.conn = conn
        self.queues = list(queues)
        self.wake_keys = [Keyspace(q).wake for q in self.queues]
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.retention = retention
        self.burst = burst
        self.max_jobs = max_jobs
        self.stop = stop or threading.Event()
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self._threads: list[threading.Thread] = []
        # thread ident -> the job that thread runs
        self._slots: dict[int, Slot] = {}
        #: Process mode: replace this process when a job overruns its time limit.
        self.exit_on_timeout = False
        self._lock = threading.Lock()
        self.processed = 0
        self.started_at_ms = int(time.time() * 1000)  # shown to staff only, never compared

    # -- lifecycle -------------------------------------------------------

    def start(self) -> None:
        """Start the threads (daemons: a process that must exit is not held)."""
        for index in range(self.concurrency):
            thread = threading.Thread(target=self._loop, args=(f"{self.name}:{index}",),
                                      name=f"echomq-consumer-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        threading.Thread(target=self._heartbeat_loop, name="echomq-heartbeat",
                         daemon=True).start()

    def alive(self) -> bool:
        """True while any thread runs."""
        return any(t.is_alive() for t in self._threads)

    def busy(self) -> int:
        """How many threads are running a handler now."""
        with self._lock:
            return len(self._slots)

    def shutdown(self, grace_s: float) -> int:
        """Stop claiming, wait up to ``grace_s`` for running handlers, then hand
        every unfinished lease back to pending (``release``). Returns how many
        leases were handed back."""
        self.stop.set()
        deadline = time.monotonic() + grace_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            left = [slot.claim for slot in self._slots.values() if not slot.timed_out]
        released = 0
        for claim in left:
            try:
                state = self.jobs.release(claim.queue, claim.job_id, claim.token,
                                          keep_ms=self.retention.result_ttl_ms)
                released += 1
                if state == "cancelled":
                    log.warning("job %s ended cancelled (a cancel was requested; shutdown "
                                "before it finished)", claim.job_id)
                else:
                    log.warning("job %s handed back to pending (shutdown before it finished)",
                                claim.job_id)
            except StaleTokenError:
                pass  # It finished, or its lease was reaped, in the meantime.
        self._retire()
        return released

    # -- the loop ----------------------------------------------------------

    def _claim_any(self, consumer: str) -> Claim | None:
        for queue in self.queues:
            claim = self.jobs.claim(queue, consumer, self.lease_ms)
            if claim is not None:
                return claim
        return None

    def _take_slot(self) -> bool:
        """Count a job against max_jobs; False once the limit is reached."""
        with self._lock:
            if self.max_jobs is not None and self.processed >= self.max_jobs:
                return False
            self.processed += 1
            if self.max_jobs is not None and self.processed >= self.max_jobs:
                self.stop.set()
            return True

    def _loop(self, consumer: str) -> None:
        while not self.stop.is_set():
            try:
                claim = self._claim_any(consumer)
                if claim is None:
                    if self.burst:
                        return
                    self.conn.blpop(self.wake_keys, timeout=IDLE_BLOCK_S)
                    continue
            except Exception:  # noqa: BLE001 - a lost connection must not kill the thread
                log.exception("claim failed; retrying in 1 s")
                self.stop.wait(1.0)
                continue
            with self._lock:
                self._slots[threading.get_ident()] = Slot(claim, self.lease_ms, time.monotonic())
            try:
                self.run_claim(claim)
            except Exception:  # noqa: BLE001 - a bug of ours (or a lost connection)
                # must not kill the thread: the job ends dead with the reason,
                # or, if even that fails, its lease expires and reap returns it.
                log.exception("job %s: the worker failed around its handler", claim.job_id)
                try:
                    self._finish(claim, "?", time.monotonic(), "dead", reason="worker error",
                                 error=traceback.format_exc())
                except Exception:  # noqa: BLE001
                    log.exception("job %s: could not record the failure", claim.job_id)
            finally:
                with self._lock:
                    self._slots.pop(threading.get_ident(), None)
                if not self._take_slot():
                    return

    def _heartbeat_loop(self) -> None:
        """Renew the lease of every running job a third of the way into it, so
        a handler that outlives its lease is not reaped while it is alive;
        fail jobs that overran their time limit; announce this process every
        ANNOUNCE_S (what the admin lists). A worker that dies (or is paused)
        stops renewing, and reap returns its jobs after the lease."""
        renewed_at = announced_at = 0.0
        while not self.stop.is_set() or self.busy():
            now = time.monotonic()
            with self._lock:
                running = [slot for slot in self._slots.values() if not slot.timed_out]
            for slot in running:
                if slot.overdue(now):
                    self._time_out(slot)
            period_s = min([slot.lease_ms for slot in running] + [self.lease_ms]) / 3000
            if now - renewed_at >= period_s:
                renewed_at = now
                for slot in running:
                    if slot.timed_out:
                        continue
                    try:
                        self.jobs.extend(slot.claim.queue, slot.claim.job_id, slot.claim.token,
                                         slot.lease_ms)
                    except StaleTokenError:
                        pass  # The outcome was recorded meanwhile, or the lease was lost.
                    except Exception:  # noqa: BLE001 - keep beating through a lost connection
                        log.exception("lease renewal for job %s failed", slot.claim.job_id)
            if now - announced_at >= ANNOUNCE_S:
                announced_at = now
                self._announce(len(running))
            wait_s = min(period_s, ANNOUNCE_S) / 2
            for slot in running:
                if slot.timeout_ms is not None and not slot.timed_out:
                    due_s = slot.started + slot.timeout_ms / 1000 - now
                    wait_s = min(wait_s, max(0.0, due_s) + 0.001)
            time.sleep(max(0.005, wait_s))
        self._retire()

    def _time_out(self, slot: Slot) -> None:
        """Fail a job that overran its time limit (reason "timeout"): a retry
        with backoff while attempts remain, else dead. In process mode the
        process then hands its other jobs back and exits, and the supervisor
        starts a new one (the only way to stop a running Python thread); in
        thread mode the handler's thread runs on until it returns or checks
        ``context.cancelled`` (cooperative), and its late outcome is refused."""
        slot.timed_out = True
        claim = slot.claim
        error = f"the handler overran its time limit of {slot.timeout_ms} ms"
        outcome = "dead" if claim.attempts >= slot.max_attempts else "retry"
        delay_ms = 0 if outcome == "dead" else Backoff.delay_ms(slot.policy, claim.attempts)
        self._finish(claim, slot.path, slot.started, outcome, reason="timeout",
                     error=error, delay_ms=delay_ms)
        if self.exit_on_timeout:
            log.error("replacing this consumer process: job %s overran its time limit",
                      claim.job_id)
            self.stop.set()
            with self._lock:
                others = [s.claim for s in self._slots.values() if not s.timed_out]
            for other in others:
                try:
                    self.jobs.release(other.queue, other.job_id, other.token,
                                      keep_ms=self.retention.result_ttl_ms)
                except StaleTokenError:
                    pass
            self._retire()
            logging.shutdown()
            os._exit(EXIT_TIMEOUT)

    def _announce(self, busy: int) -> None:
        try:
            self.jobs.announce(self.name, {
                "host": socket.gethostname(), "pid": os.getpid(),
                "queues": ",".join(self.queues), "concurrency": self.concurrency,
                "busy": busy, "started_at_ms": self.started_at_ms,
            }, self.queues, ttl_ms=int(ANNOUNCE_S * 5000))
        except Exception:  # noqa: BLE001 - the admin's view must never stop the work
            log.exception("announcing this worker failed")

    def _retire(self) -> None:
        try:
            self.jobs.retire(self.name)
        except Exception:  # noqa: BLE001
            log.exception("withdrawing this worker's announcement failed")

    # -- one job -----------------------------------------------------------

    def run_claim(self, claim: Claim) -> str:
        """Run one claimed job and record its outcome; returns the outcome word
        (done, retry, snooze, dead, cancelled, stale)."""
        started = time.monotonic()
        path = "?"
        try:
            path, args, kwargs, extra = payload.decode(claim.payload)
        except ValueError as err:
            return self._finish(claim, path, started, "dead", reason="bad payload", error=str(err))
        fn = registry.lookup(path)
        if fn is None:
            return self._finish(claim, path, started, "dead", reason="unknown job",
                                error=f"no @job registered at {path!r} in this worker")
        max_attempts, policy, _ = fn.effective()
        lease_ms = fn.lease_ms or self.lease_ms
        # The claim took this worker's lease; a job that names its own gets it.
        if lease_ms != self.lease_ms:
            try:
                self.jobs.extend(claim.queue, claim.job_id, claim.token, lease_ms)
            except StaleTokenError:
                return self._finish(claim, path, started, "stale")
        slot = self._slots.get(threading.get_ident())
        if slot is not None:
            slot.lease_ms, slot.timeout_ms = lease_ms, fn.timeout_ms
            slot.max_attempts, slot.policy, slot.path = max_attempts, policy, path
        context = JobContext(self.jobs, claim, lease_ms=lease_ms, snoozes=claim.snoozes,
                             scheduled_for_ms=extra.get("scheduled_for"),
                             missed=extra.get("missed", 0), timeout_ms=fn.timeout_ms,
                             extra=extra)
        if fn.context:
            kwargs = dict(kwargs, context=context)
        close_old_connections()
        try:
            result = fn.fn(*args, **kwargs)
        except Snooze as snooze:
            if slot is not None and slot.timed_out:
                return self._timed_out(claim, path, started)
            return self._finish(claim, path, started, "snooze", delay_ms=snooze.delay_ms)
        except Discard as discard:
            return self._finish(claim, path, started, "dead", reason=discard.reason,
                                error=traceback.format_exc())
        except Exception as err:  # noqa: BLE001 - every handler failure is an outcome
            if slot is not None and slot.timed_out:
                return self._timed_out(claim, path, started)
            error = traceback.format_exc()
            if claim.attempts >= max_attempts:
                return self._finish(claim, path, started, "dead", reason="failed", error=error)
            delay_ms = err.delay_ms if isinstance(err, Retry) and err.delay_ms is not None \
                else Backoff.delay_ms(policy, claim.attempts)
            return self._finish(claim, path, started, "retry", delay_ms=delay_ms, error=error)
        finally:
            close_old_connections()
        if slot is not None and slot.timed_out:
            return self._timed_out(claim, path, started)
        if isinstance(result, Snooze):
            return self._finish(claim, path, started, "snooze", delay_ms=result.delay_ms)
        return self._finish(claim, path, started, "done", result=result)

    def _timed_out(self, claim: Claim, path: str, started: float) -> str:
        log.warning("job %s %s attempt %d returned after its time limit; its outcome was "
                    "already recorded as a timeout [%.1f ms]", claim.job_id, path,
                    claim.attempts, (time.monotonic() - started) * 1000)
        return "timeout"

    def _finish(self, claim: Claim, path: str, started: float, outcome: str, *,
                reason: str = "", error: str = "", delay_ms: int = 0, result=None) -> str:
        detail = ""
        keep_ms = self.retention.result_ttl_ms
        try:
            if outcome == "done":
                try:
                    state = self.jobs.ack(claim.queue, claim.job_id, claim.token, result,
                                          keep_ms=keep_ms)
                except TypeError:
                    log.warning("job %s returned a value that is not JSON; it is not kept",
                                claim.job_id)
                    state = self.jobs.ack(claim.queue, claim.job_id, claim.token, None,
                                          keep_ms=keep_ms)
            elif outcome == "retry":
                state = self.jobs.retry(claim.queue, claim.job_id, claim.token, delay_ms, error,
                                        keep_ms=keep_ms)
                detail = f" in {delay_ms} ms: {_last_line(error)}"
            elif outcome == "snooze":
                state = self.jobs.snooze(claim.queue, claim.job_id, claim.token, delay_ms,
                                         keep_ms=keep_ms)
                detail = f" for {delay_ms} ms"
            elif outcome == "dead":
                state = self.jobs.dead(claim.queue, claim.job_id, claim.token, reason, error,
                                       dead_ttl_ms=self.retention.dead_ttl_ms,
                                       dead_max=self.retention.dead_max, keep_ms=keep_ms)
                detail = f" ({reason}): {_last_line(error)}"
            else:
                state = outcome
            if state == "cancelled":
                outcome, detail = "cancelled", " (a cancel was requested while it ran)"
        except StaleTokenError:
            outcome, detail = "stale", " (the lease was lost: another worker owns the job now)"
        elapsed_ms = (time.monotonic() - started) * 1000
        level = logging.INFO if outcome in ("done", "retry", "snooze", "cancelled") else logging.WARNING
        log.log(level, "job %s %s attempt %d -> %s%s [%.1f ms]", claim.job_id, path,
                claim.attempts, outcome, detail, elapsed_ms)
        return outcome


def _last_line(error: str) -> str:
    lines = [line for line in error.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
