"""EchoMQBackend: Django's Tasks API (``django.tasks``) on EchoMQ.

Configured the Django way::

    TASKS = {"default": {"BACKEND": "echomq_django.tasks.EchoMQBackend",
                         "QUEUES": ["default", "mail"],      # [] allows any queue
                         "OPTIONS": {"MAX_ATTEMPTS": 1}}}

A task's ``queue_name`` is the EchoMQ queue of that name, served by
``./manage.py runechomq``; the connection is ``ECHOMQ``'s. Building the
backend does no I/O. ``enqueue`` admits one job (server-clock ``run_after``,
priority in the task's lane) and returns a ``TaskResult`` whose id is
``"<queue>:<job id>"``; ``get_result`` reads the job's row back from any
process. The behaviour, option by option: docs/tasks.md.
"""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

from django.core import checks
from django.utils import timezone

from ... import rules
from ...api import admission, payload
from ...api.backoff import check_backoff
from ...conf import get_config
from ...connection import get_connection
from ...connection.resilience import repeat_lost
from ...exceptions import PayloadError
from ...protocol.ids import BrandedId
from ...protocol.jobs import Jobs
from ...protocol.keyspace import Keyspace
from ...protocol.records import Outcome
from . import compat, results
from .options import options
from .task import EchoMQTask
from .worker import check_call, check_module, check_options, find_task

__all__ = ["EchoMQBackend"]

#: ``OPTIONS`` keys and what each must be.
OPTION_RULES = {
    "MAX_ATTEMPTS": "an int in 1..2**53: attempts a task gets unless it says otherwise (1)",
    "BACKOFF": "an EchoMQ backoff policy for tasks that retry (default ECHOMQ['BACKOFF'])",
}


class EchoMQBackend(compat.BaseTaskBackend):
    """The ``django.tasks`` backend; see the module doc."""

    task_class = EchoMQTask
    supports_defer = True
    supports_priority = True
    supports_get_result = True
    supports_async_task = True

    def __init__(self, alias: str, params: dict) -> None:
        compat.BaseTaskBackend.__init__(self, alias, params)
        # Kept as given: check() reports OPTIONS that is not a dict (E102),
        # and the backend then runs with none rather than fail to build.
        self.raw_options = self.options
        self.options = dict(self.options) if isinstance(self.options, dict) else {}
        self.raw_queues = params.get("QUEUES", [compat.DEFAULT_TASK_QUEUE_NAME])

    # -- settings -------------------------------------------------------------

    @property
    def max_attempts(self) -> int:
        """``OPTIONS["MAX_ATTEMPTS"]``, 1 when unset."""
        return rules.optional_count("OPTIONS['MAX_ATTEMPTS']",
                                    self.options.get("MAX_ATTEMPTS")) or 1

    @property
    def backoff(self) -> tuple:
        """``OPTIONS["BACKOFF"]``, else ``ECHOMQ["BACKOFF"]``."""
        if "BACKOFF" in self.options:
            return check_backoff(self.options["BACKOFF"])
        return check_backoff(get_config().backoff)

    def check(self, **kwargs: Any) -> list:
        """Bad ``OPTIONS`` or ``QUEUES`` for ``manage.py check``: echomq.E101
        (an unknown option), E102 (a bad option value), E103 (a queue name
        that breaks the queue-name rule)."""
        errors = list(compat.BaseTaskBackend.check(self, **kwargs))
        where = f"TASKS[{self.alias!r}]"
        if not isinstance(self.raw_options, dict):
            errors.append(checks.Error(
                f"{where}['OPTIONS'] must be a dict, got {type(self.raw_options).__name__}",
                id="echomq.E102"))
        if isinstance(self.raw_queues, (str, bytes)) or not isinstance(
                self.raw_queues, (list, tuple, set, frozenset)):
            errors.append(checks.Error(
                f"{where}['QUEUES'] must be a list of queue names, got "
                f"{type(self.raw_queues).__name__} {self.raw_queues!r}",
                hint="e.g. \"QUEUES\": [\"default\"]; [] allows any queue", id="echomq.E103"))
            return errors
        for key in sorted(set(self.options) - set(OPTION_RULES)):
            errors.append(checks.Error(
                f"{where}['OPTIONS'] has an unknown key {key!r}",
                hint=f"EchoMQBackend takes {', '.join(sorted(OPTION_RULES))}",
                id="echomq.E101"))
        for key, getter in (("MAX_ATTEMPTS", lambda: self.max_attempts),
                            ("BACKOFF", lambda: self.backoff)):
            if key in self.options:
                try:
                    getter()
                except (TypeError, ValueError) as err:
                    errors.append(checks.Error(f"{where}['OPTIONS'][{key!r}]: {err}",
                                               hint=f"{key} must be {OPTION_RULES[key]}",
                                               id="echomq.E102"))
        for queue in sorted(self.raw_queues, key=repr):
            try:
                rules.check_queue_name(queue)
            except (TypeError, ValueError) as err:
                errors.append(checks.Error(f"{where}['QUEUES']: {err}", id="echomq.E103"))
        return errors

    # -- the contract ---------------------------------------------------------

    def validate_task(self, task: Any) -> None:
        """Django's rules, then EchoMQ's: the queue name's rule and each
        option of an :class:`EchoMQTask`. Raises InvalidTask naming what is
        wrong."""
        try:  # before Django's rule, which lets a bool through and crashes on NaN
            rules.check_priority(task.priority)
        except (TypeError, ValueError) as err:
            raise compat.InvalidTask(str(err)) from None
        run_after = task.run_after
        if isinstance(run_after, dt.timedelta):
            # Django's rule reads a timedelta as a naive datetime (and crashes
            # under USE_TZ); it is a delay on the server's clock here.
            compat.BaseTaskBackend.validate_task(self, SimpleNamespace(
                func=task.func, takes_context=task.takes_context, priority=task.priority,
                run_after=None, queue_name=task.queue_name))
        else:
            compat.BaseTaskBackend.validate_task(self, task)
        try:
            rules.check_queue_name(task.queue_name)
            if isinstance(run_after, dt.timedelta):
                rules.check_int("run_after (ms)", rules.to_ms("run_after", run_after, low=0), 0)
            elif run_after is not None:
                rules.to_run_at_ms("run_after", run_after if timezone.is_aware(run_after)
                                   else timezone.make_aware(run_after))
            check_module(task)
            if isinstance(task, EchoMQTask):
                check_options(task)
        except (TypeError, ValueError) as err:
            raise compat.InvalidTask(str(err)) from None

    def enqueue(self, task: Any, args: Any, kwargs: Any):
        """Admit one run of ``task`` and return its TaskResult (READY).

        Raises InvalidTask (Django's rules, the queue's, the options');
        TypeError for arguments that are not JSON or do not fit the function
        (nothing is written); ValueError for a ``run_after`` that is not an
        instant EchoMQ can hold (before 2000, past 2**53 ms)."""
        self.validate_task(task)
        try:
            args, kwargs = compat.normalize_json(list(args)), compat.normalize_json(dict(kwargs))
        except RecursionError:
            raise PayloadError("the arguments contain themselves or nest too deep for JSON "
                               f"(at most {rules.MAX_JSON_DEPTH} levels)") from None
        opts = options(task)
        check_call(task, args, kwargs)
        extra: dict[str, Any] = {"task": self.alias}   # the backend it was enqueued through
        if opts["metadata"]:
            extra["metadata"] = opts["metadata"]
        config = get_config()
        text = payload.encode(task.module_path, tuple(args), kwargs, config.max_payload_bytes,
                              extra=extra)
        conn = get_connection()
        jobs = Jobs(conn, max_payload_bytes=config.max_payload_bytes, replicas=config.replicas)
        queue = task.queue_name
        minted_ms = admission.mint_ms(conn, admission.uses_outbox(queue, admission.DEFAULT_ROUTE),
                                  queue)
        job_id = BrandedId.generate("JOB", minted_ms)
        item = {"job_id": job_id, "payload": text, "group": opts["group"],
                "priority": task.priority}
        run_after = task.run_after
        if isinstance(run_after, dt.timedelta):  # measured on the server's clock
            item["delay_ms"] = rules.to_ms("run_after", run_after, low=0)
        elif run_after is not None:
            if timezone.is_naive(run_after):  # allowed by Django only without USE_TZ
                run_after = timezone.make_aware(run_after)
            item["run_at_ms"] = rules.to_run_at_ms("run_after", run_after)
        # At once, on commit or through the outbox, as the settings say; sent
        # again if the connection drops under it (the id makes a repeat a no-op).
        (outcome,) = admission.admit(jobs, queue, [item])
        enqueued_ms = minted_ms
        if outcome != Outcome.DEFERRED:
            # The admission's own time on the server (what get_result reads).
            written = repeat_lost(lambda: conn.hget(Keyspace(queue).job(job_id),
                                                    "enqueued_at_ms"))
            enqueued_ms = int(written) if written else minted_ms
        result = results.new_result(task, self.alias, queue, job_id, enqueued_ms, args,
                                    kwargs, dict(opts["metadata"] or {}))
        compat.task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: Any):
        """The TaskResult of ``result_id`` (``"<queue>:<job id>"``) as its
        row says now, from any process. Raises TaskResultDoesNotExist for an
        id that is malformed, unknown, expired (``RESULT_TTL_MS`` after the
        end) or not a task's."""
        return read_result(result_id)


def read_result(value: Any) -> Any:
    """The result of id ``value`` now; TaskResultDoesNotExist when there is none."""
    queue, job_id = results.parse_id(value)
    row = Jobs(get_connection()).get(queue, job_id)
    if row is None:
        raise compat.TaskResultDoesNotExist(f"no task result {value!r} (never enqueued, or "
                                            "expired after RESULT_TTL_MS)")
    try:
        path, _, _, extra = payload.decode(row.payload)
    except ValueError:
        extra, path = {}, ""
    if "task" not in extra:
        raise compat.TaskResultDoesNotExist(f"{value!r} is a job, not a task's result")
    task = find_task(path)
    if task is None:
        raise compat.TaskResultDoesNotExist(
            f"{value!r} ran {path!r}, which is not a Task this process can import")
    # The backend it was enqueued through (an occurrence of a recurring task
    # names none: the task's own).
    through = extra["task"] if isinstance(extra["task"], str) else task.backend
    return results.from_row(row, through, _as_enqueued(task, queue, row.priority))


def _as_enqueued(task: Any, queue: str, priority: int) -> Any:
    """The Task as it was enqueued (queue, priority), or its definition when
    the backend would refuse that now (a queue no longer in QUEUES)."""
    if task.queue_name == queue and task.priority == priority:
        return task
    try:
        return task.using(queue_name=queue, priority=priority)
    except compat.InvalidTask:
        return task
