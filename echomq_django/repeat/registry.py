"""Repeat: define, read and run recurring schedules (the seed's ``EchoMQ.Repeat``).

Usage::

    from echomq_django import Repeat
    rep = Repeat(conn)
    rep.register("mail", "digest", cron="0 7 * * *", tz="Europe/Berlin",
                 template={"job": "app.jobs.digest", "args": [], "kwargs": {}})
    rep.list("mail"); rep.run_now("mail", "digest"); rep.remove("mail", "digest")
    rep.pump("mail")          # the metronome calls this every beat (see .pump)

The options and errors are in :mod:`echomq_django.repeat`; the contract in
docs/repeat.md.
"""

from __future__ import annotations

import logging
from typing import Iterator

from .. import rules
from ..protocol import scripts
from ..protocol.clock import mint_now_ms, server_now_ms
from ..protocol.ids import BrandedId
from ..protocol.keyspace import WAKE_CAP, Keyspace
from .definition import Definition, RepeatEntry, canonical
from .pump import Pump

__all__ = ["Repeat", "LIST_BATCH"]

logger = logging.getLogger("echomq.repeat")

#: Members read per ZRANGE call by :meth:`Repeat.list` and :func:`.sync.sync`.
LIST_BATCH = 500

# Outcome codes of register.lua / upsert.lua.
_REGISTER = {1: "registered", 0: "exists", 2: "conflict", 3: "registered"}
_UPSERT = {1: "registered", 0: "unchanged", 2: "updated", 3: "registered"}


class Repeat:
    """The recurring registry on one connection (docs/repeat.md).

    Thread-safe as redis-py is. Every method validates its arguments first
    (ValueError or TypeError naming the argument, nothing written); the clock
    is always the server's ``TIME``.
    """

    def __init__(self, conn) -> None:
        self.conn = conn
        self._pump = Pump(conn)

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
        definition = Definition.build(name, **options)
        first_run = definition.cadence.first_run(server_now_ms(self.conn, queue))
        return int(scripts.run(self.conn, f"repeat/{script}",
                               [ks.repeat, ks.repeat_record(name), ks.beat],
                               definition.argv(first_run)))

    def remove(self, queue: str, name: str) -> bool:
        """Remove the schedule ``name``; return whether it existed.

        Jobs already minted are untouched. Raises ValueError for a bad queue
        or name.
        """
        ks = Keyspace(queue)
        rules.check_schedule_name(name)
        return scripts.run(self.conn, "repeat/unregister", [ks.repeat, ks.repeat_record(name)],
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
        rules.check_schedule_name(name)
        pipe = self.conn.pipeline(transaction=False)
        pipe.hgetall(ks.repeat_record(name))
        pipe.zscore(ks.repeat, name)
        raw, score = pipe.execute()
        if not raw:
            return None
        return RepeatEntry.from_hash(queue, name, scripts.decode_hash(raw), score)

    def list(self, queue: str) -> list[RepeatEntry]:
        """Every live schedule of ``queue``, by next run (earliest first).

        Reads the registry in batches of :data:`LIST_BATCH` (ZRANGE by
        index), never KEYS or SCAN. Members without a readable record are
        left out and logged (see :func:`sync` for repair).
        """
        entries = []
        for name, score, raw in self.members(queue):
            if not raw:
                logger.warning("repeat %s/%s: registry member without a record", queue, name)
                continue
            try:
                entries.append(RepeatEntry.from_hash(queue, name, raw, score))
            except (ValueError, KeyError, TypeError) as err:
                logger.error("repeat %s/%s: unreadable record (%s)", queue, name, err)
        return entries

    def members(self, queue: str) -> Iterator[tuple[str, float, dict]]:
        """Every registry member of ``queue`` as ``(name, next_run_ms, record)``,
        orphans included (``record`` is ``{}`` for a member without one); read
        :data:`LIST_BATCH` at a time."""
        ks = Keyspace(queue)
        start = 0
        while True:
            batch = self.conn.zrange(ks.repeat, start, start + LIST_BATCH - 1, withscores=True)
            if not batch:
                return
            pipe = self.conn.pipeline(transaction=False)
            for member, _ in batch:
                pipe.hgetall(ks.repeat_record(scripts.decode(member)))
            for (member, score), raw in zip(batch, pipe.execute()):
                yield scripts.decode(member), score, scripts.decode_hash(raw)
            if len(batch) < LIST_BATCH:
                return
            start += LIST_BATCH

    # -- the pump (see .pump) ----------------------------------------------

    def due(self, queue: str, limit: int = 100) -> list[tuple[str, int]]:
        """:meth:`Pump.due`: up to ``limit`` ``(name, next_run_ms)`` due now."""
        return self._pump.due(queue, limit)

    def advance(self, queue: str, name: str, *, expected_ms: int, next_ms: int) -> bool:
        """:meth:`Pump.advance`: move the next run without minting (compare-and-set)."""
        return self._pump.advance(queue, name, expected_ms=expected_ms, next_ms=next_ms)

    def pump(self, queue: str, limit: int = 100) -> int:
        """:meth:`Pump.pump`: mint one job per due schedule; return how many."""
        return self._pump.pump(queue, limit)

    def run_now(self, queue: str, name: str) -> str:
        """Mint one occurrence of ``name`` now and return its JOB id; the
        grid (next run) is not moved. The payload's ``scheduled_for`` is the
        server's now and ``missed`` is 0.

        Raises:
            LookupError: no schedule ``name`` in ``queue``.
            ValueError: bad queue or name, or an unreadable record.
        """
        ks = Keyspace(queue)
        rules.check_schedule_name(name)
        for _ in range(3):  # retried only if an upsert lands in between
            raw = scripts.decode_hash(self.conn.hgetall(ks.repeat_record(name)))
            if not raw:
                raise LookupError(f"no recurring schedule {name!r} in queue {queue!r}")
            entry = RepeatEntry.from_hash(queue, name, raw, None)
            now = server_now_ms(self.conn, queue)
            job_id = BrandedId.generate("JOB", mint_now_ms(self.conn, queue))
            payload = canonical(dict(entry.template, scheduled_for=now, missed=0))
            done = scripts.run(self.conn, "repeat/run_now",
                               [ks.repeat_record(name), ks.job(job_id), ks.pending, ks.wake],
                               [name, entry.version, job_id, payload, now, WAKE_CAP])
            if done == 1:
                return job_id
        raise LookupError(f"recurring schedule {name!r} in queue {queue!r} kept changing")
