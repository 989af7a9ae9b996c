"""JobFunction: a registered job, callable inline and enqueueable on a worker.

What ``@job`` (:mod:`echomq_django.api.decorator`) returns. ``enqueue``,
``enqueue_in`` and ``enqueue_at`` check the arguments (JSON only, and bound to
the function's signature as the worker will call it), mint a ``JOB`` id on
the server's clock (:func:`~echomq_django.protocol.clock.mint_now_ms`) and
admit the job through :class:`~echomq_django.protocol.jobs.Jobs`; each returns
a :class:`~echomq_django.api.handle.JobHandle`. ``enqueue_many`` admits a
batch in one round trip and returns a handle per job.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import inspect
from typing import Any, Callable, Iterable

from .. import rules
from ..conf import get_config
from ..connection import get_connection
from ..protocol.ids import BrandedId
from ..protocol.jobs import MAX_BATCH, Jobs
from . import admission, payload
from . import backoff as backoff_mod
from .handle import JobHandle

__all__ = ["JobFunction"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
# (client, Config, Jobs): the last Jobs made, kept while the process's client
# and the ECHOMQ setting stay the same (one tuple, swapped whole).
_last_jobs: tuple[Any, Any, Jobs] | None = None
_CALL_KEYS = frozenset({"args", "kwargs", "group", "priority", "delay", "when"})


def _positional_range(signature: inspect.Signature | None,
                      context: bool) -> tuple[int, int] | None:
    """``(fewest, most)`` positional arguments a call without keyword
    arguments may pass, when the signature makes that the whole rule (only
    positional parameters, and for ``context=True`` a last ``context`` one the
    worker passes by name); None when only ``Signature.bind`` can tell."""
    if signature is None:
        return None
    params = list(signature.parameters.values())
    if context:
        if not params or params[-1].name != "context" or params[-1].kind not in (
                inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            return None
        params = params[:-1]
    if any(p.kind not in _POSITIONAL for p in params):
        return None
    return sum(p.default is p.empty for p in params), len(params)


def _database(name: str, alias: object) -> str:
    """``alias`` if it names a database in settings.DATABASES; else
    TypeError (not a str) or ValueError naming the aliases there."""
    from django.db import connections

    rules.check_str(name, alias)
    if alias not in connections.settings:
        raise ValueError(f"{name} must name a database of settings.DATABASES "
                         f"({', '.join(sorted(connections.settings))}), got {alias!r}")
    return alias


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
        self._positional = _positional_range(self._signature, self.context)
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
    #: How an enqueue travels (admission.Route: the settings unless using() says).
    route: admission.Route = admission.DEFAULT_ROUTE

    def using(self, *, queue: str | None = None, group: Any = _UNSET,
              priority: int | None = None, on_commit: bool | None = None,
              outbox: bool | None = None, using: str | None = None) -> "JobFunction":
        """A view of this job that enqueues with other options (same path, the
        rest the same): ``queue`` (the worker serving it runs it), ``group``
        (the job's lane, e.g. a chat id: lanes are served round-robin; None
        for the queue's ungrouped lane) and ``priority`` (-100..100, higher
        first within its lane), docs/protocol.md, "Lanes"; and how the
        enqueue travels (docs/durability.md): ``on_commit`` and ``outbox``
        override ``ECHOMQ["ENQUEUE_ON_COMMIT"]`` and ``ECHOMQ["OUTBOX"]``,
        ``using`` names the database whose transaction counts (as Django's
        ``on_commit``) and where outbox rows go.

        Raises:
            ValueError, TypeError: a bad queue name, group, priority or route
                option, naming it.
        """
        clone = copy.copy(self)
        if queue is not None:
            clone.queue = rules.check_queue_name(queue)
        if group is not JobFunction._UNSET:
            clone.group = rules.check_group(group)
        if priority is not None:
            clone.priority = rules.check_priority(priority)
        if (on_commit, outbox, using) != (None, None, None):
            clone.route = admission.Route(
                on_commit=self.route.on_commit if on_commit is None
                else rules.check_bool("on_commit", on_commit),
                outbox=self.route.outbox if outbox is None else rules.check_bool("outbox", outbox),
                using=self.route.using if using is None else _database("using", using))
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
        # The common call, positional arguments only: a count says it all.
        if not kwargs and self._positional and (
                self._positional[0] <= len(args) <= self._positional[1]):
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
        """The call's envelope, checked once (a CheckedPayload: Jobs does not
        parse it again), after the arguments are checked against the
        signature."""
        text = payload.encode(self.path, args, kwargs, get_config().max_payload_bytes)
        self.check_arguments(args, kwargs)
        return text

    def _jobs_and_id(self) -> tuple[Jobs, str]:
        """The :class:`Jobs` on this process's connection and a fresh
        ``JOB`` id minted on that server's clock (protocol.md, "Ordering";
        an outbox job's falls back to this host's clock while the server is
        away: :func:`~echomq_django.api.admission.mint_ms`)."""
        global _last_jobs
        config = get_config()
        conn = get_connection()
        kept = _last_jobs
        if kept is None or kept[0] is not conn or kept[1] is not config:
            jobs = Jobs(conn, max_payload_bytes=config.max_payload_bytes,
                        replicas=config.replicas)
            kept = _last_jobs = (conn, config, jobs)
        outbox = admission.uses_outbox(self.queue, self.route)
        return kept[2], BrandedId.generate("JOB", admission.mint_ms(conn, outbox, self.queue))

    def _admit(self, jobs: Jobs, job_id: str, text: str, single, **when: int) -> JobHandle:
        """Admit one job by this view's route (admission.admit)."""
        item = {"job_id": job_id, "payload": text, "group": self.group,
                "priority": self.priority, **when}
        (outcome,) = admission.admit(jobs, self.queue, [item], self.route, single=single)
        return JobHandle(self.queue, job_id, outcome)

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
        return self._admit(jobs, job_id, text, lambda: jobs.enqueue(
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
        return self._admit(jobs, job_id, text, lambda: jobs.enqueue_in(
            self.queue, job_id, text, delay_ms, group=self.group, priority=self.priority),
            delay_ms=delay_ms)

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
        return self._admit(jobs, job_id, text, lambda: jobs.enqueue_at(
            self.queue, job_id, text, run_at_ms, group=self.group, priority=self.priority),
            run_at_ms=run_at_ms)

    def enqueue_many(self, calls: Iterable[Any]) -> list[JobHandle]:
        """Enqueue a batch of runs in one round trip
        (:meth:`Jobs.enqueue_many <echomq_django.protocol.jobs.Jobs.enqueue_many>`;
        docs/protocol.md, "enqueue_many"). Returns a JobHandle per call, in
        order (outcome ``"enqueued"`` or ``"scheduled"``).

        Each item of ``calls`` is one run of the function, as
        ``multiprocessing.Pool.starmap`` and Celery's ``starmap`` take them:

        - a tuple (or list) of positional arguments: ``send.enqueue_many([(1,),
          (2,)])`` runs ``send(1)`` and ``send(2)``;
        - or a dict, for keyword arguments and per-job options (BullMQ's
          ``addBulk`` takes the same shape): ``args`` (a tuple or list),
          ``kwargs`` (a dict), ``group`` and ``priority`` (as :meth:`using`;
          default: this job's), and at most one of ``delay`` (a timedelta or
          ms from now on the SERVER clock, as :meth:`enqueue_in`) or ``when``
          (an aware datetime or Unix ms, as :meth:`enqueue_at`).

        All calls go to this job's queue (:meth:`using` picks another). Ids
        are minted in order, so runs of one lane at one priority are claimed
        in the order given. At most 100,000 calls; none returns ``[]``.

        Raises, before anything is written, the errors :meth:`enqueue`,
        :meth:`enqueue_in` and :meth:`enqueue_at` raise, naming the call
        (``"calls[3]: args[0] is a datetime, ..."``); TypeError for an item
        that is neither a tuple, a list nor a dict, or a dict with another
        key; ValueError for both ``delay`` and ``when``, or too many calls.
        """
        config = get_config()
        if isinstance(calls, (str, bytes, dict)) or not isinstance(calls, Iterable):
            raise TypeError(f"calls must be a list of argument tuples or dicts, got "
                            f"{type(calls).__name__}")
        calls = list(calls)
        if len(calls) > MAX_BATCH:
            raise ValueError(f"calls must hold at most {MAX_BATCH} runs, got {len(calls)}")
        items = []
        for index, call in enumerate(calls):
            try:
                items.append(self._bulk_item(call, config.max_payload_bytes))
            except (TypeError, ValueError) as err:
                raise type(err)(f"calls[{index}]: {err}") from None
        conn = get_connection()
        outbox = admission.uses_outbox(self.queue, self.route)
        for item in items:
            item["job_id"] = BrandedId.generate(
                "JOB", admission.mint_ms(conn, outbox, self.queue))
        jobs = Jobs(conn, max_payload_bytes=config.max_payload_bytes, replicas=config.replicas)
        outcomes = admission.admit(jobs, self.queue, items, self.route) if items else []
        return [JobHandle(self.queue, item["job_id"], outcome)
                for item, outcome in zip(items, outcomes)]

    def _bulk_item(self, call: Any, max_bytes: int) -> dict:
        """One call of :meth:`enqueue_many`, checked, as a Jobs.enqueue_many
        item (without its id)."""
        if isinstance(call, (tuple, list)):
            args, kwargs, spec = tuple(call), {}, {}
        elif isinstance(call, dict):
            if not _CALL_KEYS.issuperset(call):
                raise TypeError(f"takes args, kwargs, group, priority, delay or when; got the "
                                f"keys {sorted(map(str, call))}")
            spec, args, kwargs = call, call.get("args", ()), call.get("kwargs", {})
            if not isinstance(args, (tuple, list)) or not isinstance(kwargs, dict):
                raise TypeError("args must be a tuple or list and kwargs a dict, got "
                                f"{type(args).__name__} and {type(kwargs).__name__}")
            args = tuple(args)
        else:
            raise TypeError("must be a tuple of arguments or a dict of args, kwargs and "
                            f"options, got {type(call).__name__}")
        item = {"payload": payload.encode(self.path, args, kwargs, max_bytes),
                "group": rules.check_group(spec["group"]) if "group" in spec else self.group,
                "priority": rules.check_priority(spec.get("priority", self.priority))}
        self.check_arguments(args, kwargs)
        if spec.get("delay") is not None and spec.get("when") is not None:
            raise ValueError("takes delay or when, not both")
        if spec.get("delay") is not None:
            item["delay_ms"] = rules.to_ms("delay", spec["delay"], low=0)
        elif spec.get("when") is not None:
            item["run_at_ms"] = rules.to_run_at_ms("when", spec["when"])
        return item
