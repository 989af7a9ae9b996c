"""What a running handler may ask about its own job.

A handler declared with ``@job(context=True)`` is called with a keyword
argument ``context``: a :class:`JobContext`. Handlers that do not ask for it
do not get it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class JobContext:
    """The running job: ids, attempt number (1 on the first run) and, for a
    recurring occurrence, the slot it stands for (``scheduled_for_ms``) and how
    many missed slots it coalesces (``missed``)."""

    queue: str
    job_id: str
    attempt: int
    token: str
    lease_deadline_ms: int
    scheduled_for_ms: int | None = None
    missed: int = 0
    extra: dict = field(default_factory=dict)
