"""The typed answers of the protocol: what an admission did, a claim, a job row.

Rows are stored as hashes (``emq:{q}:job:<id>``; docs/protocol.md, "The job
row"); :func:`decode_row` reads one back (the payload's chunks joined) and
:meth:`JobRow.from_hash` types it, here.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["Outcome", "Claim", "Finish", "Renewal", "JobRow", "AttemptError", "PAYLOAD_FIELDS",
           "decode_row", "CheckedPayload"]

#: The row fields that hold a job's payload, in order (lua/includes/payload.lua
#: writes them): ``payload`` alone, or the payload's chunks in ``payload``,
#: ``payload.2``, ... ``payload.9`` (docs/protocol.md, "The job row").
PAYLOAD_FIELDS = ("payload",) + tuple(f"payload.{i}" for i in range(2, 10))
_CHUNK_FIELDS = frozenset(PAYLOAD_FIELDS[1:])


def _text(value: Any) -> Any:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def decode_row(raw: Mapping) -> dict[str, str]:
    """A job row as HGETALL returns it (bytes or str) as a dict of str, with
    the payload's chunks joined into one ``payload`` (the chunk fields are
    gone). Chunks are joined as the bytes they are before the whole is
    decoded, so a chunk's edge can never cut a character, whoever wrote the
    row. The one place Python rebuilds a payload from a row; an empty row is
    an empty dict. Raises UnicodeDecodeError for a value that is not UTF-8."""
    row: dict[str, Any] = {}
    chunks: dict[str, Any] = {}
    for key, value in raw.items():
        key = _text(key)
        if key in _CHUNK_FIELDS:
            chunks[key] = value
        else:
            row[key] = value
    if chunks and "payload" in row:
        parts = [row["payload"]]
        for name in PAYLOAD_FIELDS[1:]:
            if name not in chunks:
                break
            parts.append(chunks[name])
        row["payload"] = (b"" if isinstance(parts[0], bytes) else "").join(parts)
    return {key: _text(value) for key, value in row.items()}


class CheckedPayload(str):
    """JSON text that has passed the payload rule already (what
    :func:`echomq_django.rules.check_payload_text` checks, within the size
    limit of the :class:`~echomq_django.protocol.jobs.Jobs` it is given to):
    ``Jobs`` takes it without parsing it again. The ``@job`` envelope
    (:func:`echomq_django.api.payload.encode`) is one. Making one checks
    nothing, so make one only of text that was checked; the scripts still
    refuse text that is not JSON."""

    __slots__ = ()


class Outcome(str, enum.Enum):
    """What an admission did. str-valued: ``Outcome.ENQUEUED == "enqueued"``."""

    ENQUEUED = "enqueued"
    SCHEDULED = "scheduled"
    DUPLICATE = "duplicate"
    #: Not on the bus yet: sent when the caller's transaction commits, or
    #: written to the outbox (docs/durability.md).
    DEFERRED = "deferred"

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
    single calls take them (docs/protocol.md, "finish"). A retry or dead may
    name the error's class (``error_class``, a dotted path such as
    ``"builtins.ValueError"``), kept with the attempt's error.
    """

    op: str
    job_id: str
    token: str
    result: Any = None
    delay_ms: int = 0
    reason: str = ""
    error: str = ""
    #: ack: the result already encoded by ``rules.json_text`` (the caller
    #: checked it), used in place of ``result`` so it is encoded once.
    result_text: str | None = None
    error_class: str = ""


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
    "lease_until_ms", "priority", "first_started_at_ms",
}
#: Per-attempt fields ("The job row"): ``worker.<n>``, ``error.<n>``,
#: ``error_class.<n>``, gathered into JobRow.workers and JobRow.errors.
_ATTEMPT_FIELDS = ("worker.", "error.", "error_class.")


@dataclass(frozen=True)
class AttemptError:
    """One failed attempt's error, as kept on the row: the attempt (from 1),
    the exception's class path (``"builtins.ValueError"``; ``""`` when the
    failure was recorded without one) and the traceback text."""

    attempt: int
    error_class: str
    traceback: str


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
    #: When attempt 1 began (started_at_ms is the last attempt's start).
    first_started_at_ms: int | None = None
    #: Who ran each attempt, in order (``workers[0]`` ran attempt 1; ``""``
    #: for an attempt whose worker is not recorded).
    workers: tuple[str, ...] = ()
    #: Every failed attempt's error, in attempt order.
    errors: tuple[AttemptError, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def result_value(self) -> Any:
        """The decoded JSON return value of a done job (None when there is none)."""
        return json.loads(self.result) if self.result else None

    @classmethod
    def from_hash(cls, queue: str, job_id: str, raw: Mapping) -> "JobRow":
        """The row of ``job_id`` from its HGETALL reply (bytes or str;
        :func:`decode_row` joins the payload). Absent fields take their
        defaults (``attempts`` 0: a job never claimed has none stored)."""
        raw = decode_row(raw)
        known = {f for f in cls.__dataclass_fields__
                 if f not in ("queue", "job_id", "extra", "workers", "errors")}
        values: dict[str, Any] = {}
        extra: dict[str, str] = {}
        attempt_fields: dict[tuple[str, int], str] = {}
        for key, value in raw.items():
            if key in _INT_FIELDS:
                values[key] = int(value)
            elif key in known:
                values[key] = value
            elif key.startswith(_ATTEMPT_FIELDS) and key.rpartition(".")[2].isdigit():
                name, _, number = key.rpartition(".")
                attempt_fields[name, int(number)] = value
            else:
                extra[key] = value
        values.setdefault("state", "unknown")
        values.setdefault("payload", "")
        if attempt_fields:
            values["workers"], values["errors"] = _attempts(attempt_fields)
        return cls(queue=queue, job_id=job_id, extra=extra, **values)


def _attempts(fields: dict[tuple[str, int], str]) -> tuple[tuple[str, ...],
                                                         tuple[AttemptError, ...]]:
    """The per-attempt fields gathered: workers by attempt and the errors."""
    ran = [n for name, n in fields if name == "worker"]
    workers = tuple(fields.get(("worker", n), "") for n in range(1, max(ran, default=0) + 1))
    errors = tuple(AttemptError(n, fields.get(("error_class", n), ""), fields[name, n])
                   for name, n in sorted(fields, key=lambda f: f[1]) if name == "error")
    return workers, errors
