"""The persistence floor's settings: how durable an enqueue is, and whether
outcomes are archived (docs/durability.md). One home for the three keys'
rules; :mod:`echomq_django.conf` asks here.

- ``ENQUEUE_ON_COMMIT`` (default True): inside ``transaction.atomic()`` an
  enqueue is sent when the transaction commits, never if it rolls back.
- ``OUTBOX`` (default False): True for every queue, or a list of queue
  names: an enqueue writes an ``OutboxEntry`` row in the caller's
  transaction and the relay in runechomq puts it on the bus.
- ``ARCHIVE`` (default False): True, or a dict with ``TTL_MS`` (how long a
  record is kept, default 30 days), ``MAX`` (most records kept, default
  1,000,000) and ``STREAM_MAX`` (most events a queue's archive stream holds
  while no archiver reads it, default 100,000); every job that ends becomes a
  ``JobRecord`` row, written by the archiver in runechomq.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .rules import MAX_MS, check_int, check_queue_name

__all__ = ["Archive", "KEYS", "check", "build"]

KEYS = ("ENQUEUE_ON_COMMIT", "OUTBOX", "ARCHIVE")
ARCHIVE_DEFAULTS = {"TTL_MS": 30 * 86_400_000, "MAX": 1_000_000, "STREAM_MAX": 100_000}


@dataclass(frozen=True)
class Archive:
    """``ECHOMQ["ARCHIVE"]`` when on: record retention and the stream's cap."""

    ttl_ms: int
    max: int
    stream_max: int


def _archive(value: Any) -> Archive | None:
    """The ARCHIVE setting built; raises TypeError or ValueError naming the rule."""
    if value is False or value is None:
        return None
    if value is True:
        value = {}
    if not isinstance(value, dict):
        raise TypeError(f"ARCHIVE must be a bool or a dict of TTL_MS, MAX, STREAM_MAX, got "
                        f"{type(value).__name__}")
    unknown = set(value) - set(ARCHIVE_DEFAULTS)
    if unknown:
        raise ValueError(f"ARCHIVE has unknown keys {sorted(map(str, unknown))}; known: "
                         f"{sorted(ARCHIVE_DEFAULTS)}")
    merged = {**ARCHIVE_DEFAULTS, **value}
    return Archive(ttl_ms=check_int("ARCHIVE['TTL_MS']", merged["TTL_MS"], 1, MAX_MS),
                   max=check_int("ARCHIVE['MAX']", merged["MAX"], 1, MAX_MS),
                   stream_max=check_int("ARCHIVE['STREAM_MAX']", merged["STREAM_MAX"], 1,
                                        100_000_000))


def _outbox(value: Any) -> bool | frozenset[str]:
    """The OUTBOX setting built: a bool, or the frozenset of queues it covers."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return frozenset(check_queue_name(q) for q in value)
    raise TypeError(f"OUTBOX must be a bool or a list of queue names, got "
                    f"{type(value).__name__}")


def check(raw: dict) -> list[tuple[str, str, str]]:
    """``(check_id, key, message)`` for each bad floor setting (echomq.E016)."""
    problems = []
    if "ENQUEUE_ON_COMMIT" in raw and not isinstance(raw["ENQUEUE_ON_COMMIT"], bool):
        problems.append(("echomq.E016", "ENQUEUE_ON_COMMIT",
                         f"ENQUEUE_ON_COMMIT must be a bool, got "
                         f"{type(raw['ENQUEUE_ON_COMMIT']).__name__}"))
    for key, builder in (("OUTBOX", _outbox), ("ARCHIVE", _archive)):
        if key in raw:
            try:
                builder(raw[key])
            except (TypeError, ValueError) as err:
                problems.append(("echomq.E016", key, str(err)))
    return problems


def build(raw: dict) -> dict:
    """The Config fields of the floor settings (``raw`` already checked)."""
    return {"enqueue_on_commit": raw.get("ENQUEUE_ON_COMMIT", True),
            "outbox": _outbox(raw.get("OUTBOX", False)),
            "archive": _archive(raw.get("ARCHIVE", False))}


def outbox_covers(outbox: bool | frozenset[str], queue: str) -> bool:
    """Whether the OUTBOX setting covers ``queue``."""
    return outbox if isinstance(outbox, bool) else queue in outbox
