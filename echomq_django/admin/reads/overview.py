"""The overview: every queue's counts, limits, paused mark, last hour and
next hour, and the live processes, in two round trips (docs/admin.md)."""

from __future__ import annotations

from dataclasses import dataclass

from ...connection.topology import keyed_command
from ...protocol import keyspace, scripts
from ...protocol.keyspace import Keyspace
from ...protocol.queues import LIMIT_FIELDS
from .base import (
    BUCKET_MS,
    BUCKETS,
    HISTORY_MINUTES,
    MAX_QUEUES,
    TABS,
    queue_counts,
    read_counts,
    read_live,
    read_limits,
    to_int,
)

__all__ = ["QueueSummary", "WorkerInfo", "Overview", "overview"]


@dataclass(frozen=True)
class QueueSummary:
    """One queue on the overview. ``pending``: jobs waiting in every lane
    (``emq:{q}:lanes_total``); ``lanes``: lanes with work; ``limits``: as
    :meth:`Queues.limits <echomq_django.protocol.queues.Queues.limits>`
    returns them; ``done``/``failed``/``died``: per minute over the last
    HISTORY_MINUTES, oldest first, the last entry being the current minute:
    jobs done, failed attempts (every retry, and each dead job's last
    attempt) and jobs that ended dead; ``latency_ms``: the queue latency the
    metronome sampled in each of those minutes (ms; None: no sample, no
    metronome ran then); ``upcoming``: scheduled jobs per
    BUCKET_MS bucket over the next hour; ``overdue``: scheduled jobs already
    due (the metronome has not promoted them yet)."""

    name: str
    pending: int
    schedule: int
    active: int
    dead: int
    repeat: int
    lanes: int
    limits: dict
    paused_at_ms: int | None
    done: list[int]
    failed: list[int]
    died: list[int]
    latency_ms: list[int | None]
    overdue: int
    upcoming: list[int]
    configured: bool
    served: bool

    @property
    def paused(self) -> bool:
        return self.paused_at_ms is not None


@dataclass(frozen=True)
class WorkerInfo:
    """A live runechomq process, as it last announced itself."""

    worker_id: str
    host: str
    pid: str
    queues: list[str]
    concurrency: int | None
    busy: int | None
    started_at_ms: int | None
    heartbeat_ms: int | None


    @classmethod
    def from_hash(cls, worker_id: str, raw: dict) -> "WorkerInfo":
        """The announcement hash ``raw`` (HGETALL, bytes or str) of ``worker_id``."""
        row = scripts.decode_hash(raw)
        return cls(worker_id, row.get("host", "?"), row.get("pid", "?"),
                   [q for q in row.get("queues", "").split(",") if q],
                   to_int(row.get("concurrency")), to_int(row.get("busy")),
                   to_int(row.get("started_at_ms")), to_int(row.get("heartbeat_ms")))


@dataclass(frozen=True)
class Overview:
    now_ms: int
    queues: list[QueueSummary]
    workers: list[WorkerInfo]
    #: More queues or processes exist than the overview lists.
    truncated: bool = False


def overview(conn, configured: list[str] | tuple[str, ...]) -> Overview:
    """Counts, paused flags, the last hour's done/failed per minute and the
    next hour's schedule histogram for the configured queues plus the queues
    live processes announce; and the live processes.

    Two round trips: TIME with the two announcement sets (newest
    MAX_QUEUES / MAX_WORKERS members), then one pipeline of 25 commands per
    queue (:func:`queue_counts`' 6, the limits, the paused mark, three MGETs
    of the per-minute counters, the latency samples' ZRANGE by score and 13
    ZCOUNTs) plus one HGETALL per live process.
    """
    live = read_live(conn)
    now, served, worker_ids = live.now_ms, set(live.queues), live.workers
    names = list(dict.fromkeys([*configured, *live.queues]))
    truncated = len(names) > MAX_QUEUES or live.full
    names = names[:MAX_QUEUES]

    minute = now // 60_000
    minutes = range(minute - HISTORY_MINUTES + 1, minute + 1)
    pipe = conn.pipeline(transaction=False)
    for name in names:
        ks = Keyspace(name)
        queue_counts(pipe, ks)
        pipe.hmget(ks.limits, LIMIT_FIELDS)
        pipe.get(ks.paused)
        # (keyed_command: a cluster pipeline refuses the mget method; the
        # keys share the queue's slot.)
        for kind in ("done", "failed", "dead"):
            keyed_command(pipe, ks.base, "MGET", *[ks.stats(kind, m) for m in minutes])
        pipe.zrange(ks.latency, minutes[0], minutes[-1], byscore=True)
        pipe.zcount(ks.schedule, "-inf", now)
        for b in range(BUCKETS):
            pipe.zcount(ks.schedule, f"({now + b * BUCKET_MS}", now + (b + 1) * BUCKET_MS)
    for worker_id in worker_ids:
        pipe.hgetall(keyspace.worker(worker_id))
    replies = pipe.execute()

    n_counts = len(TABS)
    per_queue = n_counts + 7 + BUCKETS
    queues = []
    for i, name in enumerate(names):
        r = replies[i * per_queue:(i + 1) * per_queue]
        counts = read_counts(r[:n_counts])
        limits, paused, done, failed, died, samples, overdue = r[n_counts:n_counts + 7]
        queues.append(QueueSummary(
            name, counts["pending"], counts["schedule"], counts["active"], counts["dead"],
            counts["repeat"], counts["lanes"], read_limits(limits), paused_at_ms=to_int(paused),
            done=[to_int(v) or 0 for v in done], failed=[to_int(v) or 0 for v in failed],
            died=[to_int(v) or 0 for v in died], latency_ms=_samples(samples, minutes),
            overdue=int(overdue), upcoming=[int(c) for c in r[n_counts + 7:]],
            configured=name in configured, served=name in served))
    workers = []
    for worker_id, raw in zip(worker_ids, replies[len(names) * per_queue:]):
        if raw:  # else it expired between the two round trips
            workers.append(WorkerInfo.from_hash(worker_id, raw))
    return Overview(now, queues, workers, truncated)


def _samples(members: list, minutes: range) -> list[int | None]:
    """The latency samples (``<minute>:<latency_ms>`` members) by minute."""
    by_minute = {}
    for member in members:
        minute, _, latency = scripts.decode(member).partition(":")
        by_minute[int(minute)] = int(latency)
    return [by_minute.get(m) for m in minutes]
