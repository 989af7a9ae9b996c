"""The consumer: N handler threads, the finisher that records their outcomes and
fetches their next jobs, a fetcher for the rest, and the shutdown hand-back.

A handler's outcome goes through the :class:`~.finisher.Finisher` (one call
records it and claims the next job). The fetcher claims what room remains, in
queue order, and otherwise blocks on the wake lists (BLPOP) or until the next
rate-limit token: it never busy-polls. A :class:`~.lease_keeper.LeaseKeeper`
renews the leases. On shutdown, unstarted jobs go back at once, running ones
after a grace period (docs/protocol.md, "Consumer", "Shutdown").
"""
from __future__ import annotations

import logging
import os
import queue as queue_mod
import secrets
import socket
import threading
import time

from ..connection.resilience import Backoff, Outage, passing, persist
from ..protocol.jobs import Jobs
from ..protocol.records import Claim
from ..rules import check_int
from . import observe
from .books import Books
from .claim_round import ClaimRound
from .finisher import Finisher, Hooks
from .lease_keeper import LeaseKeeper
from .outcome import Retention, Runner
from .slots import Slot, Slots, process_name
from .wake import WakeLists

__all__ = ["Consumer", "Retention", "EXIT_TIMEOUT", "IDLE_BLOCK_S", "MAX_CONCURRENCY"]

log = logging.getLogger("echomq.consumer")

#: An idle fetcher's longest single block on the wake lists (capped under the
#: socket timeout, connection.block_timeout_s); it then blocks again, never
#: claiming on a timer (the metronome's horizon re-pushes a lost marker).
IDLE_BLOCK_S = 30.0
#: How late a blocking command's timeout may fire: the server checks them on
#: its cron, every 1000/hz ms (hz 10 by default). A wait for a rate-limit
#: token blocks until this much before the token is due and sleeps the rest
#: locally, so a 34 ms token is not taken 100 ms late.
SERVER_TICK_S = 0.1
#: Exit code of a consumer process that replaced itself after a time limit.
EXIT_TIMEOUT = 75
#: How long a shutdown keeps trying to hand an unfinished job back (s).
RELEASE_PERSIST_S = 5.0
#: The most handler threads one consumer process runs.
MAX_CONCURRENCY = 10_000


class Consumer:
    """Run jobs from ``queues`` in ``concurrency`` handler threads of this process.

    Args:
        conn: a redis-py client.
        queues: queue names, served in order.
        concurrency: handler threads (1..10000).
        lease_ms: the lease taken at claim; a job's own ``lease_ms`` extends it.
        retention: see :class:`Retention`.
        burst: stop once nothing is ready and nothing runs (work a rate
            limit holds back is waited for).
        max_jobs: run exactly this many jobs in this process, then stop (None: no limit).
        stop: set it to stop claiming; running handlers finish.
        outage: the process's view of the server (one log line per outage).

    Raises TypeError or ValueError for a bad concurrency.
    """

    def __init__(self, conn, queues, *, concurrency: int, lease_ms: int, retention: Retention,
                 burst: bool = False, max_jobs: int | None = None,
                 stop: threading.Event | None = None, outage: Outage | None = None) -> None:
        check_int("concurrency", concurrency, 1, MAX_CONCURRENCY)
        self.jobs = Jobs(conn)
        self.conn = conn
        self.queues = list(queues)
        self.name = process_name()
        self.concurrency = concurrency
        self.lease_ms = lease_ms
        self.retention = retention
        self.burst = burst
        self.max_jobs = max_jobs
        self.stop = stop or threading.Event()
        self.slots = Slots()
        self.outage = outage or Outage()
        # The idle fetcher blocks on the wake lists and on stop lists of this
        # process's own, which shutdown pushes to (runtime/wake.py).
        self.wake = WakeLists(conn, self.queues, f"{self.name}:{secrets.token_hex(4)}",
                              stop=self.stop, outage=self.outage, idle_block_s=IDLE_BLOCK_S)
        self.finisher = Finisher(
            self.jobs, consumer=self.name, lease_ms=lease_ms, outage=self.outage,
            keep=(retention.result_ttl_ms, retention.dead_ttl_ms, retention.dead_max),
            hooks=Hooks(reserve=self._reserve_on_finish, settled=self._settled_by_finish,
                        running=self.slots.__len__))
        self.runner = Runner(self.jobs, lease_ms=lease_ms, retention=retention, slots=self.slots,
                             outage=self.outage, finisher=self.finisher)
        #: Process mode: replace this process when a job overruns its time limit.
        self.exit_on_timeout = False
        self.keeper = LeaseKeeper(self.jobs, self.slots, finish=self.runner.finish,
                                  stop=self.stop, lease_ms=lease_ms, name=self.name,
                                  queues=self.queues, describe=self._describe,
                                  on_timeout=self._on_timeout, outage=self.outage)
        self._handoff: queue_mod.Queue[Claim | None] = queue_mod.Queue()
        self.books = Books(concurrency, max_jobs, self.stop)
        self._fetcher: threading.Thread | None = None
        self._handlers: list[threading.Thread] = []
        #: True once a thread died of an error of ours (the process must exit non-zero).
        self.crashed = False
        self.started_at_ms = int(time.time() * 1000)  # shown to staff only, never compared

    # -- lifecycle -------------------------------------------------------

    def start(self) -> None:
        """Start the fetcher, the handler threads and the lease keeper (daemons:
        a process that must exit is not held)."""
        for index in range(self.concurrency):
            thread = threading.Thread(target=self._guard, args=(self._handle,),
                                      name=f"echomq-handler-{index}", daemon=True)
            thread.start()
            self._handlers.append(thread)
        self._fetcher = threading.Thread(target=self._guard, args=(self._fetch,),
                                         name="echomq-fetcher", daemon=True)
        self._fetcher.start()
        self.keeper.start()
        observe.worker(self, stopping=False)

    def alive(self) -> bool:
        """True while the fetcher or any handler thread runs."""
        return any(t.is_alive() for t in [self._fetcher, *self._handlers] if t is not None)

    @property
    def processed(self) -> int:
        """Jobs this consumer ran to an outcome."""
        return self.books.processed

    def run_claim(self, claim: Claim) -> str:
        """Run one claimed job and record its outcome (:meth:`Runner.run_claim`)."""
        return self.runner.run_claim(claim)

    def shutdown(self, grace_s: float) -> int:
        """Stop claiming, hand back at once the jobs claimed but not started,
        wait up to ``grace_s`` for running handlers, then hand every unfinished
        lease back to pending (``release``). Returns how many leases were
        handed back. Sends ``worker_stopping`` first."""
        observe.worker(self, stopping=True)
        self.stop.set()
        self.books.freed.set()
        self.wake.signal_stop()
        released = self._release(self._drain_handoff())
        self._end_handlers()
        deadline = time.monotonic() + grace_s
        for thread in [self._fetcher, *self._handlers]:
            if thread is not None:
                thread.join(max(0.0, deadline - time.monotonic()))
        # Running jobs, and jobs a claim or finish in flight at the stop
        # handed off after the first drain, go back too.
        released += self._release([slot.claim for slot in self.slots.running()]
                                  + self._drain_handoff())
        self.keeper.retire()
        return released

    def _drain_handoff(self) -> list[Claim]:
        claims = []
        while True:
            try:
                claim = self._handoff.get_nowait()
            except queue_mod.Empty:
                return claims
            if claim is not None:
                claims.append(claim)
                self.books.done_one(counted=False)

    def _end_handlers(self) -> None:
        for _ in self._handlers:
            self._handoff.put(None)

    def _release(self, claims: list[Claim]) -> int:
        """Hand ``claims`` back to pending, one release call per queue."""
        by_queue: dict[str, list[Claim]] = {}
        for claim in claims:
            by_queue.setdefault(claim.queue, []).append(claim)
        released = 0
        for queue, held in by_queue.items():
            try:
                states = persist(
                    lambda: self.jobs.release_many(queue, [(c.job_id, c.token) for c in held],
                                                   keep_ms=self.retention.result_ttl_ms),
                    deadline=time.monotonic() + RELEASE_PERSIST_S, outage=self.outage)
            except Exception as err:  # noqa: BLE001 - the reaper returns them after the lease
                log.warning("%d job(s) of queue %s could not be handed back (%s); the reaper "
                            "returns them when their leases run out", len(held), queue, err)
                continue
            for claim, state in zip(held, states):
                if state == "cancelled":
                    released += 1
                    log.warning("job %s ended cancelled (a cancel was requested; shutdown "
                                "before it finished)", claim.job_id)
                elif state == "pending":
                    released += 1
                    log.warning("job %s handed back to pending (shutdown before it finished)",
                                claim.job_id)
                # Else stale: it finished, or its lease was reaped, in the meantime.
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
        self._release(self._drain_handoff() + [s.claim for s in self.slots.running()])
        self.keeper.retire()
        logging.shutdown()
        os._exit(EXIT_TIMEOUT)

    def _guard(self, body) -> None:
        try:
            body()
        except BaseException:  # noqa: BLE001 - an error of ours escaped the per-job guard
            log.critical("consumer thread %s died; stopping this process",
                         threading.current_thread().name, exc_info=True)
            self.crashed = True
            self.stop.set()
            self._end_handlers()

    # -- the fetcher -------------------------------------------------------

    def _reserve_on_finish(self, queue: str, freeing: int) -> int:
        """Room a finish on ``queue`` claims (reserved), its ``freeing``
        handlers counted free: the first queue only, none once stopping."""
        if queue != self.queues[0] or self.stop.is_set():
            return 0
        return self.books.reserve(freeing)

    def _settled_by_finish(self, freed: int, reserved: int, claimed: int,
                           rest: list[Claim]) -> None:
        """After a finish (:meth:`Books.settled`); ``rest`` goes to the hand-off queue."""
        self._hand_off(rest)
        self.books.settled(freed, reserved, claimed)

    def _fetch(self) -> None:
        backoff = Backoff()
        rounds = ClaimRound(self.jobs, self.name, self.lease_ms, self.queues)
        # After a wake marker, only the queue that pushed it is claimed (the
        # others had nothing a moment ago; their own markers wake us for them).
        woken: str | None = None
        try:
            while not self.stop.is_set():
                room = self.books.reserve()
                if room == 0:
                    self.books.freed.wait(0.5 if self.books.at_limit() else IDLE_BLOCK_S)
                    self.books.freed.clear()
                    continue
                claims: list[Claim] = []
                queues, woken = ([woken] if woken else self.queues), None
                try:
                    wait_s = rounds.run(room, claims, queues)
                except Exception as err:  # noqa: BLE001 - a lost server must not kill the fetcher
                    self.books.unreserve(room - len(claims))
                    self._hand_off(claims)
                    if passing(err):
                        self.outage.failed(err)
                    else:
                        log.exception("claim failed")
                        # Such a claim is not repeated, so its token is
                        # retired rather than left for another claim.
                        rounds.retire_tokens()
                    self.stop.wait(backoff.next_s())
                    continue
                if rounds.partial is not None:
                    self.outage.failed(rounds.partial)   # a node away, the others not
                elif rounds.answered:   # (not when every queue was left out)
                    self.outage.ok()
                    backoff.reset()
                if rounds.retry_s is not None:   # come back for the queues left out
                    wait_s = rounds.retry_s if wait_s is None else min(wait_s, rounds.retry_s)
                self.books.unreserve(room - len(claims))
                if claims:
                    self._hand_off(claims)
                    # (A repeated claim answers every lease its token holds:
                    # more than room when finishes took room meanwhile.)
                    if len(claims) >= room or self.burst:
                        continue
                    # Short of room: every queue asked ran out of ready work.
                    # Block now rather than claim again for nothing: work
                    # that comes meanwhile leaves a marker on its wake list.
                # Burst mode ends when nothing is ready and nothing runs; work
                # a rate limit holds back (wait_s) is waited for, not left.
                elif self.burst and wait_s is None:
                    if self.books.idle():
                        return
                    self.books.freed.wait(0.05)
                    self.books.freed.clear()
                    continue
                woken = self._wait_for_work(wait_s, backoff)
        finally:
            self.stop.set()
            self._end_handlers()

    def _hand_off(self, claims: list[Claim]) -> None:
        for claim in claims:
            self._handoff.put(claim)

    def _wait_for_work(self, wait_s: float | None, backoff: Backoff) -> str | None:
        """Block until a wake marker, the stop list, or the next token (a
        duration from the claim's server reading). Without a token to wait
        for, a block that times out (IDLE_BLOCK_S, capped under the socket
        timeout) blocks again, with no claim in between. The last
        SERVER_TICK_S before a token is slept locally; a longer wait returns
        to the claim loop, which blocks again. Returns the queue whose wake
        marker ended the wait, else None."""
        timeout = IDLE_BLOCK_S if wait_s is None else min(IDLE_BLOCK_S, wait_s - SERVER_TICK_S)
        started = time.monotonic()
        try:
            woken, queue = False, None
            if wait_s is None:
                while not woken and not self.stop.is_set():
                    woken, queue = self.wake.wait(timeout)
            elif timeout > 0:
                woken, queue = self.wake.wait(timeout)
            if woken:
                return queue
            if wait_s is None:
                return None
        except Exception as err:  # noqa: BLE001
            if not passing(err):
                raise
            self.outage.failed(err)
            self.stop.wait(backoff.next_s())
            return None
        # Sleep locally only through the last tick before the token; a
        # longer wait goes back to claim and block again (a wake marker may
        # come meanwhile: other lanes' work must not wait for this token).
        left = wait_s + 0.001 - (time.monotonic() - started)
        if 0 < left <= SERVER_TICK_S + 0.05:
            self.stop.wait(left)
        return None

    # -- the handlers ------------------------------------------------------

    def _handle(self) -> None:
        claim: Claim | None = None
        while True:
            claim = claim or self._handoff.get()
            if claim is None:
                return
            slot = Slot(claim, self.lease_ms, time.monotonic())
            self.slots.put(slot)
            try:
                self.runner.run_claim(claim)
            except Exception:  # noqa: BLE001 - an error of ours around the handler never
                # makes the job dead: it stays leased and the reaper returns it.
                log.exception("job %s: the worker failed around its handler; the job is left "
                              "for the reaper", claim.job_id)
            finally:
                self.slots.pop()
                if not slot.freed:  # the finisher counted it when it recorded the outcome
                    slot.freed = True
                    self.books.done_one()
                claim = slot.next_claim
