"""The finisher: a consumer process's outcomes go to the server several per call,
and each call claims the next jobs (docs/protocol.md, "finish", "Consumer").

Handler threads hand their outcome to :meth:`Finisher.record` and wait for it
to be recorded. The first thread to arrive while no call is in flight sends,
in one ``jobs/finish`` per queue, every outcome waiting at that moment (its
own and those of threads that finished meanwhile), and asks the same call for
as many new jobs as that frees (a combining send: no thread of its own, no
hop at concurrency 1, and the busier the process, the more outcomes ride one
call). While fewer outcomes wait than handlers are running a job, the sender
lingers up to :data:`LINGER_S` for theirs, so a call carries about one
outcome per handler. The threads whose outcomes it carried are woken with their answers
(and the jobs claimed for them); a thread that arrives during a send waits,
and the first of those is woken to send next. Each waiting thread blocks on
a lock of its own, so a wake-up is never spurious.

Only the consumer's first queue (the one it serves first) claims in a finish:
a process serving several queues must not take more of a later queue while
an earlier one has work, so its other queues are claimed by the fetcher, in
order, as before. A finish is repeated through a dropped connection until the
earliest lease of its outcomes runs out (:func:`~..connection.resilience.persist`);
a repeat answers the same (each outcome replays, the batch token answers its
leases).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..connection.resilience import Outage, persist
from ..exceptions import StaleTokenError
from ..protocol.records import Claim, Finish
from ..protocol.tokens import new_token
from .slots import Slot

__all__ = ["Finisher", "Hooks", "LINGER_S"]

#: The longest a finish waits for the other running handlers' outcomes (s).
LINGER_S = 0.0003


@dataclass
class Hooks:
    """How a finisher keeps the consumer's books (both thread-safe).

    ``reserve(queue, freeing)``: how many jobs a finish on ``queue`` may
    claim, counting the ``freeing`` handlers whose outcomes it records as
    free, reserved (0: none). ``settled(freed, reserved, claimed, rest)``:
    after the call (gone through or not), ``freed`` handlers' jobs are over,
    ``reserved`` were reserved and ``claimed`` came; those handlers took one
    each (``Slot.next_claim``), ``rest`` are for the hand-off queue.
    """

    reserve: Callable[[str, int], int] = lambda queue, freeing: 0
    #: How many handlers are running a job now (their outcomes may come soon).
    running: Callable[[], int] = lambda: 0
    settled: Callable[[int, int, int, list[Claim]], None] = \
        lambda freed, reserved, claimed, rest: None


@dataclass
class _Request:
    claim: Claim
    finish: Finish
    deadline: float
    slot: Slot | None
    state: str | None = None
    error: BaseException | None = None
    done: bool = False
    #: Held while the request waits for a sender (None: its thread sends).
    lock: threading.Lock | None = None


class Finisher:
    """Record outcomes for a consumer's threads, several per call.

    Args:
        jobs: the protocol surface.
        consumer: the name new leases are claimed under.
        lease_ms: the lease new claims take.
        keep: ``(keep_ms, dead_ttl_ms, dead_max)``, the consumer's retention.
        hooks: see :class:`Hooks` (the defaults claim nothing).
        outage: the process's view of the server.
    """

    def __init__(self, jobs, *, consumer: str, lease_ms: int, keep: tuple[int, int, int],
                 hooks: Hooks | None = None, outage: Outage | None = None) -> None:
        self.jobs = jobs
        self.consumer = consumer
        self.lease_ms = lease_ms
        self.keep_ms, self.dead_ttl_ms, self.dead_max = keep
        self.hooks = hooks or Hooks()
        self.outage = outage or Outage()
        self._mutex = threading.Lock()
        self._arrived = threading.Condition(self._mutex)
        self._waiting: list[_Request] = []
        self._sending = False

    def record(self, claim: Claim, finish: Finish, *, lease_s: float,
               slot: Slot | None = None) -> str:
        """Record ``finish`` for ``claim``; returns its state (done, scheduled,
        dead, cancelled).

        ``lease_s``: how long to keep trying through a lost connection.
        ``slot``: the calling handler's slot, freed once the outcome is
        recorded (None from a thread that does not run the job, such as the
        lease keeper timing it out).

        Raises StaleTokenError when the lease was lost; redis.RedisError when
        the server stayed out of reach for ``lease_s``; ValueError or
        TypeError for a malformed outcome (a caller bug).
        """
        request = _Request(claim, finish, time.monotonic() + lease_s, slot)
        with self._mutex:
            self._waiting.append(request)
            if self._sending:
                request.lock = threading.Lock()
                request.lock.acquire()
                self._arrived.notify()
            else:
                self._sending = True
                self._linger()
        if request.lock is not None:
            # Released once answered, or to make this thread the next sender.
            request.lock.acquire()
            if request.done:
                return _answer(request)
        self._send_waiting()
        return _answer(request)

    def _linger(self) -> None:
        """(Holding the mutex, about to send.) Wait up to LINGER_S for the
        outcomes of the other running handlers, so that one call carries
        them: at concurrency c with short jobs, about c outcomes a call
        instead of alternating 1 and c - 1."""
        deadline = None
        while len(self._waiting) < self.hooks.running():
            now = time.monotonic()
            deadline = deadline or now + LINGER_S
            if now >= deadline:
                return
            self._arrived.wait(deadline - now)

    def _send_waiting(self) -> None:
        """Send every waiting outcome, wake their threads with the answers, and
        hand the sender's role to the first outcome that arrived meanwhile
        (each wake-up is for a thread that has something to do)."""
        with self._mutex:
            batch, self._waiting = self._waiting, []
        try:
            self._send(batch)
        finally:
            with self._mutex:
                for request in batch:
                    request.done = True
                after = self._waiting[0] if self._waiting else None
                if after is None:
                    self._sending = False
            for request in batch:
                if request.lock is not None:
                    request.lock.release()
            if after is not None:
                after.lock.release()

    def _send(self, batch: list[_Request]) -> None:
        by_queue: dict[str, list[_Request]] = {}
        for request in batch:
            by_queue.setdefault(request.claim.queue, []).append(request)
        for queue, requests in by_queue.items():
            try:
                self._send_queue(queue, requests)
            except BaseException as err:  # noqa: BLE001 - every waiter gets its answer
                for request in requests:
                    if request.state is None:
                        request.error = err

    def _send_queue(self, queue: str, requests: list[_Request]) -> None:
        freeing = [r.slot for r in requests if r.slot is not None and not r.slot.freed]
        count = self.hooks.reserve(queue, len(freeing)) if freeing else 0
        token = new_token()

        def call():
            return self.jobs.finish_many(
                queue, [r.finish for r in requests], consumer=self.consumer,
                lease_ms=self.lease_ms, count=min(count, 1000), token=token,
                keep_ms=self.keep_ms, dead_ttl_ms=self.dead_ttl_ms, dead_max=self.dead_max)

        claims: list[Claim] = []
        try:
            states, claims, _ = persist(call, deadline=min(r.deadline for r in requests),
                                        outage=self.outage)
        finally:
            # Books first, whether or not the call went through: a freed slot
            # is free (an unrecorded job is the reaper's). The new jobs go
            # straight to the handlers whose outcomes freed their slots (each
            # runs its next job with no queue in between), in claim order;
            # any others to the hand-off queue.
            claimed = len(claims)
            for slot in freeing:
                slot.freed = True
                if claims:
                    slot.next_claim = claims.pop(0)
            self.hooks.settled(len(freeing), count, claimed, claims)
        for request, state in zip(requests, states):
            request.state = state


def _answer(request: _Request) -> str:
    if request.error is not None:
        raise request.error
    if request.state == "stale":
        raise StaleTokenError("the token no longer holds the lease")
    return request.state
