"""When a recurring schedule fires: a fixed grid or a cron expression in a zone.

Usage::

    from echomq_django.repeat.cadence import Cadence
    daily = Cadence.build(cron="30 2 * * *", tz="Europe/Berlin")
    daily.first_run(now_ms)            # first fire instant >= now_ms (Unix ms)
    daily.next_after(after_ms)         # first fire instant > after_ms
    daily.catch_up(due_ms, now_ms)     # CatchUp(slot_ms, missed, next_ms)

Pure: nothing here reads a clock. Every "now" is an argument, and the callers in
:mod:`echomq_django.repeat` pass the server's ``TIME`` (docs/repeat.md, "One
clock"). The process's own time zone never matters either: cron walls are
computed on naive local times and mapped to instants through the schedule's
IANA zone.

Options:

``every_ms`` [None, 1..2**53]
    A fixed grid: fires at ``start_at_ms + k * every_ms`` for k >= 0.
    ``start_at_ms`` defaults to 0 (the Unix epoch), so an hourly schedule fires
    on the UTC hour and a restart never moves the grid.
``cron`` [None]
    A 5-field expression (minute hour day month weekday), the 6-field form
    croniter accepts (a trailing seconds field), or an ``@hourly``-style alias.
    Evaluated in ``tz``; fires only at or after ``start_at_ms`` when given.
``tz`` ["UTC" here; :mod:`echomq_django.repeat` defaults it to TIME_ZONE]
    An IANA zone name.

Daylight saving, the classic cron policy (docs/repeat.md, "Daylight saving"):

- A schedule whose hour field starts with ``*`` (``30 * * * *``, ``0 */2 * * *``,
  ``@hourly``) steps through the hours: it fires at every instant whose local
  wall time matches, so on a fall-back day both passes through the repeated
  hour fire, and a wall time inside a spring-forward gap does not exist and
  does not fire (the real-time cadence is kept).
- Any other schedule names fixed hours: a repeated wall time fires once, on
  the first pass; a wall time inside the gap fires once, at the first instant
  after the gap (several gap times collapse to that one instant).

Vixie cron also treats a minute field starting with ``*`` as stepping; here
only the hour field decides, so ``*/15 2 * * *`` still fires once on the
spring-forward day. Offsets are assumed to jump by less than 3 hours at a
time (true of every daylight-saving rule; not of historic date-line moves).

Errors: :meth:`Cadence.build` raises ValueError or TypeError naming the
argument (``every_ms``, ``cron``, ``tz``, ``start_at_ms``).

Signals emitted: none.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterator
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..rules import MAX_MS, check_int

__all__ = ["Cadence", "CatchUp", "MAX_MS", "CATCH_UP_CAP", "check_cron", "check_tz"]

#: Most occurrences :meth:`Cadence.catch_up` counts one by one; beyond it the
#: ``missed`` count saturates at this value (a cron firing every second that
#: was down for more than a day).
CATCH_UP_CAP = 100_000

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)
_SECOND = timedelta(seconds=1)
# Wall times up to this far before "after" can still fire after it, when a
# fall-back transition is near (the repeated hour's second pass).
_LOOKBACK = timedelta(hours=3)
_LOOKBACK_MS = 3 * 3_600_000


def _to_ms(moment: datetime) -> int:
    return (moment - _EPOCH) // _MS


def _from_ms(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def _offset_at(zone: ZoneInfo, ms: int) -> timedelta:
    return _from_ms(ms).astimezone(zone).utcoffset()


def check_tz(tz: object) -> ZoneInfo:
    """Return the ZoneInfo for the IANA name ``tz``.

    Raises:
        TypeError: ``tz`` is not a str.
        ValueError: ``tz`` names no zone known to this system (the empty
            string, a name too long for a file name and a directory of the
            zone database such as ``"Europe"`` included).
    """
    if not isinstance(tz, str):
        raise TypeError(f"tz must be an IANA zone name (str), got {type(tz).__name__}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as err:
        raise ValueError(f"tz must be an IANA zone name, got {tz!r} ({err})") from None
    except OSError:
        # zoneinfo opens the name as a file: a name longer than the system's
        # file names or a directory fails there. The path is not the caller's
        # business, so it is left out of the message.
        raise ValueError(f"tz must be an IANA zone name, got {tz!r}") from None


def check_cron(cron: object) -> tuple[str, ...]:
    """Return the fields of the cron expression ``cron`` (aliases expanded).

    Raises:
        TypeError: ``cron`` is not a str.
        ValueError: croniter rejects it, or it has neither 5 nor 6 fields
            (the 7-field year form and hashed ``H`` fields are refused).
    """
    if not isinstance(cron, str):
        raise TypeError(f"cron must be a str, got {type(cron).__name__}")
    from croniter import croniter  # here: a worker without cron schedules never loads it

    try:
        walls = croniter(cron, datetime(2000, 1, 1))
        fields = walls.expressions
        walls.get_next(datetime)  # an expression that never matches fails here
    except Exception as err:  # croniter raises several unrelated classes
        raise ValueError(f"cron is not a valid cron expression: {cron!r} ({err})") from None
    if len(fields) not in (5, 6):
        raise ValueError(f"cron must have 5 fields (or 6 with seconds), got {cron!r}")
    return tuple(str(f) for f in fields)


@dataclass(frozen=True)
class CatchUp:
    """What one pump does for a due schedule (docs/repeat.md, "After downtime").

    ``slot_ms`` is the latest occurrence at or before now (the one a minted
    job stands as); ``due`` how many occurrences fell due from the registry
    score up to now (at least 1); ``missed = due - 1``, the occurrences that
    were overtaken before any job was minted for them; ``next_ms`` the first
    occurrence after now.
    """

    slot_ms: int
    due: int
    next_ms: int

    @property
    def missed(self) -> int:
        return self.due - 1


@dataclass(frozen=True)
class Cadence:
    """A validated schedule timing: exactly one of ``every_ms`` and ``cron``.

    Build it with :meth:`build` (which validates); times are Unix ms.
    """

    every_ms: int | None
    cron: str | None
    tz: str
    start_at_ms: int | None

    @classmethod
    def build(cls, *, every_ms: int | None = None, cron: str | None = None,
              tz: str = "UTC", start_at_ms: int | None = None) -> "Cadence":
        """Validate and return a Cadence.

        Raises:
            ValueError: both or neither of ``every_ms`` and ``cron``;
                ``every_ms`` < 1; an invalid ``cron``; an unknown ``tz``;
                ``start_at_ms`` outside 0..2**53.
            TypeError: an argument of the wrong type (the message names it).
        """
        if (every_ms is None) == (cron is None):
            raise ValueError("exactly one of every_ms and cron must be given")
        if every_ms is not None:
            check_int("every_ms", every_ms, 1)
        if cron is not None:
            check_cron(cron)
            if cron != cron.strip():
                raise ValueError(f"cron must not have surrounding whitespace, got {cron!r}")
        check_tz(tz)
        if start_at_ms is not None:
            check_int("start_at_ms", start_at_ms, 0)
        return cls(every_ms, cron, tz, start_at_ms)

    # -- derived ---------------------------------------------------------

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    @property
    def steps_hours(self) -> bool:
        """True when the cron's hour field starts with ``*`` (fires on both
        passes of a repeated hour, skips wall times in a gap)."""
        return self.cron is not None and check_cron(self.cron)[1].startswith("*")

    def describe(self) -> str:
        """A short human form: ``every 1000 ms`` or ``cron '30 2 * * *' Europe/Berlin``."""
        if self.every_ms is not None:
            text = f"every {self.every_ms} ms"
        else:
            text = f"cron {self.cron!r} {self.tz}"
        if self.start_at_ms is not None:
            text += f" from {self.start_at_ms}"
        return text

    # -- the computation -------------------------------------------------

    def occurrences(self, after_ms: int) -> Iterator[int]:
        """Yield every fire instant > ``after_ms`` in increasing order (Unix ms)."""
        if self.every_ms is not None:
            slot = self._grid_next(after_ms)
            while True:
                yield slot
                slot += self.every_ms
        else:
            floor = after_ms
            if self.start_at_ms is not None:
                floor = max(after_ms, self.start_at_ms - 1)
            yield from _cron_times(self.cron, self.zone, self.steps_hours, floor)

    def next_after(self, after_ms: int) -> int:
        """Return the first fire instant strictly after ``after_ms`` (Unix ms)."""
        return next(self.occurrences(after_ms))

    def first_run(self, now_ms: int) -> int:
        """Return the first fire instant at or after ``now_ms`` (and ``start_at_ms``)."""
        return self.next_after(now_ms - 1)

    def catch_up(self, due_ms: int, now_ms: int) -> CatchUp:
        """Count what fell due between the registry score ``due_ms`` and ``now_ms``.

        ``due_ms`` is itself counted as an occurrence (it is the score the
        registry holds, due at or before now). Returns a :class:`CatchUp`.

        Raises:
            ValueError: ``due_ms`` is after ``now_ms`` (nothing is due).
        """
        if due_ms > now_ms:
            raise ValueError(f"due_ms {due_ms} is after now_ms {now_ms}: nothing is due")
        if self.every_ms is not None:
            anchor = self.start_at_ms or 0

            def at_or_before(x: int) -> int:  # grid points <= x
                return 0 if x < anchor else (x - anchor) // self.every_ms + 1

            later = at_or_before(now_ms) - at_or_before(due_ms)
            slot = anchor + (at_or_before(now_ms) - 1) * self.every_ms if later else due_ms
            return CatchUp(slot, 1 + later, self._grid_next(now_ms))
        slot, due = due_ms, 1
        for t in self.occurrences(due_ms):
            if t > now_ms:
                return CatchUp(slot, due, t)
            if due >= CATCH_UP_CAP:
                break
            slot, due = t, due + 1
        # Saturated: find the latest occurrence <= now by widening a window back.
        window = 1000
        while True:
            found = None
            for t in self.occurrences(max(now_ms - window, due_ms)):
                if t > now_ms:
                    if found is not None:
                        return CatchUp(found, CATCH_UP_CAP, t)
                    break
                found = t
            window *= 2

    def _grid_next(self, after_ms: int) -> int:
        anchor = self.start_at_ms or 0
        if after_ms < anchor:
            return anchor
        return anchor + ((after_ms - anchor) // self.every_ms + 1) * self.every_ms


def _gap_end(zone: ZoneInfo, before_ms: int, after_ms: int) -> int:
    """The transition instant in (before_ms, after_ms]: the first ms whose
    offset differs from the offset at ``before_ms`` (a binary search)."""
    old = _offset_at(zone, before_ms)
    lo, hi = before_ms, after_ms
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset_at(zone, mid) == old:
            lo = mid
        else:
            hi = mid
    return hi


def _wall_instants(zone: ZoneInfo, wall: datetime, steps_hours: bool) -> tuple[list[int], int]:
    """Map a naive local wall time to (its fire instants, a lower bound).

    The lower bound is the earliest reading of the wall time (the first pass,
    or the gap's end); it never decreases as the wall time grows, so no later
    wall time can fire before it.
    """
    first = _to_ms(wall.replace(tzinfo=zone, fold=0))
    second = _to_ms(wall.replace(tzinfo=zone, fold=1))
    if first == second:
        return [first], first
    if first < second:
        # The wall time happens twice (fall-back): first pass, then second.
        return ([first, second] if steps_hours else [first]), first
    # PEP 495 reads a nonexistent time with the offset before (fold=0) or
    # after (fold=1) the gap; the transition lies between the two readings.
    end = _gap_end(zone, second, first)
    return ([] if steps_hours else [end]), end


def _cron_times(cron: str, zone: ZoneInfo, steps_hours: bool, after_ms: int) -> Iterator[int]:
    from croniter import croniter

    local = _from_ms(after_ms).astimezone(zone).replace(tzinfo=None, microsecond=0)
    if _offset_at(zone, after_ms) != _offset_at(zone, after_ms + _LOOKBACK_MS):
        # A transition is near: on a fall-back, wall times earlier than
        # after's own can still have a second pass after it.
        start = local - _LOOKBACK
    else:
        start = local - _SECOND
    walls = croniter(cron, start)
    pending: list[int] = []
    last = None
    while True:
        instants, bound = _wall_instants(zone, walls.get_next(datetime), steps_hours)
        for t in instants:
            heapq.heappush(pending, t)
        while pending and pending[0] <= bound:
            t = heapq.heappop(pending)
            if t > after_ms and t != last:
                last = t
                yield t
