"""``@job``: turn a module-level function into an EchoMQ job.

Usage::

    from echomq_django import job

    @job(queue="mail", max_attempts=6, backoff=Backoff.exponential(1000, 60_000, jitter=True))
    def send_welcome(user_id: int) -> None: ...

    send_welcome.enqueue(42)                        # pending now
    send_welcome.enqueue_in(timedelta(minutes=5), 42)
    send_welcome.enqueue_at(aware_datetime, 42)     # or Unix ms
    send_welcome(42)                                # still runs inline

Options (None means the ``ECHOMQ`` setting of the same name): ``queue``
["default"], ``max_attempts`` [MAX_ATTEMPTS], ``backoff`` [BACKOFF],
``lease_ms`` [LEASE_MS], ``context`` [False: pass ``context=JobContext``],
``timeout_ms`` [None: no time limit; see docs/protocol.md, "Time limit"].
Recurring schedules: ``every`` (timedelta or ms) or ``cron`` (with ``tz``),
``missed`` ["coalesce"]; see docs/repeat.md.

Errors: TypeError at decoration for a function that is not module-level or
for bad options; at enqueue, PayloadError (TypeError) for non-JSON arguments
and PayloadTooLargeError (ValueError) over MAX_PAYLOAD_BYTES, both before
anything is written.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import time
from dataclasses import dataclass
from typing import Any, Callable

from . import backoff as backoff_mod
from . import payload, registry
from .exceptions import JobFailedError, NoSuchJobError
from .ids import BrandedId
from .jobs import Jobs, JobRow, Outcome
from .keyspace import validate_queue_name


def _ms(name: str, value: object) -> int:
    if isinstance(value, dt.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"{name} must be a timedelta or an int of ms, got {type(value).__name__}")


def _optional_count(name: str, value: object) -> int | None:
    """None, or an int >= 1: TypeError for another type, ValueError below 1."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int >= 1, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value}")
    return value


def _run_at_ms(when: object) -> int:
    if isinstance(when, dt.datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError("enqueue_at needs a timezone-aware datetime (or Unix ms)")
        return int(when.timestamp() * 1000)
    if isinstance(when, int) and not isinstance(when, bool):
        return when
    raise TypeError(f"when must be an aware datetime or an int of Unix ms, got {type(when).__name__}")


@dataclass(frozen=True)
class JobHandle:
    """What enqueueing returns: the queue, the job id and the admission outcome."""

    queue: str
    job_id: str
    outcome: Outcome

    def get(self) -> JobRow | None:
        """The job's row now (None once a done row has expired)."""
        from .connection import get_connection

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


class JobFunction:
    """A registered job. Call it to run inline; ``enqueue*`` to run it on a worker."""

    def __init__(self, fn: Callable, *, queue: str, max_attempts: int | None,
                 backoff: tuple | None, lease_ms: int | None, context: bool,
                 every: Any, cron: str | None, tz: str | None, missed: str,
                 timeout_ms: int | None = None) -> None:
        if ("<locals>" in fn.__qualname__ or "<lambda>" in fn.__qualname__
                or fn.__module__ == "__main__"):
            raise TypeError(
                f"@job needs a module-level function importable by path, got {fn.__qualname__!r}"
            )
        self.fn = fn
        self.path = f"{fn.__module__}.{fn.__qualname__}"
        self.queue = validate_queue_name(queue)
        self.max_attempts = _optional_count("max_attempts", max_attempts)
        self.backoff = None if backoff is None else backoff_mod.validate(backoff)
        self.lease_ms = _optional_count("lease_ms", lease_ms)
        self.timeout_ms = _optional_count("timeout_ms", timeout_ms)
        self.context = bool(context)
        if every is not None and cron is not None:
            raise ValueError("@job takes every or cron, not both")
        self.every_ms = None if every is None else _ms("every", every)
        if self.every_ms is not None and self.every_ms <= 0:
            raise ValueError(f"every must be > 0 ms, got {self.every_ms}")
        self.cron, self.tz, self.missed = cron, tz, missed
        if self.schedule is not None:
            from .repeat import plan

            # Validate now (bad cron, unknown zone, bad missed): ValueError at
            # import, not at the first runechomq. The default zone is read at
            # sync time, so validate against UTC when none is given.
            plan([dict(self.schedule, tz=tz or "UTC")])
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.path} queue={self.queue}>"

    # -- settings-backed options ---------------------------------------------

    def effective(self) -> tuple[int, tuple, int]:
        """``(max_attempts, backoff policy, lease_ms)``, settings filling the gaps."""
        from .conf import get_config

        config = get_config()
        return (self.max_attempts or config.max_attempts,
                self.backoff or backoff_mod.validate(config.backoff),
                self.lease_ms or config.lease_ms)

    @property
    def schedule(self) -> dict | None:
        """The recurring declaration for boot-time sync, or None."""
        if self.every_ms is None and self.cron is None:
            return None
        return {"queue": self.queue, "name": self.path, "every_ms": self.every_ms,
                "cron": self.cron, "tz": self.tz, "missed": self.missed,
                "template": {"job": self.path, "args": [], "kwargs": {}}}

    def using(self, *, queue: str) -> "JobFunction":
        """A view of this job that enqueues onto ``queue`` instead (same path,
        same options); the worker serving ``queue`` runs it.

        Raises:
            ValueError: ``queue`` is not a valid queue name.
        """
        clone = copy.copy(self)
        clone.queue = validate_queue_name(queue)
        return clone

    # -- enqueueing ---------------------------------------------------------------

    def _payload(self, args: tuple, kwargs: dict) -> str:
        from .conf import get_config

        return payload.encode(self.path, args, kwargs, get_config().max_payload_bytes)

    def _jobs(self) -> Jobs:
        from .conf import get_config
        from .connection import get_connection

        return Jobs(get_connection(), max_payload_bytes=get_config().max_payload_bytes)

    def enqueue(self, *args: Any, **kwargs: Any) -> JobHandle:
        """Enqueue a run now. Returns a JobHandle (outcome ``"enqueued"``)."""
        text = self._payload(args, kwargs)
        job_id = BrandedId.generate("JOB")
        return JobHandle(self.queue, job_id, self._jobs().enqueue(self.queue, job_id, text))

    def enqueue_in(self, delay: dt.timedelta | int, *args: Any, **kwargs: Any) -> JobHandle:
        """Enqueue a run ``delay`` from now on the SERVER clock (timedelta or ms >= 0)."""
        delay_ms = _ms("delay", delay)
        if delay_ms < 0:
            raise ValueError(f"delay must be >= 0 ms, got {delay_ms}")
        text = self._payload(args, kwargs)
        job_id = BrandedId.generate("JOB")
        return JobHandle(self.queue, job_id,
                         self._jobs().enqueue_in(self.queue, job_id, text, delay_ms))

    def enqueue_at(self, when: dt.datetime | int, *args: Any, **kwargs: Any) -> JobHandle:
        """Enqueue a run at ``when`` (an aware datetime or Unix ms); past means now."""
        run_at_ms = _run_at_ms(when)
        if not 0 <= run_at_ms <= 2**53:
            raise ValueError(f"when must be within 0..2**53 Unix ms, got {run_at_ms}")
        text = self._payload(args, kwargs)
        job_id = BrandedId.generate("JOB")
        return JobHandle(self.queue, job_id,
                         self._jobs().enqueue_at(self.queue, job_id, text, run_at_ms))


def job(fn: Callable | None = None, *, queue: str = "default", max_attempts: int | None = None,
        backoff: tuple | None = None, lease_ms: int | None = None, context: bool = False,
        every: dt.timedelta | int | None = None, cron: str | None = None, tz: str | None = None,
        missed: str = "coalesce", timeout_ms: int | None = None):
    """Register a module-level function as a job (see the module doc). Usable bare
    (``@job``) or with options (``@job(queue="mail")``)."""

    def wrap(func: Callable) -> JobFunction:
        jf = JobFunction(func, queue=queue, max_attempts=max_attempts, backoff=backoff,
                         lease_ms=lease_ms, context=context, every=every, cron=cron, tz=tz,
                         missed=missed, timeout_ms=timeout_ms)
        registry.register(jf)
        return jf

    return wrap(fn) if fn is not None else wrap
