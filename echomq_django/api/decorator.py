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
``timeout_ms`` [None: no time limit; see docs/protocol.md, "Time limit"],
``group`` [None: the queue's ungrouped lane] and ``priority`` [0, -100..100,
higher first within its lane] (docs/protocol.md, "Lanes"; per call:
``send.using(group="chat-7", priority=10).enqueue(...)``).
Recurring schedules: ``every`` (timedelta or ms) or ``cron`` (with ``tz``, an
IANA zone name [None: settings.TIME_ZONE at sync]), ``missed`` ["coalesce"];
see docs/repeat.md. Occurrences run in the ungrouped lane at priority 0, so a
recurring job takes no ``group`` or ``priority`` (ValueError).

Errors: at decoration, TypeError for a function that is not module-level,
for ``context=True`` on a function without a ``context`` keyword parameter,
and for a recurring job (``every``/``cron``) whose function cannot be called
without arguments (its occurrences pass none; the same mistake in
``ECHOMQ["SCHEDULES"]``, a template whose args/kwargs do not fit, is the
system check ``echomq.E014``); TypeError or ValueError naming the option for a
bad one (a ``tz`` that names no zone, ``""`` included, raises ValueError here,
not when runechomq boots): ``max_attempts``, ``lease_ms`` and ``timeout_ms``
are None or ints in 1..2**53, ``backoff`` a policy whose ms are at most 2**53
(:func:`~echomq_django.api.backoff.check_backoff`), ``context`` a bool, and
``queue`` a str (TypeError otherwise) of the queue-name rule. At enqueue,
before anything is written: PayloadError (TypeError) for non-JSON arguments,
ValueError naming where a str holds a lone surrogate, PayloadTooLargeError
(ValueError) over MAX_PAYLOAD_BYTES, and TypeError naming the function for
arguments that do not bind to its signature (``f.enqueue("a", "b")`` for ``def
f(x)``), which would otherwise fail every attempt until the job is dead.
"""

from __future__ import annotations

import datetime as dt
from typing import Callable

from . import registry
from .function import JobFunction

__all__ = ["job"]


def job(fn: Callable | None = None, *, queue: str = "default", max_attempts: int | None = None,
        backoff: tuple | None = None, lease_ms: int | None = None, context: bool = False,
        every: dt.timedelta | int | None = None, cron: str | None = None, tz: str | None = None,
        missed: str = "coalesce", timeout_ms: int | None = None, group: str | None = None,
        priority: int = 0):
    """Register a module-level function as a job (see the module doc). Usable bare
    (``@job``) or with options (``@job(queue="mail")``)."""

    def wrap(func: Callable) -> JobFunction:
        jf = JobFunction(func, queue=queue, max_attempts=max_attempts, backoff=backoff,
                         lease_ms=lease_ms, context=context, every=every, cron=cron, tz=tz,
                         missed=missed, timeout_ms=timeout_ms, group=group, priority=priority)
        registry.register(jf)
        return jf

    return wrap(fn) if fn is not None else wrap
