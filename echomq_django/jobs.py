"""The protocol surface: enqueue, schedule, promote, claim, ack, retry, dead, reap.

``Jobs(conn)`` wraps a redis-py client. Each method is one atomic Lua script
(``lua/<name>.lua``) that reads time from the server; the caller's clock is
never sent. Arguments are checked here first, so bad input raises before
anything is written. The contract (keys, scripts, states) is
``docs/protocol.md``; the surfaces mirror seed 001 (``EchoMQ.Jobs``).
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from typing import Any

from . import scripts
from .exceptions import PayloadTooLargeError
from . import keyspace
from .keyspace import STATS_TTL_MS, Keyspace

MAX_MS = 2**53
#: Defaults the consumer overrides from settings (docs/protocol.md, "Retention").
DEFAULT_KEEP_MS = 86_400_000
DEFAULT_DEAD_TTL_MS = 604_800_000
DEFAULT_DEAD_MAX = 10_000
DEFAULT_MAX_STALLS = 1
#: Most wake markers kept on ``emq:{q}:wake``.
WAKE_CAP = 100
#: The default largest payload (bytes of UTF-8), as ECHOMQ["MAX_PAYLOAD_BYTES"].
DEFAULT_MAX_PAYLOAD_BYTES = 524_288


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


_INT_FIELDS = {
    "attempts", "stalls", "snoozes", "progress", "progress_at_ms", "scheduled_for_ms", "enqueued_at_ms", "run_at_ms", "started_at_ms",
    "finished_at_ms", "failed_at_ms", "lease_until_ms",
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


def _check_int(name: str, value: object, low: int, high: int = MAX_MS) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in {low}..{high}, got {value}")
    return value


def _check_str(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{name} must be a non-empty str, got {value!r}")
    return value


_JOB_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")


def _check_job_id(job_id: object) -> str:
    """A job id is 1-200 characters of [A-Za-z0-9._-]; the JOB gate is the script's."""
    if not isinstance(job_id, str):
        raise TypeError(f"job_id must be a str, got {type(job_id).__name__}")
    if not _JOB_ID.fullmatch(job_id):
        raise ValueError(f"job_id must be 1-200 characters of [A-Za-z0-9._-], got {job_id!r}")
    return job_id


def _no_constant(name: str) -> None:
    raise ValueError(f"JSON has no {name}")


def _check_payload(payload: object, max_bytes: int) -> str:
    if not isinstance(payload, str):
        raise TypeError(f"payload must be JSON text (str), got {type(payload).__name__}")
    size = len(payload.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise PayloadTooLargeError(f"payload is {size} bytes; the limit is {max_bytes}")
    try:
        json.loads(payload, parse_constant=_no_constant)
    except ValueError as err:
        raise ValueError(f"payload must be valid JSON text: {err}") from None
    return payload


class Jobs:
    """The EchoMQ job protocol on one connection. Thread-safe as redis-py is.

    Every method validates its arguments first (ValueError or TypeError naming
    the argument, nothing written) and runs one atomic script. Payloads larger
    than ``max_payload_bytes`` raise PayloadTooLargeError (a ValueError).
    """

    def __init__(self, conn, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> None:
        self.conn = conn
        self.max_payload_bytes = _check_int("max_payload_bytes", max_payload_bytes, 1)

    # -- admission -------------------------------------------------------

    def enqueue(self, queue: str, job_id: str, payload: str) -> Outcome:
        """Admit ``job_id`` to ``pending`` (protocol.md, "enqueue").

        Returns ``"enqueued"``, or ``"duplicate"`` when the row exists (nothing
        changes). Raises KindError for a non-JOB id; ValueError for a bad queue
        name, a job id that is not 1-200 characters of ``[A-Za-z0-9._-]``, or a
        payload that is not JSON (NaN and Infinity included);
        PayloadTooLargeError over the size limit; TypeError for non-str arguments.
        """
        ks = Keyspace(queue)
        _check_job_id(job_id)
        _check_payload(payload, self.max_payload_bytes)
        done = scripts.run(self.conn, "enqueue", [ks.job(job_id), ks.pending, ks.wake],
                           [job_id, payload, WAKE_CAP])
        return Outcome.ENQUEUED if done == 1 else Outcome.DUPLICATE

    def enqueue_at(self, queue: str, job_id: str, payload: str, run_at_ms: int) -> Outcome:
        """Admit ``job_id`` to ``schedule`` at the absolute Unix ms ``run_at_ms``.

        A run-at in the past is due at once. Returns ``"scheduled"`` or
        ``"duplicate"``. Raises KindError for a non-JOB id; ValueError for
        ``run_at_ms`` outside 0..2**53 (protocol.md, "schedule").
        """
        return self._schedule(queue, job_id, payload, "at",
                              _check_int("run_at_ms", run_at_ms, 0))

    def enqueue_in(self, queue: str, job_id: str, payload: str, delay_ms: int) -> Outcome:
        """Admit ``job_id`` to ``schedule`` at SERVER now + ``delay_ms``.

        Returns ``"scheduled"`` or ``"duplicate"``. Raises KindError for a
        non-JOB id; ValueError for a negative ``delay_ms`` (protocol.md,
        "schedule").
        """
        return self._schedule(queue, job_id, payload, "in",
                              _check_int("delay_ms", delay_ms, 0))

    def _schedule(self, queue, job_id, payload, mode, value) -> Outcome:
        ks = Keyspace(queue)
        _check_job_id(job_id)
        _check_payload(payload, self.max_payload_bytes)
        done = scripts.run(self.conn, "schedule", [ks.job(job_id), ks.schedule, ks.beat],
                           [job_id, payload, mode, value])
        return Outcome.SCHEDULED if done == 1 else Outcome.DUPLICATE

    # -- the metronome's work --------------------------------------------

    def promote(self, queue: str, batch: int = 1000) -> int:
        """Move up to ``batch`` due jobs from ``schedule`` to ``pending``; return the count."""
        ks = Keyspace(queue)
        _check_int("batch", batch, 1, 100_000)
        return scripts.run(self.conn, "promote", [ks.schedule, ks.pending, ks.wake],
                           [ks.base, batch, WAKE_CAP])

    def reap(self, queue: str, batch: int = 1000, max_stalls: int = DEFAULT_MAX_STALLS,
             dead_ttl_ms: int = DEFAULT_DEAD_TTL_MS, keep_ms: int = DEFAULT_KEEP_MS) -> int:
        """Handle up to ``batch`` expired leases; return how many.

        Each one's ``stalls`` goes up by one and its token is dropped (the old
        holder can no longer ack, retry, snooze, extend or dead it). It goes
        back to ``pending``, or dead with reason ``"stalled"`` once its stalls
        exceed ``max_stalls``; a job whose cancel was requested ends
        ``cancelled`` (kept ``keep_ms``) instead (protocol.md, "reap").
        """
        ks = Keyspace(queue)
        _check_int("batch", batch, 1, 100_000)
        _check_int("max_stalls", max_stalls, 0, 1_000_000)
        _check_int("dead_ttl_ms", dead_ttl_ms, 1)
        _check_int("keep_ms", keep_ms, 1)
        return scripts.run(self.conn, "reap", [ks.active, ks.pending, ks.wake, ks.dead],
                           [ks.base, batch, WAKE_CAP, max_stalls, dead_ttl_ms, STATS_TTL_MS,
                            keep_ms])

    def horizon(self, queue: str) -> tuple[int, int | None]:
        """Return ``(server_now_ms, next_ms)``: the earliest head of schedule,
        active (lease deadlines) and repeat, or None when all three are empty."""
        ks = Keyspace(queue)
        now, next_ms = scripts.run(self.conn, "horizon", [ks.schedule, ks.active, ks.repeat], [])
        return int(now), (None if int(next_ms) == -1 else int(next_ms))

    # -- a consumer's work -----------------------------------------------

    def claim(self, queue: str, consumer: str, lease_ms: int) -> Claim | None:
        """Pop the oldest pending job and lease it for ``lease_ms`` (server clock).

        Returns a :class:`Claim` (fresh fencing token, attempts + 1) or None when
        ``pending`` is empty.
        """
        ks = Keyspace(queue)
        _check_str("consumer", consumer)
        _check_int("lease_ms", lease_ms, 1)
        reply = scripts.run(self.conn, "claim", [ks.pending, ks.active, ks.token, ks.wake, ks.beat, ks.paused],
                            [ks.base, consumer, lease_ms, WAKE_CAP])
        if reply is None:
            return None
        job_id, token, payload, attempts, deadline, now, snoozes = reply
        return Claim(queue, job_id, token, payload, int(attempts), int(deadline), int(now),
                     int(snoozes))

    def ack(self, queue: str, job_id: str, token: str, result: Any = None,
            keep_ms: int = DEFAULT_KEEP_MS) -> str:
        """Complete the job held by ``token``; keep the row ``keep_ms``, then expire it.

        ``result`` must be JSON-serialisable (stored as JSON text). Returns
        ``"done"``, or ``"cancelled"`` when a cancel was requested while it ran
        (protocol.md, "ack"). Raises StaleTokenError when ``token`` no longer
        holds the lease (nothing changes); TypeError for a non-JSON result.
        """
        ks = Keyspace(queue)
        text = "" if result is None else _to_json("result", result)
        _check_int("keep_ms", keep_ms, 1)
        _, state = scripts.run(self.conn, "ack", [ks.job(job_id), ks.active],
                               [job_id, _check_str("token", token), text, keep_ms, ks.base,
                                STATS_TTL_MS])
        return state

    def retry(self, queue: str, job_id: str, token: str, delay_ms: int, error: str = "",
              keep_ms: int = DEFAULT_KEEP_MS) -> str:
        """Re-park the job held by ``token`` on ``schedule`` at server now + ``delay_ms``.

        Returns ``"scheduled"``, or ``"cancelled"`` when a cancel was requested
        while it ran (kept ``keep_ms``). Raises StaleTokenError when ``token``
        no longer holds the lease (nothing changes).
        """
        ks = Keyspace(queue)
        _check_int("delay_ms", delay_ms, 0)
        _check_int("keep_ms", keep_ms, 1)
        _, state = scripts.run(
            self.conn, "retry", [ks.job(job_id), ks.active, ks.schedule, ks.beat],
            [job_id, _check_str("token", token), delay_ms, str(error), ks.base, STATS_TTL_MS,
             keep_ms])
        return state

    def snooze(self, queue: str, job_id: str, token: str, delay_ms: int,
               keep_ms: int = DEFAULT_KEEP_MS) -> str:
        """Put the job held by ``token`` back on ``schedule`` at server now +
        ``delay_ms`` without spending an attempt (seed 002's ``Jobs.delay``):
        ``attempts`` goes back down, ``snoozes`` up.

        Returns ``"scheduled"`` or ``"cancelled"``. Raises StaleTokenError when
        ``token`` no longer holds the lease (nothing changes).
        """
        ks = Keyspace(queue)
        _check_int("delay_ms", delay_ms, 0)
        _check_int("keep_ms", keep_ms, 1)
        _, state = scripts.run(self.conn, "snooze",
                               [ks.job(job_id), ks.active, ks.schedule, ks.beat],
                               [job_id, _check_str("token", token), delay_ms, keep_ms])
        return state

    #: The seed's name for snooze.
    delay = snooze

    def progress(self, queue: str, job_id: str, token: str, percent: int,
                 message: str = "") -> bool:
        """Store a running job's progress (``percent`` 0..100, optional message).

        Returns True when a cancel has been requested for the job. Raises
        StaleTokenError when ``token`` no longer holds the lease; ValueError
        for a percent outside 0..100.
        """
        ks = Keyspace(queue)
        _check_int("percent", percent, 0, 100)
        if not isinstance(message, str):
            raise TypeError(f"message must be a str, got {type(message).__name__}")
        return scripts.run(self.conn, "progress", [ks.job(job_id)],
                           [job_id, _check_str("token", token), percent, message]) == 1

    def cancel_requested(self, queue: str, job_id: str) -> bool:
        """True when a cancel was requested for the (running) job."""
        return scripts.decode(self.conn.hget(Keyspace(queue).job(job_id),
                                             "cancel_requested")) == "1"

    def dead(self, queue: str, job_id: str, token: str, reason: str, error: str = "",
             dead_ttl_ms: int = DEFAULT_DEAD_TTL_MS, dead_max: int = DEFAULT_DEAD_MAX,
             keep_ms: int = DEFAULT_KEEP_MS) -> str:
        """End the job held by ``token`` in the dead-letter set with ``reason``.

        Dead letters are kept ``dead_ttl_ms`` and at most ``dead_max`` of them
        (the oldest go first). Returns ``"dead"``, or ``"cancelled"`` when a
        cancel was requested while it ran. Raises StaleTokenError when
        ``token`` no longer holds the lease.
        """
        ks = Keyspace(queue)
        _check_int("dead_ttl_ms", dead_ttl_ms, 1)
        _check_int("dead_max", dead_max, 1)
        _check_int("keep_ms", keep_ms, 1)
        _, state = scripts.run(
            self.conn, "dead", [ks.job(job_id), ks.active, ks.dead],
            [job_id, _check_str("token", token), _check_str("reason", reason), str(error),
             ks.base, dead_ttl_ms, dead_max, STATS_TTL_MS, keep_ms])
        return state

    def extend(self, queue: str, job_id: str, token: str, lease_ms: int) -> int:
        """Push the lease held by ``token`` to server now + ``lease_ms``.

        Returns the new deadline (server ms). Raises StaleTokenError when
        ``token`` no longer holds the lease (nothing changes).
        """
        ks = Keyspace(queue)
        _check_int("lease_ms", lease_ms, 1)
        return scripts.run(self.conn, "extend", [ks.job(job_id), ks.active, ks.beat],
                           [job_id, _check_str("token", token), lease_ms])

    def release(self, queue: str, job_id: str, token: str,
                keep_ms: int = DEFAULT_KEEP_MS) -> str:
        """Hand the job held by ``token`` back to ``pending``, giving back its attempt.

        Used by a worker that shuts down before the handler finished. Returns
        ``"pending"``, or ``"cancelled"`` when a cancel was requested (the job
        ends cancelled, kept ``keep_ms``, instead of running again). Raises
        StaleTokenError when ``token`` no longer holds the lease.
        """
        ks = Keyspace(queue)
        _check_int("keep_ms", keep_ms, 1)
        code = scripts.run(self.conn, "release", [ks.job(job_id), ks.active, ks.pending, ks.wake],
                           [job_id, _check_str("token", token), WAKE_CAP, keep_ms])
        return "cancelled" if int(code) == 2 else "pending"

    # -- control -----------------------------------------------------------

    def cancel(self, queue: str, job_id: str, keep_ms: int = DEFAULT_KEEP_MS) -> str:
        """Cancel a job (docs/protocol.md, "cancel").

        Returns ``"cancelled"`` (it was pending or scheduled: it left its set
        and never runs), ``"flagged"`` (it is running: its handler sees
        ``context.cancelled`` and the job ends cancelled) or ``"finished"``
        (done, dead or cancelled already: nothing changes). Raises
        NoSuchJobError when the row does not exist.
        """
        ks = Keyspace(queue)
        _check_int("keep_ms", keep_ms, 1)
        code = scripts.run(self.conn, "cancel", [ks.job(_check_str("job_id", job_id)), ks.pending,
                                                  ks.schedule], [job_id, keep_ms])
        return {1: "cancelled", 2: "flagged", 0: "finished"}[int(code)]

    def pause(self, queue: str) -> bool:
        """Stop consumers claiming from ``queue`` (the metronome keeps promoting).
        Returns False when it was already paused."""
        return scripts.run(self.conn, "pause", [Keyspace(queue).paused], []) == 1

    def resume(self, queue: str) -> bool:
        """Let consumers claim from ``queue`` again. Returns False when it was not paused."""
        ks = Keyspace(queue)
        return scripts.run(self.conn, "resume", [ks.paused, ks.pending, ks.wake], [WAKE_CAP]) == 1

    def is_paused(self, queue: str) -> bool:
        """True while ``queue`` is paused."""
        return bool(self.conn.exists(Keyspace(queue).paused))

    def announce(self, worker_id: str, fields: dict, queues: list[str], ttl_ms: int) -> int:
        """Record that runechomq process ``worker_id`` is alive (see keyspace.WORKERS).

        ``fields`` is a flat dict of str/int values. Returns the server time (ms).
        """
        for q in queues:
            keyspace.validate_queue_name(q)
        return scripts.run(self.conn, "announce",
                           [keyspace.WORKERS, keyspace.worker(worker_id), keyspace.QUEUES],
                           [worker_id, _check_int("ttl_ms", ttl_ms, 1),
                            json.dumps(fields), json.dumps(list(queues))])

    def retire(self, worker_id: str) -> None:
        """Withdraw process ``worker_id``'s announcement."""
        scripts.run(self.conn, "retire", [keyspace.WORKERS, keyspace.worker(worker_id)],
                    [worker_id])

    # -- reads -----------------------------------------------------------

    def get(self, queue: str, job_id: str) -> JobRow | None:
        """Return the job's row, or None when it does not exist (or has expired)."""
        ks = Keyspace(queue)
        raw = self.conn.hgetall(ks.job(_check_str("job_id", job_id)))
        if not raw:
            return None
        row = {scripts.decode(k): scripts.decode(v) for k, v in raw.items()}
        return JobRow.from_hash(queue, job_id, row)

def _to_json(name: str, value: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be JSON-serialisable: {err}") from None
