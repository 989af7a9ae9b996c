"""The pump: mint one job per due occurrence and advance the schedule, atomically.

The metronome calls :meth:`Pump.pump` on every beat of a queue
(docs/repeat.md, "pump"). Minting and advancing are one compare-and-set on the
registry score (``lua/repeat/mint.lua``), so any number of metronomes mint
exactly one job per occurrence. Python computes each catch-up (cron needs
croniter) from the server's now, which ``lua/repeat/due.lua`` returns with
the due names.
"""

from __future__ import annotations

import logging

from .. import rules
from ..protocol import scripts
from ..protocol.clock import mint_now_ms
from ..protocol.ids import BrandedId
from ..protocol.keyspace import WAKE_CAP, Keyspace
from .definition import RepeatEntry, canonical

__all__ = ["Pump", "SKIP_GRACE_MS", "malformed"]

logger = logging.getLogger("echomq.repeat")

#: With missed="skip", a lone due occurrence is still minted when the pump
#: reaches it at most this late (a deploy or a slow beat is not downtime).
SKIP_GRACE_MS = 60_000


def malformed(name: str) -> str | None:
    """Why ``name`` cannot be a schedule's name (the rule's message), or None.

    A registry member with such a name (``""``, say, written by hand or by a
    client other than ours) can never be minted: the scripts refuse it."""
    try:
        rules.check_schedule_name(name)
    except ValueError as err:
        return str(err)
    return None


class Pump:
    """Due reads, advance and pump on one connection (the seed's ``due/3``,
    ``advance/4`` and the metronome's sweep). Thread-safe as redis-py is."""

    def __init__(self, conn) -> None:
        self.conn = conn

    def due(self, queue: str, limit: int = 100) -> list[tuple[str, int]]:
        """Return up to ``limit`` ``(name, next_run_ms)`` pairs due at the
        server's now, earliest first (the seed's ``due/3``)."""
        return self._due(Keyspace(queue), rules.check_int("limit", limit, 1, 100_000))[1]

    def _due(self, ks: Keyspace, limit: int) -> tuple[int, list[tuple[str, int]]]:
        reply = scripts.run(self.conn, "repeat/due", [ks.repeat], [limit])
        flat = reply[1:]
        pairs = [(flat[i], int(float(flat[i + 1]))) for i in range(0, len(flat), 2)]
        return int(reply[0]), pairs

    def advance(self, queue: str, name: str, *, expected_ms: int, next_ms: int) -> bool:
        """Move ``name``'s next run from ``expected_ms`` to ``next_ms`` without
        minting (the seed's ``advance/4``), as a compare-and-set: returns False
        and changes nothing when the score is not ``expected_ms``."""
        ks = Keyspace(queue)
        rules.check_schedule_name(name)
        rules.check_ms("expected_ms", expected_ms)
        rules.check_ms("next_ms", next_ms)
        return self._mint(ks, name, expected_ms, next_ms, "", "", "", 0, 0) == 2

    def _mint(self, ks, name, expected_ms, next_ms, version, job_id, payload, slot_ms,
              count) -> int:
        job_key = ks.job(job_id) if job_id else ks.job("-")
        return int(scripts.run(
            self.conn, "repeat/mint",
            [ks.repeat, ks.repeat_record(name), job_key, ks.pending, ks.wake, ks.beat],
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
        Orphan members, unreadable records and members whose name breaks the
        schedule-name rule (``""`` included) are taken off the registry and
        logged, never retried every beat; none of them fails the beat.
        """
        ks = Keyspace(queue)
        now, due = self._due(ks, rules.check_int("limit", limit, 1, 100_000))
        if not due:
            return 0
        pipe = self.conn.pipeline(transaction=False)
        for name, _ in due:
            pipe.hgetall(ks.repeat_record(name))
        minted = 0
        for (name, score), raw in zip(due, pipe.execute()):
            minted += self._pump_one(ks, name, score, scripts.decode_hash(raw), now)
        return minted

    def _pump_one(self, ks: Keyspace, name: str, score: int, raw: dict, now: int) -> int:
        bad_name = malformed(name)
        if bad_name:
            if scripts.run(self.conn, "repeat/drop_member", [ks.repeat, ks.repeat_record(name)],
                           [name, score, raw.get("version", "")]):
                logger.error("repeat %s/%r: a member whose name cannot be a schedule's (%s); "
                             "taken off the registry", ks.queue, name, bad_name)
            return 0
        if not raw:
            if scripts.run(self.conn, "repeat/drop_member", [ks.repeat, ks.repeat_record(name)],
                           [name, score, ""]):
                logger.warning("repeat %s/%s: member without a record removed from the "
                               "registry", ks.queue, name)
            return 0
        try:
            entry = RepeatEntry.from_hash(ks.queue, name, raw, score)
            plan = entry.cadence.catch_up(score, now)
        except (ValueError, KeyError, TypeError) as err:
            if scripts.run(self.conn, "repeat/drop_member", [ks.repeat, ks.repeat_record(name)],
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
        job_id = BrandedId.generate("JOB", mint_now_ms(self.conn, ks.queue))
        payload = dict(entry.template, scheduled_for=plan.slot_ms, missed=plan.missed)
        done = self._mint(ks, name, score, plan.next_ms, entry.version, job_id,
                          canonical(payload), plan.slot_ms, plan.missed)
        if done == 1 and plan.missed:
            logger.info("repeat %s/%s: catch-up job %s for %d occurrence(s) up to %d",
                        ks.queue, name, job_id, plan.due, plan.slot_ms)
        return 1 if done == 1 else 0
