"""What a handler can choose, besides returning (done) or raising (retry with backoff).

Raise one of these from a ``@job`` handler (``Snooze`` may also be returned)::

    raise Retry(delay_ms=5_000)       # a retry after exactly 5 s (spends an attempt)
    raise Snooze(delay_ms=60_000)     # back in a minute; the attempt is given back
    raise Discard("user deleted")     # dead at once, no retry

See docs/protocol.md ("Consumer") for what each does to the job's row.
"""

from __future__ import annotations

import datetime as dt

from .. import rules


def _delay_ms(name: str, value: object) -> int:
    try:
        return rules.check_ms(name, rules.to_ms(name, value, low=0))
    except TypeError:
        raise ValueError(f"{name} must be an int of ms >= 0 or a timedelta, got {value!r}") from None

class Retry(Exception):
    """Fail this attempt and retry after ``delay_ms`` (None: the job's backoff).

    Spends the attempt: on the last one the job goes dead with reason "failed".
    Raises ValueError for a negative or non-int delay.
    """

    def __init__(self, delay_ms: int | dt.timedelta | None = None, reason: str = "") -> None:
        self.delay_ms = None if delay_ms is None else _delay_ms("delay_ms", delay_ms)
        self.reason = reason
        super().__init__(reason or f"retry requested (delay_ms={self.delay_ms})")


class Snooze(Exception):
    """Come back after ``delay_ms`` without spending an attempt (the row's
    ``snoozes`` counts them). Raise it, or return an instance.

    Raises ValueError for a negative or non-int delay.
    """

    def __init__(self, delay_ms: int | dt.timedelta) -> None:
        self.delay_ms = _delay_ms("delay_ms", delay_ms)
        super().__init__(f"snooze {self.delay_ms} ms")


class Discard(Exception):
    """Fail permanently: the job goes dead at once with ``reason``, never retried."""

    def __init__(self, reason: str = "discarded") -> None:
        self.reason = str(reason) or "discarded"
        super().__init__(self.reason)
