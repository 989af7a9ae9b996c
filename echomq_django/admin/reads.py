"""The admin's read side: bounded, ranged reads of the sets, rows and counters.

Usage::

    from echomq_django.admin import reads
    view = reads.overview(conn, ["mail"])     # counts, charts, live processes
    page = reads.set_page(conn, "mail", "schedule", page=3)
    page = reads.set_page(conn, "mail", "pending", lane="chat-1")   # one lane
    lanes = reads.lanes_page(conn, "mail")    # the lanes, busiest first
    detail = reads.job_detail(conn, "mail", job_id)

Every function issues a fixed number of commands whatever the size of the
sets and the number of lanes (docs/admin.md, "Scale"): counts are ZCARD,
ZCOUNT and GET (a queue's pending jobs in every lane are the counter
``emq:{q}:lanes_total`` the lane scripts keep), pages are ``ZRANGE start
stop`` by rank (O(log N + page) on a sorted set), a page of lanes' states is
four multi-member reads, rows come in one read-only script
(``lua/admin/rows.lua``) that cuts each value short, and the per-minute
counters are two MGETs per queue. Never KEYS, SCAN or a range over a whole
set. Times are the server's (``TIME``), in Unix ms.

Errors: ValueError for a bad queue or set name or page (TypeError for a
queue name that is not a str); ``redis.RedisError`` for server failures.

Signals emitted: none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .. import rules
from ..protocol import keyspace, scripts
from ..protocol.clock import time_reply_ms
from ..protocol.keyspace import Keyspace
from ..protocol.queues import LIMIT_FIELDS, limits_from_fields
from ..protocol.records import JobRow
from ..repeat.definition import RepeatEntry

__all__ = [
    "SETS", "TABS", "overview", "set_page", "lanes_page", "job_detail", "job_exists",
    "Overview", "QueueSummary", "WorkerInfo", "QueueHead", "SetPage", "JobSummary",
    "RepeatSummary", "LanesPage", "LaneSummary", "JobDetail",
]

#: The sets the browser shows, in the order of a job's life. "pending" is
#: every lane's jobs; its page shows one lane at a time.
SETS = ("pending", "schedule", "active", "dead", "repeat")
#: A queue page's tabs: the sets, with the lanes after pending.
TABS = ("pending", "lanes", "schedule", "active", "dead", "repeat")
#: Most queues and most live processes the overview lists.
MAX_QUEUES = 100
MAX_WORKERS = 100
#: An announcement older than this (ms) is not a live process (lease_keeper.py
#: announces every 2 s and lets the record expire after 10 s).
LIVE_MS = 10_000
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
_ROW_FIELDS = ("state", "attempts", "stalls", "enqueued_at_ms", "run_at_ms", "started_at_ms",
               "finished_at_ms", "failed_at_ms", "lease_until_ms", "consumer", "reason",
               "last_error", "cancel_requested", "repeat", "group", "priority", "payload")


def _int(value: Any) -> int | None:
    if value in (None, b"", ""):
        return None
    return int(float(scripts.decode(value)))


def _counts(pipe, ks: Keyspace) -> None:
    """Queue on ``pipe`` the commands that count a queue's tabs, in TABS
    order (len(TABS) commands): pending is the GET of ``lanes_total`` (every
    lane's jobs; a ZCARD per lane would grow with the lanes), lanes the
    ZCARD of the lanes index, the other sets their ZCARD."""
    for name in TABS:
        if name == "pending":
            pipe.get(ks.lanes_total)
        else:
            pipe.zcard(getattr(ks, name))


def _read_counts(replies: list) -> dict[str, int]:
    # The counter can only be off after a manual write to the keys; never
    # show a negative count.
    return {name: max(0, _int(value) or 0) for name, value in zip(TABS, replies)}


def _read_limits(values: list) -> dict:
    """An HMGET of LIMIT_FIELDS as Queues.limits returns them."""
    return limits_from_fields({name: scripts.decode(v) for name, v in zip(LIMIT_FIELDS, values)
                               if v is not None})


# -- overview ----------------------------------------------------------------


@dataclass(frozen=True)
class QueueSummary:
    """One queue on the overview. ``pending``: jobs waiting in every lane
    (``emq:{q}:lanes_total``); ``lanes``: lanes with work; ``limits``: as
    :meth:`Queues.limits <echomq_django.protocol.queues.Queues.limits>`
    returns them; ``done``/``failed``: jobs per minute, oldest first, the
    last entry being the current minute; ``upcoming``: scheduled jobs per
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
    MAX_QUEUES / MAX_WORKERS members), then one pipeline of 23 commands per
    queue (:func:`_counts`' 6, the limits, the paused mark, two MGETs and 13
    ZCOUNTs) plus one HGETALL per live process.
    """
    pipe = conn.pipeline(transaction=False)
    pipe.time()
    pipe.zrange(keyspace.QUEUES, 0, MAX_QUEUES - 1, desc=True, withscores=True)
    pipe.zrange(keyspace.WORKERS, 0, MAX_WORKERS - 1, desc=True, withscores=True)
    time_reply, served_raw, workers_raw = pipe.execute()
    now = time_reply_ms(time_reply)
    live = now - LIVE_MS
    served = {scripts.decode(m) for m, score in served_raw if score >= live}
    worker_ids = [scripts.decode(m) for m, score in workers_raw if score >= live]
    names = list(dict.fromkeys([*configured, *sorted(served)]))
    truncated = (len(names) > MAX_QUEUES or len(served_raw) >= MAX_QUEUES
                 or len(workers_raw) >= MAX_WORKERS)
    names = names[:MAX_QUEUES]

    minute = now // 60_000
    minutes = range(minute - HISTORY_MINUTES + 1, minute + 1)
    pipe = conn.pipeline(transaction=False)
    for name in names:
        ks = Keyspace(name)
        _counts(pipe, ks)
        pipe.hmget(ks.limits, LIMIT_FIELDS)
        pipe.get(ks.paused)
        pipe.mget([ks.stats("done", m) for m in minutes])
        pipe.mget([ks.stats("failed", m) for m in minutes])
        pipe.zcount(ks.schedule, "-inf", now)
        for b in range(BUCKETS):
            pipe.zcount(ks.schedule, f"({now + b * BUCKET_MS}", now + (b + 1) * BUCKET_MS)
    for worker_id in worker_ids:
        pipe.hgetall(keyspace.worker(worker_id))
    replies = pipe.execute()

    n_counts = len(TABS)
    per_queue = n_counts + 5 + BUCKETS
    queues = []
    for i, name in enumerate(names):
        r = replies[i * per_queue:(i + 1) * per_queue]
        counts = _read_counts(r[:n_counts])
        limits, paused, done, failed, overdue = r[n_counts:n_counts + 5]
        queues.append(QueueSummary(
            name, counts["pending"], counts["schedule"], counts["active"], counts["dead"],
            counts["repeat"], counts["lanes"], _read_limits(limits), paused_at_ms=_int(paused),
            done=[_int(v) or 0 for v in done], failed=[_int(v) or 0 for v in failed],
            overdue=int(overdue), upcoming=[int(c) for c in r[n_counts + 5:]],
            configured=name in configured, served=name in served))
    workers = []
    for worker_id, raw in zip(worker_ids, replies[len(names) * per_queue:]):
        if not raw:  # expired between the two round trips
            continue
        row = scripts.decode_hash(raw)
        workers.append(WorkerInfo(
            worker_id, row.get("host", "?"), row.get("pid", "?"),
            [q for q in row.get("queues", "").split(",") if q],
            _int(row.get("concurrency")), _int(row.get("busy")),
            _int(row.get("started_at_ms")), _int(row.get("heartbeat_ms"))))
    return Overview(now, queues, workers, truncated)


# -- set pages ---------------------------------------------------------------


@dataclass(frozen=True)
class JobSummary:
    """One job as a list row: ``score_ms`` is its score in the set (run-at,
    lease deadline or time of death; -priority in a lane); text values are
    cut to CUT_BYTES. ``exists`` is False for a member whose row has expired.
    ``error`` is the last line of the whole ``last_error`` that is not blank
    (a traceback's ``ExceptionClass: message``), cut to CUT_BYTES.
    ``group`` is the job's lane (None: the ungrouped lane) and ``priority``
    its priority in it (-100..100, higher first)."""

    job_id: str
    score_ms: int
    exists: bool
    job: str | None
    state: str | None
    attempts: int
    stalls: int
    enqueued_at_ms: int | None
    run_at_ms: int | None
    started_at_ms: int | None
    finished_at_ms: int | None
    failed_at_ms: int | None
    lease_until_ms: int | None
    consumer: str | None
    reason: str | None
    last_error: str | None
    cancel_requested: bool
    repeat: str | None
    payload: str | None
    error: str | None = None
    group: str | None = None
    priority: int = 0


@dataclass(frozen=True)
class RepeatSummary:
    """One recurring schedule as a list row; ``entry`` is None when its record
    is missing or cannot be read (``problem`` says which)."""

    name: str
    next_run_ms: int
    entry: RepeatEntry | None
    problem: str | None = None


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


#: Commands :func:`_head` queues: TIME, the tab counts, the paused mark, the
#: announcement and the limits.
_HEAD_COMMANDS = 1 + len(TABS) + 3


def _head(pipe, ks: Keyspace) -> None:
    pipe.time()
    _counts(pipe, ks)
    pipe.get(ks.paused)
    pipe.zscore(keyspace.QUEUES, ks.queue)
    pipe.hmget(ks.limits, LIMIT_FIELDS)


def _read_head(ks: Keyspace, replies: list) -> QueueHead:
    time_reply, *counts, paused, announced, limits = replies
    return QueueHead(ks.queue, time_reply_ms(time_reply), _read_counts(counts), _int(paused),
                     int(announced) if announced is not None else None, _read_limits(limits))


class _Paged:
    """Pager arithmetic for a page of ``total`` items, ``per_page`` a page."""

    total: int
    page: int
    per_page: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))

    @property
    def first_index(self) -> int:
        return (self.page - 1) * self.per_page


@dataclass(frozen=True)
class SetPage(_Paged):
    """One page of one set. For pending, one lane's page: ``lane`` names it
    (None: the ungrouped lane), ``total`` is that lane's size, and
    ``lane_choices`` lists the busiest lanes (name, jobs waiting), at most
    LANE_CHOICES, '' being the ungrouped lane."""

    head: QueueHead
    set_name: str
    total: int
    page: int
    per_page: int
    rows: list = field(default_factory=list)
    lane: str | None = None
    lane_choices: list[tuple[str, int]] = field(default_factory=list)

    @property
    def queue(self) -> str:
        return self.head.queue

    @property
    def now_ms(self) -> int:
        return self.head.now_ms


def _check_page(page: object, per_page: object, most: int = MAX_PAGE_SIZE) -> tuple[int, int]:
    try:
        return (rules.check_int("page", page, 1, 10**9),
                rules.check_int("per_page", per_page, 1, most))
    except TypeError as err:
        raise ValueError(str(err)) from None


def set_page(conn, queue: str, set_name: str, page: int = 1,
             per_page: int = PAGE_SIZE, lane: str | None = None) -> SetPage:
    """One page of a set, in the set's order: a pending lane in claim order
    (highest priority first, then mint order), schedule by run-at, active by
    lease deadline, repeat by next run (all ascending), dead newest first.
    ``lane`` picks the pending page's lane (a group's name; None: the
    ungrouped lane).

    Two round trips: the queue's head (TIME, the tab counts, the paused mark,
    the queue's last announcement, the limits), for pending the lane's ZCARD
    and the LANE_CHOICES busiest lanes, and ``ZRANGE start stop`` in one
    pipeline; then the rows in one ``admin/rows`` script (or one HGETALL per
    schedule record for repeat, pipelined).

    Raises ValueError for a bad queue, set name, page, per_page or lane, or
    a lane given for a set other than pending.
    """
    ks = Keyspace(queue)
    if set_name not in SETS:
        raise ValueError(f"set must be one of {SETS}, got {set_name!r}")
    page, per_page = _check_page(page, per_page)
    try:
        lane = rules.check_group(lane)
    except TypeError as err:
        raise ValueError(str(err)) from None
    if lane is not None and set_name != "pending":
        raise ValueError(f"only pending has lanes, got lane {lane!r} for {set_name}")
    key = ks.lane_pending(lane) if set_name == "pending" else getattr(ks, set_name)
    start = (page - 1) * per_page
    pipe = conn.pipeline(transaction=False)
    _head(pipe, ks)
    if set_name == "pending":
        pipe.zcard(key)
        pipe.zrange(ks.lanes, 0, LANE_CHOICES - 1, desc=True, withscores=True)
    pipe.zrange(key, start, start + per_page - 1, desc=set_name == "dead", withscores=True)
    replies = pipe.execute()
    head = _read_head(ks, replies[:_HEAD_COMMANDS])
    members = [(scripts.decode(m), int(score)) for m, score in replies[-1]]
    if set_name == "pending":
        total = int(replies[_HEAD_COMMANDS])
        choices = [(scripts.decode(m), int(score)) for m, score in replies[_HEAD_COMMANDS + 1]]
    else:
        total, choices = head.counts[set_name], []
    result = SetPage(head, set_name, total, page, per_page, lane=lane, lane_choices=choices)
    if set_name == "repeat":
        result.rows.extend(_repeat_rows(conn, ks, members))
    elif members:
        result.rows.extend(_job_rows(conn, ks, members))
    return result


def _job_rows(conn, ks: Keyspace, members: list[tuple[str, int]]) -> list[JobSummary]:
    reply = scripts.run(conn, "admin/rows", [ks.pending],
                        [ks.base, CUT_BYTES, json.dumps([m for m, _ in members]),
                         json.dumps(_ROW_FIELDS)])
    rows = []
    for (job_id, score), values in zip(members, reply):
        v = dict(zip(_ROW_FIELDS, values))
        rows.append(JobSummary(
            job_id=job_id, score_ms=score, exists=v["state"] is not None,
            job=values[len(_ROW_FIELDS)], state=v["state"],
            attempts=_int(v["attempts"]) or 0, stalls=_int(v["stalls"]) or 0,
            enqueued_at_ms=_int(v["enqueued_at_ms"]), run_at_ms=_int(v["run_at_ms"]),
            started_at_ms=_int(v["started_at_ms"]), finished_at_ms=_int(v["finished_at_ms"]),
            failed_at_ms=_int(v["failed_at_ms"]), lease_until_ms=_int(v["lease_until_ms"]),
            consumer=v["consumer"], reason=v["reason"], last_error=v["last_error"],
            cancel_requested=v["cancel_requested"] == "1", repeat=v["repeat"],
            payload=v["payload"], error=values[len(_ROW_FIELDS) + 1],
            group=v["group"] or None, priority=_int(v["priority"]) or 0))
    return rows


def _repeat_rows(conn, ks: Keyspace, members: list[tuple[str, int]]) -> list[RepeatSummary]:
    if not members:
        return []
    pipe = conn.pipeline(transaction=False)
    for name, _ in members:
        pipe.hgetall(ks.repeat_record(name))
    rows = []
    for (name, score), raw in zip(members, pipe.execute()):
        record = scripts.decode_hash(raw)
        if not record:
            rows.append(RepeatSummary(name, score, None, "no record"))
            continue
        try:
            rows.append(RepeatSummary(name, score,
                                      RepeatEntry.from_hash(ks.queue, name, record, score)))
        except ValueError as err:
            rows.append(RepeatSummary(name, score, None, str(err)))
    return rows


# -- lanes -------------------------------------------------------------------


@dataclass(frozen=True)
class LaneSummary:
    """One lane on the lanes page. ``name`` '' is the ungrouped lane;
    ``pending`` its jobs waiting (its score in the lanes index); ``running``
    its group's jobs running now (None for the ungrouped lane, whose running
    jobs are not counted apart from the queue's active set). ``state``:
    ``ready`` (in the ring: served in its turn), ``at cap`` (at the lane
    concurrency limit), ``rate-limited`` (out of tokens; ``due_ms`` is when
    its next token is due, server ms), or ``emptied`` (in none of the three:
    its work was claimed between the page's two reads)."""

    name: str
    pending: int
    running: int | None
    state: str
    due_ms: int | None = None


@dataclass(frozen=True)
class LanesPage(_Paged):
    """One page of a queue's lanes, busiest first. ``total``: lanes with
    work; ``ready``, ``capped``, ``waiting``: how many are in the ring, at
    their cap, rate-limited."""

    head: QueueHead
    total: int
    page: int
    per_page: int
    ready: int
    capped: int
    waiting: int
    rows: list[LaneSummary] = field(default_factory=list)

    @property
    def queue(self) -> str:
        return self.head.queue

    @property
    def now_ms(self) -> int:
        return self.head.now_ms


def lanes_page(conn, queue: str, page: int = 1, per_page: int = LANE_PAGE_SIZE) -> LanesPage:
    """One page of ``queue``'s lanes with work, busiest first (most jobs
    waiting; ties in reverse name order), each with its jobs waiting, its
    running jobs and its state (docs/admin.md, "Lanes").

    Two round trips whatever the number of lanes and jobs: the queue's head,
    the sizes of the ring, the capped set and the waiting set, and
    ``ZRANGE lanes start stop REV WITHSCORES`` in one pipeline; then, for
    the lanes on the page, one HMGET of ``lane_active``, one ZMSCORE of the
    ring, one SMISMEMBER of ``capped`` and one ZMSCORE of ``waiting``.

    Raises ValueError for a bad queue name, page or per_page.
    """
    ks = Keyspace(queue)
    page, per_page = _check_page(page, per_page, MAX_LANE_PAGE_SIZE)
    start = (page - 1) * per_page
    pipe = conn.pipeline(transaction=False)
    _head(pipe, ks)
    pipe.zcard(ks.ring)
    pipe.scard(ks.capped)
    pipe.zcard(ks.waiting)
    pipe.zrange(ks.lanes, start, start + per_page - 1, desc=True, withscores=True)
    replies = pipe.execute()
    head = _read_head(ks, replies[:_HEAD_COMMANDS])
    ready, capped, waiting, members = replies[_HEAD_COMMANDS:]
    result = LanesPage(head, head.counts["lanes"], page, per_page, int(ready), int(capped),
                       int(waiting))
    lanes = [(scripts.decode(m), int(score)) for m, score in members]
    if not lanes:
        return result
    names = [name for name, _ in lanes]
    pipe = conn.pipeline(transaction=False)
    pipe.hmget(ks.lane_active, names)
    pipe.zmscore(ks.ring, names)
    pipe.smismember(ks.capped, names)
    pipe.zmscore(ks.waiting, names)
    running, in_ring, in_capped, due = pipe.execute()
    for (name, pending), run, turn, cap, due_ms in zip(lanes, running, in_ring, in_capped, due):
        if turn is not None:
            state = "ready"
        elif cap:
            state = "at cap"
        elif due_ms is not None:
            state = "rate-limited"
        else:
            state = "emptied"
        result.rows.append(LaneSummary(
            name, pending, None if name == "" else _int(run) or 0, state,
            int(due_ms) if due_ms is not None else None))
    return result


# -- one job -----------------------------------------------------------------


@dataclass(frozen=True)
class JobDetail:
    """A job's whole row plus where it stands: ``sets`` maps each set that
    holds the id to its score (ms); ``ttl_ms`` is the row's remaining life
    (None when it does not expire)."""

    now_ms: int
    row: JobRow
    sets: dict[str, int]
    ttl_ms: int | None


def job_detail(conn, queue: str, job_id: str) -> JobDetail | None:
    """The job's row, its sets and its expiry in one pipeline, or None when
    the row does not exist; for a job with a group, one ZSCORE more finds it
    in its lane (``sets["pending"]`` is its score there, -priority).
    Raises ValueError for a bad queue name."""
    ks = Keyspace(queue)
    pipe = conn.pipeline(transaction=False)
    pipe.time()
    pipe.hgetall(ks.job(job_id))
    pipe.pttl(ks.job(job_id))
    for set_name in SETS[:4]:
        pipe.zscore(getattr(ks, set_name), job_id)
    time_reply, raw, ttl, *scores = pipe.execute()
    if not raw:
        return None
    row = JobRow.from_hash(queue, job_id,
                           scripts.decode_hash(raw))
    if row.group:
        scores[0] = conn.zscore(ks.lane_pending(row.group), job_id)
    sets = {s: int(score) for s, score in zip(SETS[:4], scores) if score is not None}
    return JobDetail(time_reply_ms(time_reply), row, sets, int(ttl) if int(ttl) >= 0 else None)


def job_exists(conn, queue: str, job_id: str) -> bool:
    """True when the job's row exists (one EXISTS)."""
    return bool(conn.exists(Keyspace(queue).job(job_id)))
