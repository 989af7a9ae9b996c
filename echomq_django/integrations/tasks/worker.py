"""How runechomq runs a Django Task: :class:`TaskJob`, the registered job a
Task's payload names.

The consumer's :class:`~echomq_django.runtime.outcome.Runner` runs it as any
``@job``: it calls :meth:`TaskJob.run` with the job's context, maps what it
raised to retry or dead (:meth:`TaskJob.after_failure`: the task's
``max_attempts`` and ``backoff``), records the outcome, and tells
:meth:`TaskJob.on_finished`, which sends ``task_finished``. A Task is found
by its path: an :class:`EchoMQTask` registers itself when it is made (so
recurring tasks are known at boot), and any other Task is imported by path,
only from a module of an installed app, and run only if what is there is a
Task (Django's reference worker imports by path the same way).
"""

from __future__ import annotations

import datetime as dt
import inspect
import json
import logging
import math
import threading
import time
import traceback
from typing import Any

from django.apps import apps
from django.utils import timezone
from django.utils.module_loading import import_string

from ... import rules
from ...api import payload, registry
from ...api.backoff import Backoff, check_backoff
from ...conf import get_config
from ...connection.resilience import persist
from ...exceptions import class_path
from . import compat, results
from .options import options

__all__ = ["TaskJob", "register", "find_task", "check_options", "check_call"]

log = logging.getLogger("echomq.tasks")
_lock = threading.Lock()


def register(task: Any) -> None:
    """Register ``task``'s TaskJob under its path, unless a TaskJob of the same
    function is there already (``using`` copies keep the definition's)."""
    with _lock:
        known = registry.lookup(task.module_path)
        if isinstance(known, TaskJob) and known.task.func is task.func:
            return
        registry.register(TaskJob(task))


def resolve_task(path: str) -> "TaskJob | None":
    """The TaskJob of the Task at ``path`` (registered, or imported from an
    installed app's module and registered); None when there is none."""
    known = registry.lookup(path)
    if isinstance(known, TaskJob):
        return known
    if known is not None:  # an @job at that path, not a task
        return None
    task = _import_task(path)
    if task is None:
        return None
    register(task)
    known = registry.lookup(path)
    return known if isinstance(known, TaskJob) else None


def find_task(path: str) -> Any:
    """The Task at ``path`` (see :func:`resolve_task`), or None."""
    job = resolve_task(path)
    return None if job is None else job.task


def _import_task(path: str) -> Any:
    module, _, _ = path.rpartition(".")
    if not module or apps.get_containing_app_config(module) is None:
        return None  # never import a module outside the installed apps
    try:
        found = import_string(path)
    except ImportError:
        return None
    return found if isinstance(found, compat.TASK_CLASSES) else None


def check_module(task: Any) -> None:
    """Raise ValueError unless ``task``'s function lives in an installed app's
    module (or one already imported as a registered Task's): runechomq finds a
    Task by importing its module, and only an installed app's. Not checked
    before the app registry knows the apps."""
    module = task.func.__module__
    if not apps.apps_ready or isinstance(registry.lookup(task.module_path), TaskJob):
        return
    if apps.get_containing_app_config(module) is None:
        raise ValueError(f"{task.module_path} is in module {module!r}, which is not part of an "
                         "installed app: runechomq imports tasks only from installed apps' "
                         "modules (move it into one, e.g. an app's tasks.py)")


def check_options(task: Any) -> None:
    """Raise TypeError or ValueError naming the first bad EchoMQ option of
    ``task`` (validate_task turns it into InvalidTask)."""
    opts = options(task)
    rules.optional_count("max_attempts", opts["max_attempts"])
    rules.optional_count("lease_ms", opts["lease_ms"])
    if opts["backoff"] is not None and not callable(opts["backoff"]):
        check_backoff(opts["backoff"])
    if opts["timeout"] is not None:
        if isinstance(opts["timeout"], dt.timedelta):
            rules.to_ms("timeout", opts["timeout"], low=1)
        elif rules.optional_count("timeout", opts["timeout"]) > rules.MAX_MS // 1000:
            raise ValueError(f"timeout must be at most {rules.MAX_MS // 1000} s")
    rules.check_group(opts["group"])
    if opts["metadata"] is not None:
        if not isinstance(opts["metadata"], dict):
            raise TypeError(f"metadata must be a dict, got {type(opts['metadata']).__name__}")
        payload.check_json(opts["metadata"], "metadata")
    recurring = opts["every"] is not None or opts["cron"] is not None
    if not recurring and (opts["tz"] is not None or opts["missed"] != "coalesce"):
        raise ValueError("tz and missed apply to a recurring task: give every= or cron= too")
    if recurring:
        if opts["group"] is not None or task.priority:
            raise ValueError("a recurring task (every=/cron=) takes no group or priority: its "
                             "occurrences run in the queue's ungrouped lane at priority 0")
        from ...repeat.sync import plan

        plan([dict(_schedule(task, opts), tz=opts["tz"] or "UTC")])
        check_call(task, [], {}, why="; a recurring task's occurrences pass no arguments")


def check_call(task: Any, args: list, kwargs: dict, why: str = "") -> None:
    """Raise TypeError naming the task when ``args``/``kwargs`` do not fit
    its function (with the context first for ``takes_context``)."""
    try:
        signature = inspect.signature(task.func)
    except (TypeError, ValueError):
        return
    try:
        if task.takes_context:
            signature.bind(None, *args, **kwargs)
        else:
            signature.bind(*args, **kwargs)
    except TypeError as err:
        raise TypeError(f"{task.module_path}() cannot take these arguments: {err}{why}") from None


def _schedule(task: Any, opts: dict) -> dict | None:
    if opts["every"] is None and opts["cron"] is None:
        return None
    every_ms = None if opts["every"] is None else rules.to_ms("every", opts["every"], low=1)
    return {"queue": task.queue_name, "name": task.module_path, "every_ms": every_ms,
            "cron": opts["cron"], "tz": opts["tz"], "missed": opts["missed"],
            "template": {"job": task.module_path, "args": [], "kwargs": {}, "task": 1}}


class TaskJob:
    """A Task as the runtime's registry holds jobs (the attributes the
    Runner and the schedule sync read; see :class:`~echomq_django.api.function.JobFunction`)."""

    context = True  # the Runner passes the JobContext: the task's row is read with it,
    context_name = "_echomq_context"  # under a name no task argument can take

    def __init__(self, task: Any) -> None:
        self.task = task
        self.path = task.module_path
        self.queue = task.queue_name
        opts = options(task)
        self.max_attempts = opts["max_attempts"]
        self.backoff = opts["backoff"]
        self.lease_ms = opts["lease_ms"]
        self.timeout_ms = getattr(task, "timeout_ms", None)
        self.schedule = _schedule(task, opts)
        self.fn = self.run
        self._running: dict[str, Any] = {}  # job id -> its TaskResult, while it runs
        self._noted: set[str] = set()  # job ids whose error after_failure appended

    def __repr__(self) -> str:
        return f"<task {self.path} queue={self.queue}>"

    def check_arguments(self, args: Any, kwargs: dict) -> None:
        """Raise TypeError naming the task when the call does not fit its
        function (what the ``echomq.E014`` check asks of a schedule)."""
        check_call(self.task, list(args), dict(kwargs))

    def backend(self, alias: str | None = None) -> Any:
        """The backend ``alias`` names (the task's own when None or unknown)."""
        try:
            return compat.task_backends[alias or self.task.backend]
        except Exception:  # noqa: BLE001 - an alias this process's TASKS lacks
            return compat.task_backends[self.task.backend]

    def _policy(self, backend: Any) -> tuple:
        if isinstance(self.backoff, (tuple, list)):
            return check_backoff(self.backoff)
        return getattr(backend, "backoff", None) or check_backoff(get_config().backoff)

    def effective(self) -> tuple[int, tuple, int]:
        """``(max_attempts, backoff policy, lease_ms)`` of the task's own
        backend (its settings and ECHOMQ's filling the gaps); a failure is
        decided by :meth:`after_failure`, with the enqueuing backend's."""
        backend = self.backend()
        return (self.max_attempts or getattr(backend, "max_attempts", 1), self._policy(backend),
                self.lease_ms or get_config().lease_ms)

    def after_failure(self, err: BaseException, claim: Any) -> tuple[str, int]:
        """``("retry", delay_ms)`` or ``("dead", 0)`` after ``claim``'s attempt
        raised ``err``: dead once ``max_attempts`` are spent, or when a
        ``backoff`` callable answers None. The callable gets the exception and
        the TaskResult with this attempt's error already in ``errors``
        (django/new-features#142); it answers seconds or a timedelta. A
        callable that raises or answers anything else ends the task FAILED
        with the attempt's own error (logged: a retry rule that cannot be read
        is no rule). The options are those of the backend the task was
        enqueued through."""
        running = self._running.get(claim.job_id)
        backend = self.backend(running.backend if running is not None else None)
        max_attempts = self.max_attempts or getattr(backend, "max_attempts", 1)
        if claim.attempts >= max_attempts:
            return "dead", 0
        if not callable(self.backoff):
            return "retry", Backoff.delay_ms(self._policy(backend), claim.attempts)
        if running is not None:
            running.errors.append(compat.TaskError(
                exception_class_path=class_path(err),
                traceback="".join(traceback.format_exception(err))))
            self._noted.add(claim.job_id)
        try:
            return _retry_after(self.backoff(err, running))
        except Exception:  # noqa: BLE001 - the user's callable, whatever it raised
            log.exception("task %s: its backoff failed or answered no delay; the task fails "
                          "with its own error", self.path)
            return "dead", 0

    def run(self, *args: Any, _echomq_context: Any, **kwargs: Any) -> Any:
        """Run the task for the claim ``_echomq_context`` (a JobContext)
        describes; returns its value as JSON (TypeError when it is not)."""
        context = _echomq_context
        row = persist(lambda: context._jobs.get(context.queue, context.job_id),
                      deadline=time.monotonic() + context._lease_ms / 1000,
                      outage=context._outage)
        alias = context.extra.get("task")
        result = results.from_row(row, alias if isinstance(alias, str) else self.task.backend,
                                  self.task)
        object.__setattr__(result, "status", compat.TaskResultStatus.RUNNING)
        self._running[context.job_id] = result
        compat.task_started.send(type(self.backend(result.backend)), task_result=result)
        before = json.loads(json.dumps(result.metadata))
        if self.task.takes_context:
            task_context = results.EchoMQTaskContext(task_result=result, job=context,
                                                     metadata=result.metadata)
            value = self.task.call(task_context, *args, **kwargs)
        else:
            value = self.task.call(*args, **kwargs)
        value = compat.normalize_json(value)
        rules.json_text("the return value", value)
        if result.metadata != before:
            context._jobs.save_metadata(context.queue, context.job_id, context.token,
                                        result.metadata)
        return value

    def on_finished(self, claim: Any, outcome: str, *, result: Any, error: str,
                    error_class: str) -> None:
        """Send ``task_finished`` for an attempt that ended ``outcome``."""
        running = self._running.pop(claim.job_id, None)
        noted = claim.job_id in self._noted
        self._noted.discard(claim.job_id)
        if running is None or outcome in ("stale", "unrecorded", "timeout"):
            return
        status = {"done": "SUCCESSFUL", "dead": "FAILED", "cancelled": "FAILED"}.get(
            outcome, "READY")
        if error and not noted:
            running.errors.append(compat.TaskError(
                exception_class_path=error_class or results.FALLBACK_ERROR_CLASS,
                traceback=error))
        if status != "READY":
            object.__setattr__(running, "finished_at", timezone.now())
        if status == "SUCCESSFUL":
            object.__setattr__(running, "_return_value", result)
        object.__setattr__(running, "status", compat.TaskResultStatus[status])
        compat.task_finished.send(type(self.backend(running.backend)), task_result=running)


registry.add_resolver(resolve_task)


def _retry_after(answer: Any) -> tuple[str, int]:
    """A backoff callable's answer as an outcome: None stops retrying;
    seconds (an int or a finite float >= 0) or a timedelta >= 0 retry after
    that long. Raises TypeError or ValueError for anything else."""
    if answer is None:
        return "dead", 0
    if isinstance(answer, dt.timedelta):
        delay_ms = rules.to_ms("backoff's answer", answer, low=0)
    elif isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise TypeError(f"a backoff must answer seconds, a timedelta or None, got "
                        f"{type(answer).__name__}")
    elif not math.isfinite(answer):
        raise ValueError(f"a backoff must answer a finite number of seconds, got {answer!r}")
    else:
        delay_ms = rules.to_ms("backoff's answer", int(answer * 1000), low=0)
    return "retry", rules.check_int("backoff's answer (ms)", delay_ms, 0)
