"""What a running handler may ask about, and do to, its own job.

A handler declared with ``@job(context=True)`` is called with a keyword
argument ``context``: a :class:`JobContext`. Handlers that do not ask for it
do not get it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..connection.resilience import SERVER_ERRORS, Outage, passing, persist
from ..exceptions import StaleTokenError

#: How long a checkpoint (extend, progress) rides out a dropped connection (s).
CHECKPOINT_PERSIST_S = 5.0


class JobContext:
    """The running job.

    Attributes: ``queue``, ``job_id``, ``group`` (its lane, or None),
    ``attempt`` (1 on the first run),
    ``snoozes`` (times the job was snoozed so far), ``token`` (the lease's
    fencing token), ``claimed_at_ms`` (server ms when this attempt was
    claimed: the instant the queue's and lane's limits counted it),
    ``lease_deadline_ms`` (server ms), ``scheduled_for_ms`` and
    ``missed`` (for a recurring occurrence: the slot it stands for and how many
    earlier slots it coalesces; None and 0 otherwise), ``timeout_ms`` (the
    job's time limit or None) and ``extra`` (other envelope keys).
    """

    def __init__(self, jobs, claim, *, lease_ms: int, snoozes: int = 0,
                 scheduled_for_ms: int | None = None, missed: int = 0,
                 timeout_ms: int | None = None, extra: dict | None = None,
                 outage: Outage | None = None,
                 cancel_flag: Callable[[], bool] | None = None) -> None:
        self._jobs = jobs
        self._cancel_flag = cancel_flag
        self._outage = outage or Outage()
        self._lease_ms = lease_ms
        self._started = time.monotonic()
        self._cancelled = False
        self.queue = claim.queue
        self.job_id = claim.job_id
        self.group = claim.group
        self.attempt = claim.attempts
        self.token = claim.token
        self.claimed_at_ms = claim.claimed_at_ms
        self.lease_deadline_ms = claim.lease_deadline_ms
        self.snoozes = snoozes
        self.scheduled_for_ms = scheduled_for_ms
        self.missed = missed
        self.timeout_ms = timeout_ms
        self.extra = extra or {}

    @property
    def cancelled(self) -> bool:
        """True once a cancel was requested for this job (or its time limit
        passed in thread mode). Under runechomq it reads memory: the lease
        keeper's renewal brings the flag, at least every second
        (runtime/lease_keeper.py, CANCEL_CHECK_S). A context built without a
        ``cancel_flag`` reads the server on each check until it is True."""
        if not self._cancelled:
            if self.timeout_ms is not None and self.elapsed_ms() > self.timeout_ms:
                self._cancelled = True
            elif self._cancel_flag is not None:
                self._cancelled = self._cancel_flag()
            else:
                try:
                    self._cancelled = self._jobs.cancel_requested(self.queue, self.job_id)
                except SERVER_ERRORS as err:
                    if not passing(err):
                        raise
                    # Unknown for now (the server is out of reach): the next check sees it.
        return self._cancelled

    def elapsed_ms(self) -> int:
        """Milliseconds since the handler started (a duration, not a time)."""
        return int((time.monotonic() - self._started) * 1000)

    def extend(self, lease_ms: int | None = None) -> int:
        """Checkpoint: push the lease to server now + ``lease_ms`` (default: the
        job's lease). Returns the new deadline (server ms).

        Raises StaleTokenError when this worker no longer holds the lease (the
        handler should stop: another worker owns the job).
        """
        deadline = persist(lambda: self._jobs.extend(self.queue, self.job_id, self.token,
                                                     lease_ms or self._lease_ms),
                           deadline=time.monotonic() + CHECKPOINT_PERSIST_S,
                           outage=self._outage)
        self.lease_deadline_ms = deadline
        return deadline

    def progress(self, percent: int, message: str = "") -> None:
        """Store progress (0..100 and an optional message) on the row, where the
        admin shows it. Also a cancellation check: see :attr:`cancelled`.

        Raises ValueError for a percent outside 0..100; StaleTokenError when
        the lease was lost.
        """
        if persist(lambda: self._jobs.progress(self.queue, self.job_id, self.token, percent,
                                               message),
                   deadline=time.monotonic() + CHECKPOINT_PERSIST_S, outage=self._outage):
            self._cancelled = True

    def __repr__(self) -> str:
        return f"<JobContext {self.queue}/{self.job_id} attempt {self.attempt}>"


__all__ = ["JobContext", "StaleTokenError"]
