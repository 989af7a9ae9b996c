"""EchoMQ for Django: delayed, recurring and retried jobs on Redis/Valkey sorted sets.

The public API; everything else is internal. See README.md and docs/protocol.md.
"""

from .backoff import Backoff
from .connection import get_connection
from .context import JobContext
from .decorators import JobFunction, JobHandle, job
from .exceptions import (
    EchoMQError,
    JobFailedError,
    KindError,
    PayloadError,
    PayloadTooLargeError,
    StaleTokenError,
)
from .ids import BrandedId
from .jobs import Claim, JobRow, Jobs, Outcome
from .outcomes import Discard, Retry, Snooze

__all__ = [
    "Backoff",
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
    "Retry",
    "Snooze",
    "StaleTokenError",
    "get_connection",
    "job",
]
