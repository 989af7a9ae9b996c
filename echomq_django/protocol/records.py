"""The typed answers of the protocol: what an admission did, a claim, a job row.

Rows are stored as hashes (``emq:{q}:job:<id>``; docs/protocol.md, "Job row");
:meth:`JobRow.from_hash` types them once, here.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Outcome", "Claim", "Finish", "Renewal", "JobRow"]


class Outcome(str, enum.Enum):
    """What an admission did. str-valued: ``Outcome.ENQUEUED == "enqueued"``."""

    ENQUEUED = "enqueued"
    SCHEDULED = "scheduled"
    DUPLICATE = "duplicate"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Claim:
    """A leased job: what ``claim`` returns to the consumer that holds it.

    ``token`` fences every later call for this lease; ``attempts`` counts this
    claim (1 on the first run); times are server ms.
    """

    queue: str
    job_id: str
    token: str
    payload: str
    attempts: int
    lease_deadline_ms: int
    claimed_at_ms: int
    snoozes: int = 0
    #: The job's group (lane), or None.
    group: str | None = None


@dataclass(frozen=True)
class Finish:
    """One outcome for :meth:`Jobs.finish_many <echomq_django.protocol.leases.Leases.finish_many>`.

    ``op`` is ``"ack"`` (``result``: a JSON-serialisable return value, None
    for none), ``"retry"`` (``delay_ms``, ``error``), ``"snooze"``
    (``delay_ms``) or ``"dead"`` (``reason``, non-empty; ``error``), as the
    single calls take them (docs/protocol.md, "finish").
    """

    op: str
    job_id: str
    token: str
    result: Any = None
    delay_ms: int = 0
    reason: str = ""
    error: str = ""


@dataclass(frozen=True)
class Renewal:
    """One lease's answer to ``extend``: its new deadline (server ms) and
    whether a cancel was requested; ``deadline_ms`` None when the token no
    longer holds the lease (``stale`` says why)."""

    deadline_ms: int | None
    cancel_requested: bool
    stale: str


_INT_FIELDS = {
    "attempts", "stalls", "snoozes", "progress", "progress_at_ms", "scheduled_for_ms",
    "enqueued_at_ms", "run_at_ms", "started_at_ms", "finished_at_ms", "failed_at_ms",
    "lease_until_ms", "priority",
}


@dataclass(frozen=True)
class JobRow:
    """A job row as stored (``emq:{q}:job:<id>``), typed.

    ``state`` is one of pending, scheduled, active, done, dead, cancelled. Times are
    server ms or None when the event has not happened. ``extra`` carries any
    field this version does not name.
    """

    queue: str
    job_id: str
    state: str
    payload: str
    attempts: int = 0
    stalls: int = 0
    snoozes: int = 0
    progress: int | None = None
    progress_message: str | None = None
    progress_at_ms: int | None = None
    cancel_requested: str | None = None
    #: The job's group (its lane), None for an ungrouped job.
    group: str | None = None
    #: -100..100, higher served first within its lane.
    priority: int = 0
    repeat: str | None = None
    scheduled_for_ms: int | None = None
    enqueued_at_ms: int | None = None
    run_at_ms: int | None = None
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    failed_at_ms: int | None = None
    lease_until_ms: int | None = None
    consumer: str | None = None
    token: str | None = None
    result: str | None = None
    reason: str | None = None
    last_error: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def result_value(self) -> Any:
        """The decoded JSON return value of a done job (None when there is none)."""
        return json.loads(self.result) if self.result else None

    @classmethod
    def from_hash(cls, queue: str, job_id: str, raw: dict[str, str]) -> "JobRow":
        known = {f for f in cls.__dataclass_fields__ if f not in ("queue", "job_id", "extra")}
        values: dict[str, Any] = {}
        extra: dict[str, str] = {}
        for key, value in raw.items():
            if key in _INT_FIELDS:
                values[key] = int(value)
            elif key in known:
                values[key] = value
            else:
                extra[key] = value
        values.setdefault("state", "unknown")
        values.setdefault("payload", "")
        return cls(queue=queue, job_id=job_id, extra=extra, **values)
