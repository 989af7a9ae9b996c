"""JobHandle: what enqueueing a ``@job`` returns, and how to wait for the job.

``handle.job_id``, ``handle.outcome`` ("enqueued", "scheduled", "duplicate"),
``handle.get()`` (the row now), ``handle.wait()`` and ``handle.result()``
(caller-side polling; see docs/protocol.md, "Results and retention").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

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

        Polls the row every ``poll_s`` (a caller-side wait, not a worker's).
        Raises TimeoutError after ``timeout_s``; NoSuchJobError when the row
        does not exist (never enqueued, or expired).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            row = self.get()
            if row is None:
                raise NoSuchJobError(f"job {self.job_id} on queue {self.queue} does not exist")
            if row.state in ("done", "dead", "cancelled"):
                return row
            if time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.job_id} is still {row.state} after {timeout_s} s")
            time.sleep(poll_s)

    def result(self, timeout_s: float = 30.0) -> Any:
        """Wait for the job and return its JSON return value.

        Raises JobFailedError (with the row) when it ended dead or cancelled;
        TimeoutError and NoSuchJobError as :meth:`wait`.
        """
        row = self.wait(timeout_s)
        if row.state != "done":
            raise JobFailedError(row)
        return row.result_value
