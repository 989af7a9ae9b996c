"""EchoMQ for Django: delayed, recurring and retried jobs on Redis/Valkey sorted sets.

The public API; everything else is internal. See README.md and docs/protocol.md.
Django's Tasks API backend is :mod:`echomq_django.tasks` (imported only where
``settings.TASKS`` names it); the models (``OutboxEntry``, ``JobRecord``) are
in :mod:`echomq_django.models`.
The package, by concern: ``api/`` (what a developer declares and sends),
``protocol/`` (keys, Lua scripts, the ``Jobs`` surface), ``repeat/``
(recurring schedules), ``runtime/`` (what runechomq runs), ``admin/``,
``connection/`` and ``integrations/``; ``limits.py`` (``RateLimiter``) and
``leaderboard.py`` (``Board``); ``rules.py`` holds every argument rule.
"""

from .api.backoff import Backoff
from .api.context import JobContext
from .api.decorator import job
from .api.function import JobFunction
from .api.handle import JobHandle
from .api.outcomes import Discard, Retry, Snooze
from .connection import get_connection
from .exceptions import (
    EchoMQError,
    JobFailedError,
    JobTimeoutError,
    KindError,
    NotReplicatedError,
    PayloadError,
    PayloadTooLargeError,
    StaleTokenError,
)
from .leaderboard import Board
from .limits import RateLimiter
from .protocol.ids import BrandedId
from .protocol.jobs import Jobs
from .protocol.queues import Queues
from .protocol.records import AttemptError, Claim, Finish, JobRow, Outcome
from .repeat.registry import Repeat
from .signals import job_enqueued, job_finished, job_started, worker_started, worker_stopping

__all__ = [
    "AttemptError",
    "Backoff",
    "Board",
    "BrandedId",
    "Claim",
    "Discard",
    "EchoMQError",
    "Finish",
    "JobContext",
    "JobFailedError",
    "JobFunction",
    "JobHandle",
    "JobRow",
    "JobTimeoutError",
    "Jobs",
    "KindError",
    "NotReplicatedError",
    "Outcome",
    "PayloadError",
    "PayloadTooLargeError",
    "Queues",
    "RateLimiter",
    "Repeat",
    "Retry",
    "Snooze",
    "StaleTokenError",
    "get_connection",
    "job",
    "job_enqueued",
    "job_finished",
    "job_started",
    "worker_started",
    "worker_stopping",
]
