"""Jobs: a job's life on the wire (enqueue, schedule, promote, claim, ack, retry, dead, reap).

``Jobs(conn)`` wraps a redis-py client. Each method is one atomic Lua script
(``lua/jobs/``, ``lua/queues/``) that reads time from the server; the
caller's clock is never sent. Arguments are checked first with
:mod:`echomq_django.rules`, so bad input raises before anything is written.
The contract (keys, scripts, states) is ``docs/protocol.md``; the surfaces
mirror seed 001 (``EchoMQ.Jobs``). The consumer's side (claim, ack, retry,
snooze, dead, extend, release) lives in :mod:`.leases` and is mixed in; the
defaults in :mod:`.defaults`. Queue-wide control (pause, resume) is
:class:`~echomq_django.protocol.queues.Queues`.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, NamedTuple

from .. import rules
from ..exceptions import KindError
from ..rules import check_int, check_job_id
from . import scripts
from .replication import Replicas, run_confirmed
from .defaults import (DEFAULT_DEAD_MAX, DEFAULT_DEAD_TTL_MS, DEFAULT_KEEP_MS,
                       DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_MAX_STALLS)
from .keyspace import LATENCY_MINUTES, LATENCY_TTL_MS, STATS_TTL_MS, WAKE_CAP, Keyspace
from .leases import Leases
from .queues import Queues
from .records import CheckedPayload, JobRow, Outcome

__all__ = ["Jobs", "Horizon", "MAX_BATCH", "DEFAULT_KEEP_MS", "DEFAULT_DEAD_TTL_MS", "DEFAULT_DEAD_MAX",
           "DEFAULT_MAX_STALLS", "DEFAULT_MAX_PAYLOAD_BYTES"]


#: Most jobs one enqueue_many takes (protocol.md, "Arguments": batches).
MAX_BATCH = 100_000
#: One enqueue_many script call takes at most this many jobs, and stops adding
#: jobs past this many bytes of payload, so no call holds the server long.
CALL_ITEMS = 1000
CALL_BYTES = 1 << 20
_ITEM_KEYS = frozenset({"job_id", "payload", "group", "priority", "delay_ms", "run_at_ms"})
_OUTCOMES = {1: Outcome.ENQUEUED, 2: Outcome.SCHEDULED, 0: Outcome.DUPLICATE}


class Horizon(NamedTuple):
    """What :meth:`Jobs.horizon` reads in one script call."""

    #: The server's clock, Unix ms.
    now_ms: int
    #: The earliest head of schedule, active and repeat (ms), or None.
    next_ms: int | None
    #: Whether the queue's sync marker (``emq:{q}:synced``) exists.
    synced: bool
    #: The instant stored as the metronome's plan (ms), or None for a read.
    plan_ms: int | None = None
    #: The heads of schedule, active and repeat (ms; None for an empty set).
    heads: tuple[int | None, int | None, int | None] = (None, None, None)
    #: The same reading of the server's clock in Unix microseconds.
    now_us: int | None = None


class Jobs(Leases):
    """The EchoMQ job protocol on one connection. Thread-safe as redis-py is.

    Every method validates its arguments first (ValueError or TypeError naming
    the argument, nothing written) and runs one atomic script. Payloads larger
    than ``max_payload_bytes`` raise PayloadTooLargeError (a ValueError). Text
    arguments (payload, consumer, token, reason, error, message) must be
    encodable as UTF-8: a lone surrogate (``"\\ud800"``) raises ValueError
    naming the argument (:func:`echomq_django.rules.check_text`).

    ``replicas``: a :class:`~echomq_django.protocol.replication.Replicas`
    makes every admission (enqueue, enqueue_at, enqueue_in, enqueue_many)
    wait, in its own round trip, until that many replicas hold it, and raise
    NotReplicatedError when they do not in time (``ECHOMQ["REPLICAS"]``).
    """

    def __init__(self, conn, max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
                 replicas: Replicas | None = None) -> None:
        self.conn = conn
        self.max_payload_bytes = check_int("max_payload_bytes", max_payload_bytes, 1)
        self.replicas = replicas

    def _admit(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run admission script ``name``, then WAIT for the replicas when
        ``self.replicas`` asks for them."""
        if self.replicas is None:
            return scripts.run(self.conn, name, keys, args)
        return run_confirmed(self.conn, name, [(keys, args)], self.replicas)[0]

    # -- admission -------------------------------------------------------

    def enqueue(self, queue: str, job_id: str, payload: str, group: str | None = None,
                priority: int = 0) -> Outcome:
        """Admit ``job_id`` to its lane now (protocol.md, "enqueue", "Lanes").

        ``group`` names the job's lane (None: the queue's ungrouped lane);
        lanes are served round-robin. ``priority`` (-100..100, higher first)
        orders the jobs of one lane; equal priorities go in mint order.
        Returns ``"enqueued"``, or ``"duplicate"`` when the row exists (nothing
        changes). Raises KindError for a non-JOB id; ValueError for a bad queue
        name, a job id that is not 1-200 characters of ``[A-Za-z0-9._-]``, a
        bad group or priority, or a payload that is not JSON (NaN and Infinity
        included) or holds a lone surrogate; PayloadTooLargeError over the size
        limit; TypeError for arguments of the wrong type.
        """
        ks = Keyspace(queue)
        check_job_id(job_id)
        if type(payload) is not CheckedPayload:
            rules.check_payload_text(payload, self.max_payload_bytes)
        group, priority = rules.check_group(group), rules.check_priority(priority)
        done = self._admit("jobs/enqueue", [ks.job(job_id), ks.pending, ks.wake],
                           [job_id, payload, WAKE_CAP, group or "", priority])
        return Outcome.ENQUEUED if done == 1 else Outcome.DUPLICATE

    def enqueue_at(self, queue: str, job_id: str, payload: str, run_at_ms: int,
                   group: str | None = None, priority: int = 0) -> Outcome:
        """Admit ``job_id`` to ``schedule`` at the absolute Unix ms ``run_at_ms``;
        it joins its lane (``group``, ``priority`` as :meth:`enqueue`) when due.

        A run-at in the past is due at once. Returns ``"scheduled"`` or
        ``"duplicate"``. Raises KindError for a non-JOB id; ValueError for
        ``run_at_ms`` outside 946684800000..2**53 (2000-01-01 on: an earlier
        value is seconds passed for ms, refused as such); TypeError for a
        non-int (protocol.md, "schedule" and "Arguments").
        """
        return self._schedule(queue, job_id, payload, "at",
                              rules.check_run_at_ms("run_at_ms", run_at_ms), group, priority)

    def enqueue_in(self, queue: str, job_id: str, payload: str, delay_ms: int,
                   group: str | None = None, priority: int = 0) -> Outcome:
        """Admit ``job_id`` to ``schedule`` at SERVER now + ``delay_ms``; it
        joins its lane (``group``, ``priority`` as :meth:`enqueue`) when due.

        Returns ``"scheduled"`` or ``"duplicate"``. Raises KindError for a
        non-JOB id; ValueError for a negative ``delay_ms`` (protocol.md,
        "schedule").
        """
        return self._schedule(queue, job_id, payload, "in",
                              check_int("delay_ms", delay_ms, 0), group, priority)

    def _schedule(self, queue, job_id, payload, mode, value, group, priority) -> Outcome:
        ks = Keyspace(queue)
        check_job_id(job_id)
        if type(payload) is not CheckedPayload:
            rules.check_payload_text(payload, self.max_payload_bytes)
        group, priority = rules.check_group(group), rules.check_priority(priority)
        done = self._admit("jobs/schedule", [ks.job(job_id), ks.schedule, ks.beat],
                           [job_id, payload, mode, value, group or "", priority])
        return Outcome.SCHEDULED if done == 1 else Outcome.DUPLICATE

    def enqueue_many(self, queue: str, items: Iterable[Mapping[str, Any]]) -> list[Outcome]:
        """Admit a batch of jobs in one round trip (protocol.md, "enqueue_many").

        ``items``: mappings, each with ``job_id`` (a JOB id) and ``payload``
        (JSON text), and optionally ``group`` (None: the ungrouped lane),
        ``priority`` (-100..100, default 0) and one of ``delay_ms`` (>= 0, on
        the SERVER clock, as :meth:`enqueue_in`) or ``run_at_ms`` (Unix ms, as
        :meth:`enqueue_at`): with neither the job is enqueued now; with one it
        goes to ``schedule``. At most :data:`MAX_BATCH` (100,000) items; none
        answers ``[]`` without a round trip.

        Returns one :class:`Outcome` per item, in order: ``"enqueued"``,
        ``"scheduled"``, or ``"duplicate"`` when the id's row exists, or when
        an earlier item of the batch has the same id (only the first is
        admitted; nothing changes for the others), as sending them one by
        one would answer. One wake marker for the batch, not one per job.

        Every item is checked before anything is sent; the error names the
        item and the rule (``"items[3]: priority must be in -100..100, got
        500"``) and nothing of the batch is written. Raises KindError for an
        id that is not JOB-namespaced; TypeError for an item that is not a
        mapping, lacks ``job_id`` or ``payload``, has another key, or holds
        a value of the wrong type; ValueError for a value that breaks its
        rule, both ``delay_ms`` and ``run_at_ms``, or too many items;
        PayloadTooLargeError over the size limit. The server checks each
        item again. A batch over 1,000 jobs (or 1 MiB of payloads) is sent
        as several script calls in the one round trip: should one fail on
        the server (out of memory), the calls before it stay written; the
        batch sent again answers ``"duplicate"`` for those.
        """
        ks = Keyspace(queue)
        if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
            raise TypeError(f"items must be a list of mappings, got {type(items).__name__}")
        items = list(items)
        if len(items) > MAX_BATCH:
            raise ValueError(f"items must hold at most {MAX_BATCH} jobs, got {len(items)}")
        checked = [self._item(index, item) for index, item in enumerate(items)]
        if not checked:
            return []
        # Bounded calls, all in one pipeline; the last one pushes the wake marker.
        bounds, start, size = [], 0, 0
        for index, item in enumerate(checked):
            if index > start and (index - start >= CALL_ITEMS or size + item[-1] > CALL_BYTES):
                bounds.append((start, index))
                start, size = index, 0
            size += item[-1]
        bounds.append((start, len(checked)))
        keys = [ks.pending, ks.schedule, ks.wake, ks.beat]
        # 2: the earlier calls may have admitted jobs to their lanes.
        last_wake = 2 if any(c[4] == "" for c in checked[:bounds[-1][0]]) else 1
        calls = []
        for start, stop in bounds:
            wake = last_wake if stop == len(checked) else 0
            text = json.dumps([c[:-1] for c in checked[start:stop]], ensure_ascii=False,
                              separators=(",", ":"))
            calls.append((keys, [ks.base, WAKE_CAP, wake, start, text]))
        if self.replicas is None:
            replies = scripts.run_many(self.conn, "jobs/enqueue_many", calls)
        else:
            replies = run_confirmed(self.conn, "jobs/enqueue_many", calls, self.replicas)
        codes = [code for reply in replies for code in reply]
        return [_OUTCOMES[int(code)] for code in codes]

    def _item(self, index: int, item: Any) -> list:
        """One enqueue_many item, checked, as the script takes it (six
        strings) plus its payload's size in bytes."""
        try:
            if not isinstance(item, Mapping):
                raise TypeError(f"must be a mapping with job_id and payload, "
                                f"got {type(item).__name__}")
            if not _ITEM_KEYS.issuperset(item) or "job_id" not in item or "payload" not in item:
                raise TypeError(f"takes job_id, payload and optionally group, priority, "
                                f"delay_ms or run_at_ms; got the keys {sorted(map(str, item))}")
            job_id, payload = check_job_id(item["job_id"]), item["payload"]
            if not job_id.startswith("JOB"):
                raise KindError(f"job_id must be JOB-namespaced, got {job_id!r}")
            if type(payload) is not CheckedPayload:
                rules.check_payload_text(payload, self.max_payload_bytes)
            group = rules.check_group(item.get("group"))
            priority = rules.check_priority(item.get("priority", 0))
            delay_ms, run_at_ms = item.get("delay_ms"), item.get("run_at_ms")
            if delay_ms is not None and run_at_ms is not None:
                raise ValueError("takes delay_ms or run_at_ms, not both")
            if delay_ms is not None:
                mode, value = "in", check_int("delay_ms", delay_ms, 0)
            elif run_at_ms is not None:
                mode, value = "at", rules.check_run_at_ms("run_at_ms", run_at_ms)
            else:
                mode, value = "", 0
        except (TypeError, ValueError) as err:
            raise type(err)(f"items[{index}]: {err}") from None
        size = len(payload) if payload.isascii() else len(payload.encode("utf-8"))
        return [job_id, payload, group or "", str(priority), mode, str(value), size]

    # -- the metronome's work --------------------------------------------

    def promote(self, queue: str, batch: int = 1000) -> int:
        """Move up to ``batch`` due jobs from ``schedule`` to ``pending``; return the count."""
        ks = Keyspace(queue)
        check_int("batch", batch, 1, 100_000)
        return scripts.run(self.conn, "queues/promote", [ks.schedule, ks.pending, ks.wake],
                           [ks.base, batch, WAKE_CAP])

    def reap(self, queue: str, batch: int = 1000, max_stalls: int = DEFAULT_MAX_STALLS,
             dead_ttl_ms: int = DEFAULT_DEAD_TTL_MS, keep_ms: int = DEFAULT_KEEP_MS,
             dead_max: int = DEFAULT_DEAD_MAX) -> int:
        """Handle up to ``batch`` expired leases; return how many.

        Each one's ``stalls`` goes up by one and its token is dropped (the old
        holder can no longer ack, retry, snooze, extend or dead it). It goes
        back to ``pending``, or dead with reason ``"stalled"`` once its stalls
        exceed ``max_stalls``, with the retention :meth:`dead` applies
        (``dead_ttl_ms``, ``dead_max``); a job whose cancel was requested ends
        ``cancelled`` (kept ``keep_ms``) instead (protocol.md, "reap").
        """
        ks = Keyspace(queue)
        check_int("batch", batch, 1, 100_000)
        check_int("max_stalls", max_stalls, 0, 1_000_000)
        check_int("dead_ttl_ms", dead_ttl_ms, 1)
        check_int("keep_ms", keep_ms, 1)
        check_int("dead_max", dead_max, 1)
        return scripts.run(self.conn, "queues/reap",
                           [ks.active, ks.pending, ks.wake, ks.dead, ks.claims],
                           [ks.base, batch, WAKE_CAP, max_stalls, dead_ttl_ms, STATS_TTL_MS,
                            keep_ms, dead_max])

    def horizon(self, queue: str, max_sleep_ms: int = 0, nudge: bool = False) -> Horizon:
        """Return a :class:`Horizon`: the server's now, the earliest head of
        schedule, active (lease deadlines) and repeat (None when all three are
        empty), and whether the declared schedules' sync marker exists
        (protocol.md, "horizon", "Metronome").

        ``max_sleep_ms`` 0 only reads. A metronome passes its longest sleep
        (ms, >= 1): the script also stores the instant it will wake at,
        ``plan_ms`` = min(next_ms, now + max_sleep_ms) (now when something is
        due), which decides whether later scripts wake it. ``nudge`` pushes
        one wake marker when ready work exists, no marker waits and the queue
        is not paused (the safety net for a lost marker). Raises ValueError
        for a bad queue name or ``max_sleep_ms`` outside 0..2**53.
        """
        ks = Keyspace(queue)
        check_int("max_sleep_ms", max_sleep_ms, 0)
        now, next_ms, synced, plan_ms, *heads, now_us = scripts.run(
            self.conn, "queues/horizon",
            [ks.schedule, ks.active, ks.repeat, ks.synced, ks.beat_at, ks.wake, ks.paused],
            [max_sleep_ms, 1 if nudge else 0])
        return Horizon(int(now), _ms(next_ms), synced == 1, _ms(plan_ms),
                       tuple(_ms(head) for head in heads), int(now_us))

    def sample_latency(self, queue: str, max_lanes: int = 100,
                       max_levels: int = 8) -> int | None:
        """Record this minute's queue latency in ``emq:{q}:latency`` (the
        metronome calls it once a minute; protocol.md, "sample_latency"): the
        gauges' definition (observability.md, "Queue metrics"), read from the
        fronts of at most ``max_lanes`` lanes and ``max_levels`` priority
        levels each. Keeps the last LATENCY_MINUTES samples. Returns the
        latency recorded (ms; 0 with nothing pending), or None when this
        minute was sampled already (nothing written). Raises ValueError for
        a bad queue name or bound."""
        ks = Keyspace(queue)
        check_int("max_lanes", max_lanes, 1, 10_000)
        check_int("max_levels", max_levels, 1, 201)
        _, latency = scripts.run(self.conn, "queues/sample_latency",
                                 [ks.lanes, ks.ring, ks.latency],
                                 [ks.base, max_lanes, max_levels, LATENCY_MINUTES,
                                  LATENCY_TTL_MS])
        return None if int(latency) == -1 else int(latency)

    # -- control -----------------------------------------------------------

    def cancel(self, queue: str, job_id: str, keep_ms: int = DEFAULT_KEEP_MS) -> str:
        """Cancel a job (docs/protocol.md, "cancel").

        Returns ``"cancelled"`` (it was pending or scheduled: it left its set
        and never runs), ``"flagged"`` (it is running: its handler sees
        ``context.cancelled`` and the job ends cancelled) or ``"finished"``
        (done, dead or cancelled already: nothing changes). Raises
        NoSuchJobError when the row does not exist.
        """
        ks = Keyspace(queue)
        check_int("keep_ms", keep_ms, 1)
        code = scripts.run(self.conn, "jobs/cancel",
                           [ks.job(check_job_id(job_id)), ks.pending, ks.schedule],
                           [job_id, keep_ms])
        return {1: "cancelled", 2: "flagged", 0: "finished"}[int(code)]

    # -- limits (docs/protocol.md, "Limits"; kept on the server) ----------

    def set_limits(self, queue: str, concurrency: int | None = None,
                   lane_concurrency: int | None = None, rate: tuple[int, int] | None = None,
                   lane_rate: tuple[int, int] | None = None) -> bool:
        """:meth:`Queues.set_limits <echomq_django.protocol.queues.Queues.set_limits>`."""
        return Queues(self.conn).set_limits(queue, concurrency, lane_concurrency, rate, lane_rate)

    def limits(self, queue: str) -> dict:
        """:meth:`Queues.limits <echomq_django.protocol.queues.Queues.limits>`."""
        return Queues(self.conn).limits(queue)

    # -- reads -----------------------------------------------------------

    def get(self, queue: str, job_id: str) -> JobRow | None:
        """Return the job's row, or None when it does not exist (or has expired)."""
        ks = Keyspace(queue)
        raw = self.conn.hgetall(ks.job(check_job_id(job_id)))
        if not raw:
            return None
        return JobRow.from_hash(queue, job_id, raw)


def _ms(value) -> int | None:
    """A script's ms reply, -1 standing for none."""
    return None if int(value) == -1 else int(value)
