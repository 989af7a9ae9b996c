"""EchoMQ for Django: delayed, recurring and retried jobs on Redis/Valkey sorted sets.

The public API; everything else is internal. See README.md and docs/protocol.md.
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
    KindError,
    PayloadError,
    PayloadTooLargeError,
    StaleTokenError,
)
from .leaderboard import Board
from .limits import RateLimiter
from .protocol.ids import BrandedId
from .protocol.jobs import Jobs
from .protocol.queues import Queues
from .protocol.records import Claim, JobRow, Outcome
from .repeat.registry import Repeat

__all__ = [
    "Backoff",
    "Board",
    "BrandedId",
    "Claim",
    "Discard",
    "EchoMQError",
    "JobContext",
    "JobFailedError",
    "JobFunction",
    "JobHandle",
    "JobRow",
    "Jobs",
    "KindError",
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
]
