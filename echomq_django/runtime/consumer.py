"""The consumer: N threads that claim, run and record, and the shutdown hand-back.

Each thread claims from its queues in the order given (the first queue is
served first), runs the job with a :class:`~.outcome.Runner`, and claims
again. Idle threads block on the queues' wake lists (BLPOP), never
busy-poll. A :class:`~.lease_keeper.LeaseKeeper` renews the leases of the
running jobs. On shutdown the threads stop claiming, running handlers get a
grace period, and every unfinished lease is handed back to pending
(docs/protocol.md, "Consumer", "Shutdown").
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time

from ..exceptions import StaleTokenError
from ..protocol.jobs import Jobs
from ..protocol.keyspace import Keyspace
from ..protocol.presence import signal_stop
from ..protocol.records import Claim
from ..protocol.tokens import new_token
from ..rules import check_int
from .lease_keeper import LeaseKeeper
from .slots import Slot, Slots, process_name
from .outcome import Retention, Runner
from ..connection.resilience import Backoff, Outage, passing, persist

__all__ = ["Consumer", "Retention", "EXIT_TIMEOUT", "IDLE_BLOCK_S"]

log = logging.getLogger("echomq.consumer")

#: How long an idle thread blocks on the wake lists before it claims again
#: (a safety net for a lost marker; shutdown wakes it at once).
IDLE_BLOCK_S = 1.0
#: Exit code of a consumer process that replaced itself after a time limit.
EXIT_TIMEOUT = 75
#: How long a shutdown keeps trying to hand an unfinished job back (s).
RELEASE_PERSIST_S = 5.0


class Consumer:
    """Run jobs from ``queues`` in ``concurrency`` threads of this process.

    Args:
        conn: a redis-py client.
        queues: queue names, served in order.
        concurrency: threads (>= 1).
        lease_ms: the lease taken at claim; a job's own ``lease_ms`` extends it.
        retention: see :class:`Retention`.
        burst: each thread exits once no queue has a ready job.
        max_jobs: run exactly this many jobs in this process, then stop (None: no limit).
        stop: set it to stop claiming; running handlers finish.
        outage: the process's view of the server (one log line per outage).

    Raises ValueError for a concurrency below 1.
    """

    def __init__(self, conn, queues, *, concurrency: int, lease_ms: int, retention: Retention,
                 burst: bool = False, max_jobs: int | None = None,
                 stop: threading.Event | None = None, outage: Outage | None = None) -> None:
        check_int("concurrency", concurrency, 1, 10_000)
        self.jobs = Jobs(conn)
        self.conn = conn
        self.queues = list(queues)
        self.name = process_name()
        # Idle threads block on the wake lists and on this process's stop
        # list, which shutdown pushes to, so stopping never waits out a timeout.
        self.stop_key = Keyspace(self.queues[0]).stop(f"{self.name}:{secrets.token_hex(4)}")
        self.wait_keys = [*(Keyspace(q).wake for q in self.queues), self.stop_key]
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.retention = retention
        self.burst = burst
        self.max_jobs = max_jobs
        self.stop = stop or threading.Event()
        self.slots = Slots()
        self.outage = outage or Outage()
        self.runner = Runner(self.jobs, lease_ms=lease_ms, retention=retention, slots=self.slots,
                             outage=self.outage)
        #: Process mode: replace this process when a job overruns its time limit.
        self.exit_on_timeout = False
        self.keeper = LeaseKeeper(self.jobs, self.slots, finish=self.runner.finish,
                                  stop=self.stop, lease_ms=lease_ms, name=self.name,
                                  queues=self.queues, describe=self._describe,
                                  on_timeout=self._on_timeout, outage=self.outage)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.processed = 0
        self._reserved = 0
        #: True once a thread died of an error of ours (the process must exit non-zero).
        self.crashed = False
        self.started_at_ms = int(time.time() * 1000)  # shown to staff only, never compared

    # -- lifecycle -------------------------------------------------------

    def start(self) -> None:
        """Start the threads (daemons: a process that must exit is not held)."""
        for index in range(self.concurrency):
            thread = threading.Thread(target=self._loop, args=(f"{self.name}:{index}",),
                                      name=f"echomq-consumer-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.keeper.start()

    def alive(self) -> bool:
        """True while any thread runs."""
        return any(t.is_alive() for t in self._threads)

    def busy(self) -> int:
        """How many threads are running a handler now."""
        return len(self.slots)

    def run_claim(self, claim: Claim) -> str:
        """Run one claimed job and record its outcome (:meth:`Runner.run_claim`)."""
        return self.runner.run_claim(claim)

    def shutdown(self, grace_s: float) -> int:
        """Stop claiming, wait up to ``grace_s`` for running handlers, then hand
        every unfinished lease back to pending (``release``). Returns how many
        leases were handed back."""
        self.stop.set()
        signal_stop(self.conn, [self.stop_key], self.concurrency)
        deadline = time.monotonic() + grace_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        released = self._release([slot.claim for slot in self.slots.running()])
        self.keeper.retire()
        return released

    def _release(self, claims: list[Claim]) -> int:
        released = 0
        for claim in claims:
            try:
                state = persist(
                    lambda: self.jobs.release(claim.queue, claim.job_id, claim.token,
                                              keep_ms=self.retention.result_ttl_ms),
                    deadline=time.monotonic() + RELEASE_PERSIST_S, outage=self.outage)
                released += 1
                if state == "cancelled":
                    log.warning("job %s ended cancelled (a cancel was requested; shutdown "
                                "before it finished)", claim.job_id)
                else:
                    log.warning("job %s handed back to pending (shutdown before it finished)",
                                claim.job_id)
            except StaleTokenError:
                pass  # It finished, or its lease was reaped, in the meantime.
            except Exception as err:  # noqa: BLE001 - the reaper returns it after the lease
                log.warning("job %s could not be handed back (%s); the reaper returns it when "
                            "its lease runs out", claim.job_id, err)
        return released

    def _describe(self) -> dict:
        return {"host": socket.gethostname(), "pid": os.getpid(),
                "queues": ",".join(self.queues), "concurrency": self.concurrency,
                "started_at_ms": self.started_at_ms}

    def _on_timeout(self, slot: Slot) -> None:
        """In process mode a job that overran its time limit takes its process
        with it (the only way to stop a running Python thread): the other jobs
        are handed back and the supervisor starts a new process. In thread
        mode the handler's thread runs on until it returns or checks
        ``context.cancelled`` (cooperative)."""
        if not self.exit_on_timeout:
            return
        log.error("replacing this consumer process: job %s overran its time limit",
                  slot.claim.job_id)
        self.stop.set()
        self._release([s.claim for s in self.slots.running()])
        self.keeper.retire()
        logging.shutdown()
        os._exit(EXIT_TIMEOUT)

    # -- the loop ----------------------------------------------------------

    def _claim_any(self, consumer: str, token: str) -> Claim | None:
        for queue in self.queues:
            claim = self.jobs.claim(queue, consumer, self.lease_ms, token=token)
            if claim is not None:
                return claim
        return None

    def _reserve(self) -> bool:
        """Reserve one of the max_jobs before claiming; False once they are all
        reserved or run (so a process runs exactly max_jobs)."""
        with self._lock:
            if self.max_jobs is not None and self._reserved >= self.max_jobs:
                return False
            self._reserved += 1
            return True

    def _unreserve(self) -> None:
        with self._lock:
            self._reserved -= 1

    def _done_one(self) -> None:
        with self._lock:
            self.processed += 1
            if self.max_jobs is not None and self.processed >= self.max_jobs:
                self.stop.set()

    def _loop(self, consumer: str) -> None:
        try:
            self._serve(consumer)
        except BaseException:  # noqa: BLE001 - an error of ours escaped the per-job guard
            log.critical("consumer thread %s died; stopping this process", consumer,
                         exc_info=True)
            self.crashed = True
            self.stop.set()

    def _serve(self, consumer: str) -> None:
        backoff = Backoff()
        token = new_token()
        while not self.stop.is_set():
            if not self._reserve():
                return
            try:
                # A claim whose reply was lost is repeated with the same token
                # and answers the same lease, so a dropped connection never
                # strands a job in active until the reaper.
                claim = self._claim_any(consumer, token)
            except Exception as err:  # noqa: BLE001 - a lost server must not kill the thread
                self._unreserve()
                if passing(err):
                    self.outage.failed(err)
                else:
                    log.exception("claim failed")
                    token = new_token()
                self.stop.wait(backoff.next_s())
                continue
            self.outage.ok()
            backoff.reset()
            if claim is None:
                self._unreserve()
                if self.burst:
                    return
                try:
                    self.conn.blpop(self.wait_keys, timeout=IDLE_BLOCK_S)
                except Exception as err:  # noqa: BLE001
                    if not passing(err):
                        raise
                    self.outage.failed(err)
                    self.stop.wait(backoff.next_s())
                continue
            token = new_token()
            self.slots.put(Slot(claim, self.lease_ms, time.monotonic()))
            try:
                self.runner.run_claim(claim)
            except Exception:  # noqa: BLE001 - an error of ours around the handler never
                # makes the job dead: it stays leased and the reaper returns it.
                log.exception("job %s: the worker failed around its handler; the job is left "
                              "for the reaper", claim.job_id)
            finally:
                self.slots.pop()
                self._done_one()
