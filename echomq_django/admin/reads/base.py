"""What every admin read shares: the limits on a read (page sizes, how many
queues and processes, how much of a value), the tab counts, a queue page's
head (:class:`QueueHead`, read with the page) and the pager arithmetic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ... import rules
from ...protocol import keyspace, scripts
from ...protocol.clock import time_command, time_reply_ms
from ...protocol.keyspace import Keyspace
from ...protocol.queues import LIMIT_FIELDS, limits_from_fields

#: The sets the browser shows, in the order of a job's life. "pending" is
#: every lane's jobs; its page shows one lane at a time.
SETS = ("pending", "schedule", "active", "dead", "repeat")
#: A queue page's tabs: the sets, with the lanes after pending.
TABS = ("pending", "lanes", "schedule", "active", "dead", "repeat")
#: Most queues and most live processes the overview lists.
MAX_QUEUES = 100
MAX_WORKERS = 100
#: An announcement older than this (ms) is not a live process (lease_keeper.py
#: announces every 2 s while a process runs jobs, every 10 s while it idles,
#: and lets the record expire after 30 s, ANNOUNCE_TTL_MS).
LIVE_MS = 30_000
#: The chart's window: one bar per minute.
HISTORY_MINUTES = 60
#: The schedule histogram: BUCKETS buckets of BUCKET_MS over the next hour.
BUCKETS = 12
BUCKET_MS = 300_000
#: Rows per page: default and most.
PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
#: Most bytes of a payload or error a list row carries.
CUT_BYTES = 300
#: Lanes per page on the lanes page: default and most.
LANE_PAGE_SIZE = 50
MAX_LANE_PAGE_SIZE = 200
#: The busiest lanes a pending page offers to switch to.
LANE_CHOICES = 10

# The row fields a list page reads (lua/admin/rows.lua returns them in this order,
# then the job's path and the last line of last_error).
ROW_FIELDS = ("state", "attempts", "stalls", "enqueued_at_ms", "run_at_ms", "started_at_ms",
               "finished_at_ms", "failed_at_ms", "lease_until_ms", "consumer", "reason",
               "last_error", "cancel_requested", "repeat", "group", "priority", "progress",
               "progress_message", "payload")


def to_int(value: Any) -> int | None:
    """An int of a stored number, None when absent or not a finite number
    (a field written by hand must not take a page down)."""
    if value in (None, b"", ""):
        return None
    try:
        return int(float(scripts.decode(value)))
    except (ValueError, OverflowError):
        return None


def queue_counts(pipe, ks: Keyspace) -> None:
    """Queue on ``pipe`` the commands that count a queue's tabs, in TABS
    order (len(TABS) commands): pending is the GET of ``lanes_total`` (every
    lane's jobs; a ZCARD per lane would grow with the lanes), lanes the
    ZCARD of the lanes index, the other sets their ZCARD."""
    for name in TABS:
        if name == "pending":
            pipe.get(ks.lanes_total)
        else:
            pipe.zcard(getattr(ks, name))


def read_counts(replies: list) -> dict[str, int]:
    # The counter can only be off after a manual write to the keys; never
    # show a negative count.
    return {name: max(0, to_int(value) or 0) for name, value in zip(TABS, replies)}


def read_limits(values: list) -> dict:
    """An HMGET of LIMIT_FIELDS as Queues.limits returns them."""
    return limits_from_fields({name: scripts.decode(v) for name, v in zip(LIMIT_FIELDS, values)
                               if v is not None})


@dataclass(frozen=True)
class QueueHead:
    """What every page of one queue shows above its list, read with the page:
    the server's now, the tabs' counts (``counts``, keyed by TABS: pending
    is every lane's jobs, lanes the lanes with work), the paused mark, when
    a live runechomq process last announced it serves the queue, and its
    limits (as :meth:`Queues.limits
    <echomq_django.protocol.queues.Queues.limits>` returns them)."""

    queue: str
    now_ms: int
    counts: dict[str, int]
    paused_at_ms: int | None
    announced_at_ms: int | None
    limits: dict

    @property
    def served(self) -> bool:
        """A live process serves the queue (announced within LIVE_MS)."""
        return self.announced_at_ms is not None and self.announced_at_ms >= self.now_ms - LIVE_MS

    @property
    def holds_nothing(self) -> bool:
        """No set or lane holds anything, the queue is not paused and has no
        limits."""
        return (not any(self.counts.values()) and self.paused_at_ms is None
                and not any(self.limits.values()))


#: Commands :func:`queue_head` queues: TIME, the tab counts, the paused mark, the
#: announcement and the limits.
HEAD_COMMANDS = 1 + len(TABS) + 3


def queue_head(pipe, ks: Keyspace) -> None:
    time_command(pipe, ks.queue)
    queue_counts(pipe, ks)
    pipe.get(ks.paused)
    pipe.zscore(keyspace.QUEUES, ks.queue)
    pipe.hmget(ks.limits, LIMIT_FIELDS)


def read_head(ks: Keyspace, replies: list) -> QueueHead:
    time_reply, *counts, paused, announced, limits = replies
    return QueueHead(ks.queue, time_reply_ms(time_reply), read_counts(counts), to_int(paused),
                     int(announced) if announced is not None else None, read_limits(limits))


class Paged:
    """A page of one queue: its ``head`` (read with the page) and the pager
    arithmetic for ``total`` items, ``per_page`` a page."""

    head: QueueHead
    total: int
    page: int
    per_page: int

    @property
    def queue(self) -> str:
        return self.head.queue

    @property
    def now_ms(self) -> int:
        return self.head.now_ms

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))

    @property
    def first_index(self) -> int:
        return (self.page - 1) * self.per_page


def check_page(page: object, per_page: object, most: int = MAX_PAGE_SIZE) -> tuple[int, int]:
    try:
        return (rules.check_int("page", page, 1, 10**9),
                rules.check_int("per_page", per_page, 1, most))
    except TypeError as err:
        raise ValueError(str(err)) from None


@dataclass(frozen=True)
class Live:
    """What one round trip says of the server now: its clock (ms), the queues
    and the runechomq processes announced within LIVE_MS (newest MAX_QUEUES /
    MAX_WORKERS read; ``full`` when a read hit its cap)."""

    now_ms: int
    queues: list[str]
    workers: list[str]
    full: bool


def read_live(conn) -> Live:
    """TIME and the two announcement sets in one pipelined round trip; the
    queues sorted by name, the workers newest first. On a cluster, the clock
    of the node holding the registry (``emq:{~}``). Raises redis errors."""
    pipe = conn.pipeline(transaction=False)
    time_command(pipe)
    pipe.zrange(keyspace.QUEUES, 0, MAX_QUEUES - 1, desc=True, withscores=True)
    pipe.zrange(keyspace.WORKERS, 0, MAX_WORKERS - 1, desc=True, withscores=True)
    time_reply, queues_raw, workers_raw = pipe.execute()
    now = time_reply_ms(time_reply)
    live = now - LIVE_MS
    return Live(now, sorted(scripts.decode(m) for m, score in queues_raw if score >= live),
                [scripts.decode(m) for m, score in workers_raw if score >= live],
                len(queues_raw) >= MAX_QUEUES or len(workers_raw) >= MAX_WORKERS)
