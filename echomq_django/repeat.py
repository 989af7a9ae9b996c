"""The recurring registry: named schedules that mint a fresh job per occurrence.

Usage::

    from echomq_django.repeat import Repeat
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
    ``tz``; see :mod:`echomq_django.cadence`.
``tz`` [settings.TIME_ZONE when Django settings are configured, else "UTC"]
    IANA zone, stored with the schedule.
``template``
    A JSON object (dict) that round-trips through JSON unchanged; the keys
    ``scheduled_for`` and ``missed`` are reserved for the occurrence.
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
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from . import scripts
from .cadence import MAX_MS, Cadence
from .ids import BrandedId
from .jobs import WAKE_CAP
from .keyspace import Keyspace, validate_queue_name

__all__ = [
    "Repeat", "RepeatEntry", "sync", "default_tz",
    "MISSED_POLICIES", "RESERVED_KEYS", "SKIP_GRACE_MS",
]

logger = logging.getLogger("echomq.repeat")

#: The after-downtime policies (docs/repeat.md, "After downtime").
MISSED_POLICIES = ("coalesce", "skip")
#: Keys the occurrence adds to the template; a template may not use them.
RESERVED_KEYS = ("scheduled_for", "missed")
#: With missed="skip", a lone due occurrence is still minted when the pump
#: reaches it at most this late (a deploy or a slow beat is not downtime).
SKIP_GRACE_MS = 60_000
#: Members read per ZRANGE call by :meth:`Repeat.list` and :func:`sync`.
LIST_BATCH = 500

_NAME = re.compile(r"\S{1,200}")

# Outcome codes of register.lua / upsert.lua.
_REGISTER = {1: "registered", 0: "exists", 2: "conflict", 3: "registered"}
_UPSERT = {1: "registered", 0: "unchanged", 2: "updated", 3: "registered"}


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
    """Return ``name`` if it is a valid schedule name.

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: not 1-200 printable characters without whitespace.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not _NAME.fullmatch(name) or not name.isprintable():
        raise ValueError(
            f"name must be 1-200 printable characters without whitespace, got {name!r}"
        )
    return name


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _check_template(template: object) -> dict:
    if not isinstance(template, dict):
        raise TypeError(f"template must be a JSON object (dict), got {type(template).__name__}")
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
class _Definition:
    """A validated schedule definition, ready for register.lua / upsert.lua."""

    name: str
    cadence: Cadence
    template: dict
    missed: str

    @classmethod
    def build(cls, name, *, every_ms=None, cron=None, tz=None, template=None,
              start_at_ms=None, missed="coalesce") -> "_Definition":
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
        return _canonical({"every_ms": c.every_ms, "cron": c.cron, "tz": c.tz,
                           "start_at_ms": c.start_at_ms})

    def definition_json(self) -> str:
        c = self.cadence
        return _canonical({"every_ms": c.every_ms, "cron": c.cron, "tz": c.tz,
                           "start_at_ms": c.start_at_ms, "template": self.template,
                           "missed": self.missed})

    def argv(self, first_run_ms: int) -> list:
        c = self.cadence
        return [self.name, self.definition_json(), self.timing_json(),
                "" if c.every_ms is None else c.every_ms, c.cron or "", c.tz,
                _canonical(self.template), self.missed,
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


def _decode_hash(raw: dict) -> dict:
    return {scripts.decode(k): scripts.decode(v) for k, v in raw.items()}


def _server_now_ms(conn) -> int:
    seconds, micros = conn.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _check_limit(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 1 <= value <= 100_000:
        raise ValueError(f"{name} must be in 1..100000, got {value}")
    return value


def _check_ms(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not 0 <= value <= MAX_MS:
        raise ValueError(f"{name} must be in 0..{MAX_MS}, got {value}")
    return value


class Repeat:
    """The recurring registry on one connection (docs/repeat.md).

    Thread-safe as redis-py is. Every method validates its arguments first
    (ValueError or TypeError naming the argument, nothing written); the clock
    is always the server's ``TIME``.
    """

    def __init__(self, conn) -> None:
        self.conn = conn

    # -- definitions -----------------------------------------------------

    def register(self, queue: str, name: str, *, every_ms: int | None = None,
                 cron: str | None = None, tz: str | None = None, template: dict,
                 start_at_ms: int | None = None, missed: str = "coalesce") -> str:
        """Add the schedule ``name`` unless it is live (docs/repeat.md, "register").

        The first run is the first occurrence at or after the server's now
        (and ``start_at_ms``). Returns ``"registered"``; ``"exists"`` when the
        live name has this very definition (nothing changes, the next run is
        kept); ``"conflict"`` when it has another (nothing changes). A name
        whose member or record is missing (an orphan) is registered afresh.

        Raises:
            ValueError, TypeError: a bad argument (see the module doc).
        """
        return _REGISTER[self._write("register", queue, name, every_ms=every_ms, cron=cron,
                                     tz=tz, template=template, start_at_ms=start_at_ms,
                                     missed=missed)]

    def upsert(self, queue: str, name: str, *, every_ms: int | None = None,
               cron: str | None = None, tz: str | None = None, template: dict,
               start_at_ms: int | None = None, missed: str = "coalesce") -> str:
        """Write the schedule ``name``, replacing a different definition
        (docs/repeat.md, "upsert").

        Returns ``"registered"`` (new name), ``"unchanged"`` (same definition;
        nothing changes) or ``"updated"``. An update that changes the timing
        (every_ms, cron, tz, start_at_ms) moves the next run to the new
        definition's first occurrence from the server's now; one that only
        changes the template or ``missed`` keeps the next run.

        Raises:
            ValueError, TypeError: a bad argument (see the module doc).
        """
        return _UPSERT[self._write("upsert", queue, name, every_ms=every_ms, cron=cron,
                                   tz=tz, template=template, start_at_ms=start_at_ms,
                                   missed=missed)]

    def _write(self, script: str, queue: str, name: str, **options) -> int:
        ks = Keyspace(queue)
        definition = _Definition.build(name, **options)
        first_run = definition.cadence.first_run(_server_now_ms(self.conn))
        return int(scripts.run(self.conn, script, [ks.repeat, ks.repeat_record(name)],
                               definition.argv(first_run)))

    def remove(self, queue: str, name: str) -> bool:
        """Remove the schedule ``name``; return whether it existed.

        Jobs already minted are untouched. Raises ValueError for a bad queue
        or name.
        """
        ks = Keyspace(queue)
        validate_name(name)
        return scripts.run(self.conn, "unregister", [ks.repeat, ks.repeat_record(name)],
                           [name]) == 1

    # -- reads -----------------------------------------------------------

    def get(self, queue: str, name: str) -> RepeatEntry | None:
        """Return the schedule ``name`` as a :class:`RepeatEntry`, or None
        when it has no record. ``next_run_ms`` is None for a record without
        a registry member.

        Raises:
            ValueError: bad queue or name, or a record that cannot be read.
        """
        ks = Keyspace(queue)
        validate_name(name)
        pipe = self.conn.pipeline(transaction=False)
        pipe.hgetall(ks.repeat_record(name))
        pipe.zscore(ks.repeat, name)
        raw, score = pipe.execute()
        if not raw:
            return None
        return RepeatEntry.from_hash(queue, name, _decode_hash(raw), score)

    def list(self, queue: str) -> list[RepeatEntry]:
        """Every live schedule of ``queue``, by next run (earliest first).

        Reads the registry in batches of :data:`LIST_BATCH` (ZRANGE by
        index), never KEYS or SCAN. Members without a readable record are
        left out and logged (see :func:`sync` for repair).
        """
        entries = []
        for name, score, raw in self._members(Keyspace(queue)):
            if not raw:
                logger.warning("repeat %s/%s: registry member without a record", queue, name)
                continue
            try:
                entries.append(RepeatEntry.from_hash(queue, name, raw, score))
            except (ValueError, KeyError, TypeError) as err:
                logger.error("repeat %s/%s: unreadable record (%s)", queue, name, err)
        return entries

    def _members(self, ks: Keyspace) -> Iterator[tuple[str, float, dict]]:
        start = 0
        while True:
            batch = self.conn.zrange(ks.repeat, start, start + LIST_BATCH - 1, withscores=True)
            if not batch:
                return
            pipe = self.conn.pipeline(transaction=False)
            for member, _ in batch:
                pipe.hgetall(ks.repeat_record(scripts.decode(member)))
            for (member, score), raw in zip(batch, pipe.execute()):
                yield scripts.decode(member), score, _decode_hash(raw)
            if len(batch) < LIST_BATCH:
                return
            start += LIST_BATCH

    def due(self, queue: str, limit: int = 100) -> list[tuple[str, int]]:
        """Return up to ``limit`` ``(name, next_run_ms)`` pairs due at the
        server's now, earliest first (the seed's ``due/3``)."""
        return self._due(Keyspace(queue), _check_limit("limit", limit))[1]

    def _due(self, ks: Keyspace, limit: int) -> tuple[int, list[tuple[str, int]]]:
        reply = scripts.run(self.conn, "due", [ks.repeat], [limit])
        flat = reply[1:]
        pairs = [(flat[i], int(float(flat[i + 1]))) for i in range(0, len(flat), 2)]
        return int(reply[0]), pairs

    # -- the metronome's work --------------------------------------------

    def advance(self, queue: str, name: str, *, expected_ms: int, next_ms: int) -> bool:
        """Move ``name``'s next run from ``expected_ms`` to ``next_ms`` without
        minting (the seed's ``advance/4``), as a compare-and-set: returns False
        and changes nothing when the score is not ``expected_ms``."""
        ks = Keyspace(queue)
        validate_name(name)
        _check_ms("expected_ms", expected_ms)
        _check_ms("next_ms", next_ms)
        return self._mint(ks, name, expected_ms, next_ms, "", "", "", 0, 0) == 2

    def _mint(self, ks, name, expected_ms, next_ms, version, job_id, payload, slot_ms,
              count) -> int:
        job_key = ks.job(job_id) if job_id else ks.job("-")
        return int(scripts.run(
            self.conn, "mint",
            [ks.repeat, ks.repeat_record(name), job_key, ks.pending, ks.wake],
            [name, expected_ms, next_ms, version, job_id, payload, slot_ms, count, WAKE_CAP],
        ))

    def pump(self, queue: str, limit: int = 100) -> int:
        """Mint one job per due schedule of ``queue`` and advance each; return
        how many jobs were minted (docs/repeat.md, "pump").

        Reads up to ``limit`` due names and the server's now in one script;
        computes each name's catch-up (:meth:`Cadence.catch_up`) here, since
        cron needs croniter; then mints and advances in one compare-and-set
        per name, so a concurrent or resumed pumper that read the same score
        mints nothing. Payload: the template plus ``scheduled_for`` (the
        latest occurrence due, ms) and ``missed`` (occurrences it overtook).
        With ``missed="skip"`` nothing is minted unless exactly one
        occurrence is due and it is at most :data:`SKIP_GRACE_MS` late.
        Orphan members and unreadable records are taken off the registry and
        logged, never retried every beat.
        """
        ks = Keyspace(queue)
        now, due = self._due(ks, _check_limit("limit", limit))
        if not due:
            return 0
        pipe = self.conn.pipeline(transaction=False)
        for name, _ in due:
            pipe.hgetall(ks.repeat_record(name))
        minted = 0
        for (name, score), raw in zip(due, pipe.execute()):
            minted += self._pump_one(ks, name, score, _decode_hash(raw), now)
        return minted

    def _pump_one(self, ks: Keyspace, name: str, score: int, raw: dict, now: int) -> int:
        if not raw:
            if scripts.run(self.conn, "drop_member", [ks.repeat, ks.repeat_record(name)],
                           [name, score, ""]):
                logger.warning("repeat %s/%s: member without a record removed from the "
                               "registry", ks.queue, name)
            return 0
        try:
            entry = RepeatEntry.from_hash(ks.queue, name, raw, score)
            plan = entry.cadence.catch_up(score, now)
        except (ValueError, KeyError, TypeError) as err:
            if scripts.run(self.conn, "drop_member", [ks.repeat, ks.repeat_record(name)],
                           [name, score, raw.get("version", "")]):
                logger.error("repeat %s/%s: unreadable record (%s); taken off the registry, "
                             "record kept", ks.queue, name, err)
            return 0
        late_ms = now - plan.slot_ms
        if entry.missed == "skip" and (plan.due > 1 or late_ms > SKIP_GRACE_MS):
            if self._mint(ks, name, score, plan.next_ms, entry.version, "", "", plan.slot_ms,
                          plan.due) == 2:
                logger.info("repeat %s/%s: skipped %d occurrence(s) up to %d; next %d",
                            ks.queue, name, plan.due, plan.slot_ms, plan.next_ms)
            return 0
        job_id = BrandedId.generate("JOB")
        payload = dict(entry.template, scheduled_for=plan.slot_ms, missed=plan.missed)
        done = self._mint(ks, name, score, plan.next_ms, entry.version, job_id,
                          _canonical(payload), plan.slot_ms, plan.missed)
        if done == 1 and plan.missed:
            logger.info("repeat %s/%s: catch-up job %s for %d occurrence(s) up to %d",
                        ks.queue, name, job_id, plan.due, plan.slot_ms)
        return 1 if done == 1 else 0

    def run_now(self, queue: str, name: str) -> str:
        """Mint one occurrence of ``name`` now and return its JOB id; the
        grid (next run) is not moved. The payload's ``scheduled_for`` is the
        server's now and ``missed`` is 0.

        Raises:
            LookupError: no schedule ``name`` in ``queue``.
            ValueError: bad queue or name, or an unreadable record.
        """
        ks = Keyspace(queue)
        validate_name(name)
        for _ in range(3):  # retried only if an upsert lands in between
            raw = _decode_hash(self.conn.hgetall(ks.repeat_record(name)))
            if not raw:
                raise LookupError(f"no recurring schedule {name!r} in queue {queue!r}")
            entry = RepeatEntry.from_hash(queue, name, raw, None)
            now = _server_now_ms(self.conn)
            job_id = BrandedId.generate("JOB")
            payload = _canonical(dict(entry.template, scheduled_for=now, missed=0))
            done = scripts.run(self.conn, "run_now",
                               [ks.repeat_record(name), ks.job(job_id), ks.pending, ks.wake],
                               [name, entry.version, job_id, payload, now, WAKE_CAP])
            if done == 1:
                return job_id
        raise LookupError(f"recurring schedule {name!r} in queue {queue!r} kept changing")


# -- boot-time sync ------------------------------------------------------------

_DECLARED_KEYS = {"queue", "name", "every_ms", "cron", "tz", "template", "missed",
                  "start_at_ms"}


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def plan(declared: Iterable[dict]) -> list[tuple[Keyspace, "_Definition"]]:
    """Validate declared schedules without writing anything (what :func:`sync`
    does first, and what the ``echomq.E011`` system check runs).

    Returns ``[(Keyspace, definition), ...]`` in order.

    Raises:
        ValueError, TypeError: a bad declaration (naming the entry), or the
            same (queue, name) declared twice.
    """
    plans: list[tuple[Keyspace, _Definition]] = []
    seen: set[tuple[str, str]] = set()
    for index, item in enumerate(declared):
        if not isinstance(item, dict):
            raise TypeError(f"declared[{index}] must be a dict, got {type(item).__name__}")
        unknown = set(item) - _DECLARED_KEYS
        if unknown:
            raise ValueError(f"declared[{index}] has unknown keys {sorted(unknown)}")
        try:
            ks = Keyspace(item.get("queue"))
            definition = _Definition.build(
                item.get("name"), every_ms=item.get("every_ms"), cron=item.get("cron"),
                tz=item.get("tz"), template=_or(item.get("template"), {}),
                start_at_ms=item.get("start_at_ms"), missed=_or(item.get("missed"), "coalesce"))
        except (TypeError, ValueError) as err:
            raise type(err)(f"declared[{index}] ({item.get('name')!r}): {err}") from None
        key = (ks.queue, definition.name)
        if key in seen:
            raise ValueError(f"declared[{index}]: {key} is declared twice")
        seen.add(key)
        plans.append((ks, definition))
    return plans


def sync(conn, declared: Iterable[dict], *, prune: bool = False,
         queues: Iterable[str] = ()) -> dict[str, int]:
    """Make the registry match the declared schedules (docs/repeat.md, "sync").

    ``declared``: dicts with keys ``queue``, ``name``, ``every_ms`` or
    ``cron``, and optionally ``tz``, ``template`` (default ``{}``),
    ``missed``, ``start_at_ms`` (None means the default for each). Every entry is validated before anything is
    written. An unchanged name is untouched (its next run is kept); a changed
    one is upserted and logged; a name whose member or record was missing is
    written afresh (``repaired``). With ``prune=True`` the live names of the
    queues in ``declared`` or ``queues`` that are not declared are removed;
    without it they are counted as ``undeclared``. Registry members without a
    record in those queues are removed (``orphans``).

    Returns counts: ``registered``, ``unchanged``, ``updated``, ``repaired``,
    ``removed``, ``undeclared``, ``orphans``.

    Raises:
        ValueError, TypeError: a bad declaration (naming the entry), or the
            same (queue, name) declared twice; nothing is written then.
    """
    plans = plan(declared)
    seen = {(ks.queue, definition.name) for ks, definition in plans}
    all_queues = {ks.queue for ks, _ in plans} | {validate_queue_name(q) for q in queues}

    counts = dict.fromkeys(("registered", "unchanged", "updated", "repaired", "removed",
                            "undeclared", "orphans"), 0)
    now = _server_now_ms(conn)
    for ks, definition in plans:
        code = int(scripts.run(conn, "upsert", [ks.repeat, ks.repeat_record(definition.name)],
                               definition.argv(definition.cadence.first_run(now))))
        outcome = {1: "registered", 0: "unchanged", 2: "updated", 3: "repaired"}[code]
        counts[outcome] += 1
        if outcome != "unchanged":
            logger.info("repeat %s/%s: %s (%s)", ks.queue, definition.name, outcome,
                        definition.cadence.describe())

    repeat = Repeat(conn)
    for queue in sorted(all_queues):
        ks = Keyspace(queue)
        for name, score, raw in list(repeat._members(ks)):
            if (queue, name) in seen:
                continue
            if not raw:
                if scripts.run(conn, "drop_member", [ks.repeat, ks.repeat_record(name)],
                               [name, int(score), ""]):
                    counts["orphans"] += 1
                    logger.warning("repeat %s/%s: member without a record removed", queue, name)
            elif prune:
                if repeat.remove(queue, name):
                    counts["removed"] += 1
                    logger.info("repeat %s/%s: removed (no longer declared)", queue, name)
            else:
                counts["undeclared"] += 1
                logger.info("repeat %s/%s: live but not declared (kept; prune to remove)",
                            queue, name)
    return counts
