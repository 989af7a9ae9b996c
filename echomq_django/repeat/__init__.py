"""The recurring registry: named schedules that mint a fresh job per occurrence.

Usage::

    from echomq_django import Repeat
    rep = Repeat(conn)
    rep.register("mail", "digest", cron="0 7 * * *", tz="Europe/Berlin",
                 template={"job": "app.jobs.digest", "args": [], "kwargs": {}})
    rep.pump("mail")          # the metronome calls this every beat

A schedule is one member of ``emq:{q}:repeat`` (a ZSET scored by its next run,
Unix ms on the server clock) plus its record ``emq:{q}:repeat:<name>`` (a
HASH). Each due occurrence becomes its own ``JOB`` row on ``pending`` whose
payload is the template plus ``scheduled_for`` and ``missed``. Minting and
advancing the next run are one Lua compare-and-set on the registry score, so
many metronomes mint exactly one job per occurrence. The whole contract
(keys, scripts, policies) is ``docs/repeat.md``.

Options (arguments of :meth:`Repeat.register` and :meth:`Repeat.upsert`):

``name``
    1-200 printable characters, no whitespace; unique within the queue.
``every_ms`` / ``cron`` (exactly one)
    A grid ``start_at_ms + k * every_ms`` (``start_at_ms`` defaults to the
    Unix epoch), or a 5-field cron (6 with trailing seconds) evaluated in
    ``tz``; see :mod:`echomq_django.repeat.cadence`.
``tz`` [settings.TIME_ZONE when Django settings are configured, else "UTC"]
    IANA zone, stored with the schedule.
``template``
    A JSON object (dict) that round-trips through JSON unchanged, nested at
    most 100 levels deep and never containing itself (PayloadError, a
    TypeError); the keys ``scheduled_for`` and ``missed`` are reserved for
    the occurrence.
``start_at_ms`` [None]
    No occurrence before this Unix ms; anchors an every_ms grid.
``missed`` ["coalesce"]
    After downtime, "coalesce" mints one job standing for every overtaken
    occurrence (``missed`` = how many); "skip" mints none (see
    :data:`SKIP_GRACE_MS`).

Errors: ValueError or TypeError naming the argument, raised before anything
is written; :class:`~echomq_django.exceptions.KindError` /
:class:`~echomq_django.exceptions.StateError` only on a caller bug in the
low-level surfaces; ``redis.RedisError`` for server failures.

Signals emitted: none. Logs to the ``echomq.repeat`` logger.

The package, by concern: :mod:`.cadence` (when a schedule fires; pure),
:mod:`.definition` (a validated definition and a stored entry),
:mod:`.registry` (:class:`Repeat`: define, read, run now), :mod:`.pump`
(mint due occurrences; the metronome's part) and :mod:`.sync` (boot-time
sync of the declared schedules).
"""

from .definition import (
    MISSED_POLICIES,
    RESERVED_KEYS,
    RepeatEntry,
    default_tz,
    validate_name,
)
from .pump import SKIP_GRACE_MS
from .registry import LIST_BATCH, Repeat
from .sync import declared_schedules, plan, sync

__all__ = [
    "Repeat", "RepeatEntry", "sync", "plan", "declared_schedules", "default_tz", "validate_name",
    "MISSED_POLICIES", "RESERVED_KEYS", "SKIP_GRACE_MS", "LIST_BATCH",
]
