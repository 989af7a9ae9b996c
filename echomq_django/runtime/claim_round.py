"""The fetcher's claim round: up to ``room`` jobs from the consumer's queues,
queue after queue in order, each claim with its queue's batch token.

A queue whose claim fails for a passing reason (its server or, on a cluster,
its node is away) is left out of the rounds for a backoff of its own, and the
round goes on with the next queue: one node down must not stall the queues of
the others. Only a round in which every queue asked failed raises, so that
the fetcher backs off as a whole (docs/protocol.md, "Cluster", "Faults").
"""

from __future__ import annotations

import time

from ..connection.resilience import Backoff, passing
from ..protocol.records import Claim
from ..protocol.tokens import new_token

__all__ = ["ClaimRound"]


class ClaimRound:
    """Claims for one consumer: ``jobs`` (the protocol surface), ``name`` (the
    consumer the leases are taken under), ``lease_ms``, ``queues`` in order.
    Not thread-safe: the fetcher's alone."""

    def __init__(self, jobs, name: str, lease_ms: int, queues: list[str]) -> None:
        self.jobs, self.name, self.lease_ms, self.queues = jobs, name, lease_ms, queues
        self.tokens = {queue: new_token() for queue in queues}
        # queue -> (monotonic time it is asked again, its backoff)
        self._away: dict[str, tuple[float, Backoff]] = {}
        #: The passing error of the last round's failed queues, if any (and
        #: some queue answered): the fetcher reports it and comes back soon.
        self.partial: BaseException | None = None
        #: Seconds until the earliest queue left out is asked again, or None.
        self.retry_s: float | None = None
        #: Whether some queue answered the last round (False when every queue
        #: asked was left out: the round says nothing of the server).
        self.answered = False

    def retire_tokens(self) -> None:
        """New tokens for every queue (after a claim failed for a reason that
        does not pass: such a claim is not repeated)."""
        self.tokens = {queue: new_token() for queue in self.queues}

    def run(self, room: int, claims: list[Claim], queues: list[str] | None = None) -> float | None:
        """Claim up to ``room`` jobs, appending to ``claims`` as each queue
        answers (so a later queue's failure keeps what the earlier ones
        leased). Returns, when a rate limit held work back, how long until a
        token is due (s), else None.

        A token is used for one queue only, and a queue whose claim leased
        jobs gets a fresh one at once. A queue whose claim raised keeps its
        token, so its next claim repeats it and, if the lost reply had leased
        jobs, answers the same leases (docs/protocol.md, "Fencing tokens").

        Raises the error of a claim that failed for a reason that does not
        pass, at once; a passing error only when every queue asked failed.
        """
        wait_s = None
        self.partial, self.retry_s = None, None
        failed: BaseException | None = None
        self.answered = answered = False
        now = time.monotonic()
        for queue in queues or self.queues:
            away = self._away.get(queue)
            if away is not None and away[0] > now:
                self._retry_in(away[0] - now)
                continue
            try:
                got, wait_ms = self.jobs.claim_many(queue, self.name, self.lease_ms,
                                                    room - len(claims), token=self.tokens[queue])
            except Exception as err:  # noqa: BLE001 - sorted just below
                if not passing(err):
                    raise
                failed = err
                backoff = away[1] if away is not None else Backoff()
                delay = backoff.next_s()
                self._away[queue] = (time.monotonic() + delay, backoff)
                self._retry_in(delay)
                continue
            answered = True
            self._away.pop(queue, None)
            if got:
                self.tokens[queue] = new_token()
                claims.extend(got)
            if wait_ms is not None:
                wait_s = wait_ms / 1000 if wait_s is None else min(wait_s, wait_ms / 1000)
            if len(claims) >= room:
                break
        if failed is not None:
            if not answered:
                raise failed
            self.partial = failed
        self.answered = answered
        return wait_s

    def _retry_in(self, delay_s: float) -> None:
        self.retry_s = delay_s if self.retry_s is None else min(self.retry_s, delay_s)
