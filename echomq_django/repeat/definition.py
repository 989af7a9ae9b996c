"""A recurring schedule's definition (validated, ready for the scripts) and
its stored entry (:class:`RepeatEntry`, typed from the record hash).

The rules (docs/repeat.md, "Options"): a name of 1-200 printable
characters without whitespace; exactly one of ``every_ms`` and ``cron``
(:mod:`.cadence`); a zone; a JSON-object template (at most
``rules.MAX_JSON_DEPTH`` deep, never containing itself) without the reserved
keys ``scheduled_for`` and ``missed``; an after-downtime policy. Every check raises
ValueError or TypeError naming the argument; nothing here touches Redis.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .. import rules
from .cadence import Cadence

__all__ = ["Definition", "RepeatEntry", "MISSED_POLICIES", "RESERVED_KEYS", "default_tz",
           "validate_name", "canonical"]

#: The after-downtime policies (docs/repeat.md, "After downtime").
MISSED_POLICIES = ("coalesce", "skip")
#: Keys the occurrence adds to the template; a template may not use them.
RESERVED_KEYS = ("scheduled_for", "missed")


def default_tz() -> str:
    """The zone a schedule gets when ``tz`` is None: Django's ``TIME_ZONE`` when
    settings can be read (and it is set), else ``"UTC"``."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    try:
        # Reading the attribute loads DJANGO_SETTINGS_MODULE if it is set.
        return getattr(settings, "TIME_ZONE", None) or "UTC"
    except ImproperlyConfigured:
        return "UTC"


def validate_name(name: object) -> str:
    """:func:`echomq_django.rules.check_schedule_name` (TypeError, ValueError)."""
    return rules.check_schedule_name(name)


def canonical(value: Any) -> str:
    """``value`` as canonical JSON text (sorted keys, no spaces): the bytes
    register.lua and upsert.lua compare."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _check_template(template: object) -> dict:
    if not isinstance(template, dict):
        raise TypeError(f"template must be a JSON object (dict), got {type(template).__name__}")
    rules.check_json_value("template", template)
    try:
        round_trip = json.loads(json.dumps(template, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise TypeError(f"template must be JSON-serialisable: {err}") from None
    if round_trip != template:
        raise ValueError(
            "template must round-trip through JSON unchanged (str keys, lists not tuples)"
        )
    clash = [key for key in RESERVED_KEYS if key in template]
    if clash:
        raise ValueError(f"template must not use the reserved keys {clash}")
    return template


@dataclass(frozen=True)
class Definition:
    """A validated schedule definition, ready for register.lua / upsert.lua."""

    name: str
    cadence: Cadence
    template: dict
    missed: str

    @classmethod
    def build(cls, name, *, every_ms=None, cron=None, tz=None, template=None,
              start_at_ms=None, missed="coalesce") -> "Definition":
        validate_name(name)
        cadence = Cadence.build(every_ms=every_ms, cron=cron,
                                tz=default_tz() if tz is None else tz,
                                start_at_ms=start_at_ms)
        _check_template(template)
        if missed not in MISSED_POLICIES:
            raise ValueError(f"missed must be one of {MISSED_POLICIES}, got {missed!r}")
        return cls(name, cadence, template, missed)

    def timing_json(self) -> str:
        c = self.cadence
        return canonical({"every_ms": c.every_ms, "cron": c.cron, "tz": c.tz,
                           "start_at_ms": c.start_at_ms})

    def definition_json(self) -> str:
        c = self.cadence
        return canonical({"every_ms": c.every_ms, "cron": c.cron, "tz": c.tz,
                           "start_at_ms": c.start_at_ms, "template": self.template,
                           "missed": self.missed})

    def argv(self, first_run_ms: int) -> list:
        c = self.cadence
        return [self.name, self.definition_json(), self.timing_json(),
                "" if c.every_ms is None else c.every_ms, c.cron or "", c.tz,
                canonical(self.template), self.missed,
                "" if c.start_at_ms is None else c.start_at_ms, first_run_ms]


def _opt_int(raw: dict, key: str) -> int | None:
    value = raw.get(key)
    return None if value in (None, "") else int(value)


@dataclass(frozen=True)
class RepeatEntry:
    """One schedule as stored, typed (docs/repeat.md, "Keys").

    Times are Unix ms on the server clock. ``next_run_ms`` is the registry
    score (None for a record whose member is missing, an orphan);
    ``last_run_ms`` / ``last_job_id`` describe the last minted job (None
    before the first); ``last_scheduled_for_ms`` the grid slot the pump last
    minted; ``skipped`` how many occurrences ``missed="skip"`` dropped;
    ``version`` counts definition writes.
    """

    queue: str
    name: str
    every_ms: int | None
    cron: str | None
    tz: str
    template: dict
    missed: str
    next_run_ms: int | None
    last_run_ms: int | None
    last_job_id: str | None
    start_at_ms: int | None
    last_scheduled_for_ms: int | None = None
    skipped: int = 0
    version: str = ""

    @property
    def cadence(self) -> Cadence:
        """The schedule's timing, validated (ValueError if the record is corrupt)."""
        return Cadence.build(every_ms=self.every_ms, cron=self.cron, tz=self.tz,
                             start_at_ms=self.start_at_ms)

    @classmethod
    def from_hash(cls, queue: str, name: str, raw: dict, score: Any) -> "RepeatEntry":
        """Build from a decoded record hash and registry score.

        Raises ValueError for a record that cannot be read (a missing field,
        bad JSON, a non-integer time). The zone and cron are checked only by
        :attr:`cadence`.
        """
        try:
            return cls._from_hash(queue, name, raw, score)
        except (KeyError, TypeError) as err:
            raise ValueError(f"record of {name!r} cannot be read: {err!r}") from None

    @classmethod
    def _from_hash(cls, queue: str, name: str, raw: dict, score: Any) -> "RepeatEntry":
        template = json.loads(raw["template"])
        if not isinstance(template, dict):
            raise ValueError("template is not a JSON object")
        return cls(
            queue=queue,
            name=name,
            every_ms=_opt_int(raw, "every_ms"),
            cron=raw.get("cron") or None,
            tz=raw["tz"],
            template=template,
            missed=raw.get("missed") or "coalesce",
            next_run_ms=None if score is None else int(float(score)),
            last_run_ms=_opt_int(raw, "last_run_ms"),
            last_job_id=raw.get("last_job_id") or None,
            start_at_ms=_opt_int(raw, "start_at_ms"),
            last_scheduled_for_ms=_opt_int(raw, "last_scheduled_for_ms"),
            skipped=_opt_int(raw, "skipped") or 0,
            version=raw.get("version", ""),
        )
