"""A job's row as Django's ``TaskResult`` (docs/tasks.md, "Results").

A result id is ``"<queue>:<job id>"``: the queue names the keys (and, on a
Cluster, the slot), so any process finds the row knowing only the id. The
row's state maps to Django's statuses: pending and scheduled are READY
(never run, or waiting for its next attempt), active RUNNING, done
SUCCESSFUL, dead and cancelled FAILED. ``worker_ids`` are the row's
``worker.<n>`` (one per attempt, a killed worker's included), ``errors`` its
``error.<n>``/``error_class.<n>``.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from ... import rules
from ...api import payload as payload_mod
from ...exceptions import EchoMQError
from ...protocol.records import JobRow
from . import compat

__all__ = ["EchoMQTaskResult", "EchoMQTaskContext", "new_result", "parse_id", "result_id",
           "from_row"]

_STATUS = {"pending": "READY", "scheduled": "READY", "active": "RUNNING", "done": "SUCCESSFUL",
           "dead": "FAILED", "cancelled": "FAILED"}
_REFRESHED = ("errors", "_return_value", "finished_at", "started_at", "last_attempted_at",
              "status", "enqueued_at", "worker_ids", "metadata")
#: The class a failure recorded without one is reported under (a lease that
#: ran out twice, a payload no worker could read, an attempt cut off).
FALLBACK_ERROR_CLASS = f"{EchoMQError.__module__}.{EchoMQError.__qualname__}"


@dataclass(frozen=True, slots=True, kw_only=True)
class EchoMQTaskResult(compat.TaskResult):
    """Django's TaskResult with the task's ``metadata`` (a dict; see
    docs/tasks.md, "Metadata")."""

    metadata: dict = field(default_factory=dict)

    def refresh(self) -> None:
        """Reload from the row what may have changed (Django's refresh, and
        the metadata)."""
        fresh = self.task.get_backend().get_result(self.id)
        for attr in _REFRESHED:
            object.__setattr__(self, attr, getattr(fresh, attr))

    async def arefresh(self) -> None:
        """See :meth:`refresh`."""
        from asgiref.sync import sync_to_async

        await sync_to_async(self.refresh, thread_sensitive=True)()


@dataclass(frozen=True, slots=True, kw_only=True)
class EchoMQTaskContext(compat.TaskContext):
    """Django's TaskContext (``task_result``, ``attempt``) with EchoMQ's:
    ``job`` (the :class:`~echomq_django.api.context.JobContext`:
    ``cancelled``, ``progress()``, ``extend()``) and ``metadata``, a dict the
    task may change; it is saved when the attempt ends, or at once with
    :meth:`save_metadata`."""

    job: Any
    metadata: dict

    def save_metadata(self) -> None:
        """Store ``metadata`` on the row now (token-fenced). Raises TypeError
        if it is not a JSON object; StaleTokenError if the lease was lost."""
        self.job._jobs.save_metadata(self.job.queue, self.job.job_id, self.job.token,
                                     self.metadata)

    async def asave_metadata(self) -> None:
        """See :meth:`save_metadata`."""
        from asgiref.sync import sync_to_async

        await sync_to_async(self.save_metadata, thread_sensitive=True)()


def result_id(queue: str, job_id: str) -> str:
    """The TaskResult id of ``job_id`` on ``queue``."""
    return f"{queue}:{job_id}"


def parse_id(value: Any) -> tuple[str, str]:
    """``(queue, job_id)`` of a result id; TaskResultDoesNotExist if malformed."""
    if not isinstance(value, str) or value.count(":") != 1:
        raise compat.TaskResultDoesNotExist(f"{value!r} is not an EchoMQ task result id "
                                            "('<queue>:<job id>')")
    queue, job_id = value.split(":")
    try:
        return rules.check_queue_name(queue), rules.check_job_id(job_id)
    except (TypeError, ValueError) as err:
        raise compat.TaskResultDoesNotExist(f"{value!r} is not an EchoMQ task result id: "
                                            f"{err}") from None


def _when(ms: int | None) -> dt.datetime | None:
    """Server ms as Django wants a time: aware UTC under USE_TZ, else naive local."""
    if ms is None:
        return None
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    from django.conf import settings

    return moment if settings.USE_TZ else timezone.make_naive(moment)


def new_result(task: Any, alias: str, queue: str, job_id: str, enqueued_ms: int, args: list,
               kwargs: dict, metadata: dict) -> EchoMQTaskResult:
    """The READY result ``enqueue`` returns."""
    return EchoMQTaskResult(
        task=task, id=result_id(queue, job_id), status=compat.TaskResultStatus.READY,
        enqueued_at=_when(enqueued_ms), started_at=None, finished_at=None,
        last_attempted_at=None, args=args, kwargs=kwargs, backend=alias, errors=[],
        worker_ids=[], metadata=metadata)


def _errors(row: JobRow) -> list:
    errors = [compat.TaskError(exception_class_path=e.error_class or FALLBACK_ERROR_CLASS,
                               traceback=e.traceback) for e in row.errors]
    if row.state == "dead" and not any(e.attempt == row.attempts for e in row.errors):
        # Ended without an error of its own attempt (a lease that ran out past
        # MAX_STALLS, a payload no worker could run): say why all the same.
        errors.append(compat.TaskError(exception_class_path=FALLBACK_ERROR_CLASS,
                                       traceback=f"{FALLBACK_ERROR_CLASS}: {row.reason}\n"))
    return errors


def from_row(row: JobRow, alias: str, task: Any) -> EchoMQTaskResult:
    """The TaskResult a job row says (``task``: the Task its payload names)."""
    path, args, kwargs, extra = payload_mod.decode(row.payload)
    metadata = json.loads(row.extra["metadata"]) if "metadata" in row.extra else dict(
        extra.get("metadata") or {})
    result = EchoMQTaskResult(
        task=task, id=result_id(row.queue, row.job_id),
        status=compat.TaskResultStatus[_STATUS.get(row.state, "READY")],
        enqueued_at=_when(row.enqueued_at_ms),
        started_at=_when(row.first_started_at_ms or row.started_at_ms),
        finished_at=_when(row.finished_at_ms) if row.state in ("done", "dead", "cancelled")
        else None,
        last_attempted_at=_when(row.started_at_ms), args=args, kwargs=kwargs, backend=alias,
        errors=_errors(row), worker_ids=list(row.workers[:row.attempts]), metadata=metadata)
    if row.state == "done":
        object.__setattr__(result, "_return_value", row.result_value)
    return result
