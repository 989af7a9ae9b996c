"""EchoMQTask: Django's ``Task`` with EchoMQ's extensions, and ``task``, the
decorator that passes them on every Django version.

What ``@task`` makes when the backend is ``EchoMQBackend`` (its
``task_class``). The extensions are shaped as Django's open proposals shape
them, so a later Django that adopts them does not break a project
(docs/tasks.md, "Extensions"):

- ``max_attempts`` (default: the backend's ``OPTIONS["MAX_ATTEMPTS"]``, 1: a
  failure is final, as Django's own backends do) and ``backoff``: an EchoMQ
  policy (``Backoff.exponential(1_000, 60_000, jitter=True)``) or a callable
  ``backoff(exception, task_result) -> seconds | timedelta | None`` (None:
  no more retries), as django/new-features#142 proposes;
- ``timeout``: seconds (an int >= 1 or a timedelta), after which the attempt
  fails with :class:`~echomq_django.exceptions.JobTimeoutError` (a
  TimeoutError), as #144 proposes (EchoMQ's ``timeout_ms``);
- ``lease_ms``: the lease an attempt holds (default ``ECHOMQ["LEASE_MS"]``);
- ``group``: the job's lane (a fair lane per chat, tenant, ...); per call
  with ``task.using(group=...)``;
- ``metadata``: a JSON object the task carries beside its arguments, read and
  written by the task through ``context.metadata`` and kept with its result
  (#141); per call with ``task.using(metadata={...})``;
- ``every`` / ``cron`` (with ``tz`` and ``missed``): a recurring task, as a
  recurring ``@job`` (docs/repeat.md).

Definition options (everything but ``group`` and ``metadata``) cannot be
changed by ``using``, as the proposals say.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Any, Callable

from ... import rules
from . import compat
from .options import TASK_OPTIONS, options  # noqa: F401  (re-exported)

__all__ = ["EchoMQTask", "task"]

_UNSET: Any = object()


@dataclass(frozen=True, slots=True, kw_only=True)
class EchoMQTask(compat.Task):
    """A Django ``Task`` run by EchoMQ; see the module doc for the options."""

    max_attempts: int | None = None
    backoff: Any = None
    timeout: int | dt.timedelta | None = None
    lease_ms: int | None = None
    group: str | None = None
    metadata: dict | None = None
    every: dt.timedelta | int | None = None
    cron: str | None = None
    tz: str | None = None
    missed: str = "coalesce"

    def __post_init__(self) -> None:
        compat.Task.__post_init__(self)  # the backend's validate_task
        from .worker import register

        register(self)

    def using(self, *, group: Any = _UNSET, metadata: Any = _UNSET, **changes: Any):
        """Django's ``using`` (priority, queue_name, run_after, backend), and
        the per-call options ``group`` (None: the ungrouped lane) and
        ``metadata`` (a JSON object)."""
        task = compat.Task.using(self, **changes)
        extra = {}
        if group is not _UNSET:
            extra["group"] = group
        if metadata is not _UNSET:
            extra["metadata"] = metadata
        return replace(task, **extra) if extra else task

    @property
    def timeout_ms(self) -> int | None:
        """``timeout`` in ms (None: no time limit)."""
        if self.timeout is None:
            return None
        if isinstance(self.timeout, dt.timedelta):
            return rules.to_ms("timeout", self.timeout, low=1)
        return rules.optional_count("timeout", self.timeout) * 1000


def task(function: Callable | None = None, *, priority: int = 0,
         queue_name: str = compat.DEFAULT_TASK_QUEUE_NAME, backend: str = "default",
         takes_context: bool = False, **kwargs: Any):
    """Django's ``@task`` with the EchoMQ options passed to the backend's
    ``task_class`` (as Django 6.1's ``@task`` does; 6.0's takes none).
    ``run_after`` cannot be given here (Django's rule: use ``using``).

    Raises TypeError for ``run_after``; InvalidTask (Django's) for a bad
    option, naming it."""
    if "run_after" in kwargs:
        raise TypeError("run_after cannot be defined statically with the @task decorator; "
                        "use .using(run_after=...)")

    def wrapper(f: Callable):
        return compat.task_backends[backend].task_class(
            func=f, priority=priority, queue_name=queue_name, backend=backend,
            takes_context=takes_context, **kwargs)

    return wrapper(function) if function is not None else wrapper
