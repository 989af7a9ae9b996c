"""Every queue's gauges in one round trip: the set sizes, the lanes held back,
the schedule's next due instant and the queue latency, for the metrics view
and ``echomq_stats`` (docs/observability.md, "Queue metrics").

Two round trips whatever the size of the sets: TIME with the announcement
sets (which queues live processes serve, how many processes are live), then
one read-only script per queue (``lua/admin/gauges.lua``) in one pipeline,
plus one HGETALL per live process when asked for them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...protocol import keyspace, scripts
from ...protocol.keyspace import Keyspace
from .base import MAX_QUEUES, read_live, to_int
from .overview import WorkerInfo

__all__ = ["QueueGauges", "Gauges", "gauges", "LATENCY_LANES", "LATENCY_LEVELS"]

#: Most lanes, and priority levels per lane, whose fronts the latency reads.
LATENCY_LANES = 100
LATENCY_LEVELS = 8


@dataclass(frozen=True)
class QueueGauges:
    """One queue as ``lua/admin/gauges.lua`` read it (server ms; counts of
    jobs, of lanes). ``pending``: jobs waiting in every lane; ``lanes``:
    lanes with work, ``ready`` of them in the ring, ``capped`` at their
    concurrency cap, ``waiting`` rate-limited; ``next_due_ms``: the earliest
    scheduled run-at (None: nothing scheduled); ``oldest_ready_ms``: since
    when the longest-waiting front job has been ready (None: none pending);
    ``lanes_read`` < ``lanes`` when the latency read only some lanes."""

    queue: str
    now_ms: int
    pending: int
    schedule: int
    active: int
    dead: int
    repeat: int
    lanes: int
    ready: int
    capped: int
    waiting: int
    next_due_ms: int | None
    oldest_ready_ms: int | None
    fronts_read: int
    lanes_read: int

    @property
    def latency_s(self) -> float:
        """Queue latency (s): how long the longest-waiting front job has
        been ready; 0.0 with nothing pending."""
        if self.oldest_ready_ms is None:
            return 0.0
        return max(0, self.now_ms - self.oldest_ready_ms) / 1000

    @property
    def schedule_lag_s(self) -> float:
        """How far past due the earliest scheduled job is (s); 0.0 when it is
        not due yet or nothing is scheduled."""
        if self.next_due_ms is None:
            return 0.0
        return max(0, self.now_ms - self.next_due_ms) / 1000


@dataclass(frozen=True)
class Gauges:
    """``queues``: the gauges of each queue asked for and each queue a live
    process serves (at most MAX_QUEUES); ``workers``: live processes (their
    records only when asked for, else empty); ``live_workers``: how many."""

    now_ms: int
    queues: list[QueueGauges]
    live_workers: int
    workers: list[WorkerInfo]


def gauges(conn, configured, *, only: list[str] | None = None, workers: bool = False,
           max_lanes: int = LATENCY_LANES, max_levels: int = LATENCY_LEVELS) -> Gauges:
    """The gauges of ``configured`` queues plus those live processes serve
    (or of ``only`` these), and the live processes (their records with
    ``workers``). Raises ValueError for a bad queue name; redis errors."""
    live = read_live(conn)
    now, worker_ids = live.now_ms, live.workers
    names = list(only) if only is not None else list(dict.fromkeys([*configured, *live.queues]))
    names = names[:MAX_QUEUES]
    calls = []
    for name in names:
        ks = Keyspace(name)
        calls.append(([ks.pending, ks.schedule, ks.active, ks.dead, ks.repeat, ks.lanes,
                       ks.lanes_total, ks.ring, ks.capped, ks.waiting],
                      [ks.base, max_lanes, max_levels]))
    replies = scripts.run_many(conn, "admin/gauges", calls) if calls else []
    queues = [QueueGauges(name, *(to_int(v) for v in reply))
              for name, reply in zip(names, replies)]
    infos = []
    if workers and worker_ids:
        pipe = conn.pipeline(transaction=False)
        for worker_id in worker_ids:
            pipe.hgetall(keyspace.worker(worker_id))
        for worker_id, raw in zip(worker_ids, pipe.execute()):
            if raw:  # else it expired between the two round trips
                infos.append(WorkerInfo.from_hash(worker_id, raw))
    return Gauges(now, queues, len(worker_ids), infos)
