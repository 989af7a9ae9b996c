"""JobHandle: what enqueueing a ``@job`` returns, and how to wait for the job.

``handle.job_id``, ``handle.outcome`` ("enqueued", "scheduled", "duplicate"),
``handle.get()`` (the row now), ``handle.wait()`` and ``handle.result()``
(caller-side polling; see docs/protocol.md, "Results and retention").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .. import rules
from ..exceptions import JobFailedError, NoSuchJobError
from ..protocol.jobs import Jobs
from ..protocol.records import JobRow, Outcome

__all__ = ["JobHandle"]


@dataclass(frozen=True)
class JobHandle:
    """What enqueueing returns: the queue, the job id and the admission outcome."""

    queue: str
    job_id: str
    outcome: Outcome

    def get(self) -> JobRow | None:
        """The job's row now (None once a done row has expired)."""
        from ..connection import get_connection

        return Jobs(get_connection()).get(self.queue, self.job_id)

    def wait(self, timeout_s: float = 30.0, poll_s: float = 0.05) -> JobRow:
        """Wait until the job is done, dead or cancelled; return its row.

        Polls the row every ``poll_s`` seconds (a caller-side wait, not a
        worker's) for at most ``timeout_s`` seconds (0: look once). Both are
        ints or floats, finite; ``timeout_s`` >= 0, ``poll_s`` > 0.

        Raises:
            TypeError: ``timeout_s`` or ``poll_s`` is not an int or a float
                (bools included), naming it.
            ValueError: one is NaN, infinite, negative, or ``poll_s`` is 0.
            TimeoutError: the job is still unfinished after ``timeout_s``.
            NoSuchJobError: the row does not exist (never enqueued, or expired).
        """
        timeout_s = rules.check_seconds("timeout_s", timeout_s)
        poll_s = rules.check_seconds("poll_s", poll_s, above_zero=True)
        deadline = time.monotonic() + timeout_s
        while True:
            row = self.get()
            if row is None:
                raise NoSuchJobError(f"job {self.job_id} on queue {self.queue} does not exist")
            if row.state in ("done", "dead", "cancelled"):
                return row
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.job_id} is still {row.state} after {timeout_s} s")
            time.sleep(min(poll_s, max(0.0, deadline - time.monotonic())))

    def result(self, timeout_s: float = 30.0) -> Any:
        """Wait up to ``timeout_s`` seconds for the job (:meth:`wait`) and
        return its JSON return value.

        Raises JobFailedError (with the row) when it ended dead or cancelled;
        TypeError, ValueError, TimeoutError and NoSuchJobError as :meth:`wait`.
        """
        row = self.wait(timeout_s)
        if row.state != "done":
            raise JobFailedError(row)
        return row.result_value
