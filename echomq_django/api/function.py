"""JobFunction: a registered job, callable inline and enqueueable on a worker.

What ``@job`` (:mod:`echomq_django.api.decorator`) returns. ``enqueue``,
``enqueue_in`` and ``enqueue_at`` check the arguments (JSON only, and bound to
the function's signature as the worker will call it), mint a ``JOB`` id on
the server's clock (:func:`~echomq_django.protocol.clock.mint_now_ms`) and
admit the job through :class:`~echomq_django.protocol.jobs.Jobs`; each returns
a :class:`~echomq_django.api.handle.JobHandle`.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import inspect
from typing import Any, Callable

from .. import rules
from ..protocol.clock import mint_now_ms
from ..protocol.ids import BrandedId
from ..protocol.jobs import Jobs
from . import backoff as backoff_mod
from . import payload
from .handle import JobHandle

__all__ = ["JobFunction"]


class JobFunction:
    """A registered job. Call it to run inline; ``enqueue*`` to run it on a worker."""

    def __init__(self, fn: Callable, *, queue: str, max_attempts: int | None,
                 backoff: tuple | None, lease_ms: int | None, context: bool,
                 every: Any, cron: str | None, tz: str | None, missed: str,
                 timeout_ms: int | None = None, group: str | None = None,
                 priority: int = 0) -> None:
        if ("<locals>" in fn.__qualname__ or "<lambda>" in fn.__qualname__
                or fn.__module__ == "__main__"):
            raise TypeError(
                f"@job needs a module-level function importable by path, got {fn.__qualname__!r}"
            )
        self.fn = fn
        self.path = f"{fn.__module__}.{fn.__qualname__}"
        self.queue = rules.check_queue_name(queue)
        self.group = rules.check_group(group)
        self.priority = rules.check_priority(priority)
        self.max_attempts = rules.optional_count("max_attempts", max_attempts)
        self.backoff = None if backoff is None else backoff_mod.check_backoff(backoff)
        self.lease_ms = rules.optional_count("lease_ms", lease_ms)
        self.timeout_ms = rules.optional_count("timeout_ms", timeout_ms)
        self.context = rules.check_bool("context", context)
        try:
            # Read once: every enqueue binds its arguments to it.
            self._signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # a callable without one: calls are not checked
            self._signature = None
        if self.context and self._signature is not None:
            try:
                self._signature.bind_partial(context=None)
            except TypeError as err:
                raise TypeError(f"@job(context=True) needs {self.path}() to take a context "
                                f"keyword argument ({err})") from None
        if every is not None and cron is not None:
            raise ValueError("@job takes every or cron, not both")
        if (every is not None or cron is not None) and (self.group is not None or self.priority):
            # A recurring occurrence is admitted to the ungrouped lane at
            # priority 0 (docs/repeat.md, "Lanes"); saying otherwise here
            # would be ignored, so it is refused.
            raise ValueError("@job(every=/cron=) takes no group or priority: recurring "
                             "occurrences run in the queue's ungrouped lane at priority 0")
        self.every_ms = None if every is None else rules.to_ms("every", every, low=1)
        self.cron, self.tz, self.missed = cron, tz, missed
        if tz is not None:
            from ..repeat.cadence import check_tz

            check_tz(tz)  # "" included: only None means the default zone.
        if self.schedule is not None:
            from ..repeat.sync import plan

            # Validate now (bad cron, unknown zone, bad missed): ValueError at
            # import, not at the first runechomq. The default zone is read at
            # sync time, so validate against UTC when none is given.
            plan([dict(self.schedule, tz="UTC" if tz is None else tz)])
            try:
                self.check_arguments((), {})
            except TypeError as err:
                raise TypeError(f"{err}; a recurring @job's occurrences pass no arguments, so "
                                "its parameters need defaults") from None
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.path} queue={self.queue}>"

    # -- settings-backed options ---------------------------------------------

    def effective(self) -> tuple[int, tuple, int]:
        """``(max_attempts, backoff policy, lease_ms)``, settings filling the gaps."""
        from ..conf import get_config

        config = get_config()
        cached = self.__dict__.get("_effective")
        if cached is not None and cached[0] is config:
            return cached[1]
        effective = (self.max_attempts or config.max_attempts,
                     self.backoff or backoff_mod.check_backoff(config.backoff),
                     self.lease_ms or config.lease_ms)
        # Settings are read once per configuration (a changed setting builds a new one).
        self.__dict__["_effective"] = (config, effective)
        return effective

    @property
    def schedule(self) -> dict | None:
        """The recurring declaration for boot-time sync, or None."""
        if self.every_ms is None and self.cron is None:
            return None
        return {"queue": self.queue, "name": self.path, "every_ms": self.every_ms,
                "cron": self.cron, "tz": self.tz, "missed": self.missed,
                "template": {"job": self.path, "args": [], "kwargs": {}}}

    _UNSET: Any = object()

    def using(self, *, queue: str | None = None, group: Any = _UNSET,
              priority: int | None = None) -> "JobFunction":
        """A view of this job that enqueues with other options (same path, the
        rest the same): ``queue`` (the worker serving it runs it), ``group``
        (the job's lane, e.g. a chat id: lanes are served round-robin; None
        for the queue's ungrouped lane) and ``priority`` (-100..100, higher
        first within its lane). docs/protocol.md, "Lanes".

        Raises:
            ValueError, TypeError: a bad queue name, group or priority, naming it.
        """
        clone = copy.copy(self)
        if queue is not None:
            clone.queue = rules.check_queue_name(queue)
        if group is not JobFunction._UNSET:
            clone.group = rules.check_group(group)
        if priority is not None:
            clone.priority = rules.check_priority(priority)
        return clone

    # -- enqueueing ---------------------------------------------------------------

    def check_arguments(self, args: tuple | list, kwargs: dict) -> None:
        """Raise unless the worker's call ``fn(*args, **kwargs)`` (plus
        ``context=`` under ``@job(context=True)``, which the worker passes
        itself) binds to the function's signature. Nothing is called.

        Raises:
            TypeError: naming the function and what is wrong
                (``"app.jobs.f() cannot take these arguments: too many
                positional arguments"``), or ``context`` passed by the caller
                of a ``context=True`` job.
        """
        if self._signature is None:
            return
        if self.context:
            if "context" in kwargs:
                raise TypeError(f"{self.path}() gets context= from the worker "
                                "(@job(context=True)); do not pass it")
            kwargs = dict(kwargs, context=None)
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as err:
            raise TypeError(f"{self.path}() cannot take these arguments: {err}") from None

    def _payload(self, args: tuple, kwargs: dict) -> str:
        from ..conf import get_config

        text = payload.encode(self.path, args, kwargs, get_config().max_payload_bytes)
        self.check_arguments(args, kwargs)
        return text

    def _jobs_and_id(self) -> tuple[Jobs, str]:
        """The :class:`Jobs` on this process's connection and a fresh
        ``JOB`` id minted on that server's clock (protocol.md, "Ordering")."""
        from ..conf import get_config
        from ..connection import get_connection

        conn = get_connection()
        return (Jobs(conn, max_payload_bytes=get_config().max_payload_bytes),
                BrandedId.generate("JOB", mint_now_ms(conn)))

    def enqueue(self, *args: Any, **kwargs: Any) -> JobHandle:
        """Enqueue a run now of ``fn(*args, **kwargs)``. Returns a JobHandle
        (outcome ``"enqueued"``).

        Raises, before anything is written: PayloadError (a TypeError) for an
        argument that is not plain JSON; PayloadTooLargeError (a ValueError)
        over ``MAX_PAYLOAD_BYTES``; TypeError naming the function when the
        arguments do not fit its signature (:meth:`check_arguments`).
        """
        text = self._payload(args, kwargs)
        jobs, job_id = self._jobs_and_id()
        return JobHandle(self.queue, job_id, jobs.enqueue(
            self.queue, job_id, text, group=self.group, priority=self.priority))

    def enqueue_in(self, delay: dt.timedelta | int, *args: Any, **kwargs: Any) -> JobHandle:
        """Enqueue a run ``delay`` from now on the SERVER clock (timedelta or ms >= 0).

        A timedelta is rounded down to whole ms. Raises ValueError for a
        negative delay in any unit (``timedelta(microseconds=-1)`` included);
        TypeError for a delay that is neither; the payload errors of ``enqueue``.
        """
        delay_ms = rules.to_ms("delay", delay, low=0)
        text = self._payload(args, kwargs)
        jobs, job_id = self._jobs_and_id()
        return JobHandle(self.queue, job_id, jobs.enqueue_in(
            self.queue, job_id, text, delay_ms, group=self.group, priority=self.priority))

    def enqueue_at(self, when: dt.datetime | int, *args: Any, **kwargs: Any) -> JobHandle:
        """Enqueue a run at ``when``: an aware datetime, or an int of Unix
        milliseconds from 2000-01-01 (946684800000) to 2**53. A past instant
        means now.

        Raises ValueError for a naive datetime or an instant before 2000 (an
        int that reads as Unix seconds, ``int(time.time())``, is refused as
        such) or past 2**53; TypeError for anything else; the payload errors of
        ``enqueue``.
        """
        run_at_ms = rules.to_run_at_ms("when", when)
        text = self._payload(args, kwargs)
        jobs, job_id = self._jobs_and_id()
        return JobHandle(self.queue, job_id, jobs.enqueue_at(
            self.queue, job_id, text, run_at_ms, group=self.group, priority=self.priority))
