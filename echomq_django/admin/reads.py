"""The admin's read side: bounded, ranged reads of the sets, rows and counters.

Usage::

    from echomq_django.admin import reads
    view = reads.overview(conn, ["mail"])     # counts, charts, live processes
    page = reads.set_page(conn, "mail", "schedule", page=3)
    detail = reads.job_detail(conn, "mail", job_id)

Every function issues a fixed number of commands whatever the size of the
sets (docs/admin.md, "Scale"): counts are ZCARD and ZCOUNT, pages are
``ZRANGE start stop`` by rank (O(log N + page) on a sorted set), rows come in
one read-only script (``lua/admin/rows.lua``) that cuts each value short, and
the per-minute counters are two MGETs per queue. Never KEYS, SCAN or a range
over a whole set. Times are the server's (``TIME``), in Unix ms.

Errors: ValueError for a bad queue or set name or page; ``redis.RedisError``
for server failures.

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
from ..protocol.records import JobRow
from ..repeat.definition import RepeatEntry

__all__ = [
    "SETS", "overview", "set_page", "job_detail", "job_exists",
    "Overview", "QueueSummary", "WorkerInfo", "SetPage", "JobSummary", "RepeatSummary",
    "JobDetail",
]

#: The sets the browser shows, in the order of a job's life.
SETS = ("pending", "schedule", "active", "dead", "repeat")
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

# The row fields a list page reads (lua/admin/rows.lua returns them in this order,
# then the job's path and the last line of last_error).
_ROW_FIELDS = ("state", "attempts", "stalls", "enqueued_at_ms", "run_at_ms", "started_at_ms",
               "finished_at_ms", "failed_at_ms", "lease_until_ms", "consumer", "reason",
               "last_error", "cancel_requested", "repeat", "payload")


def _int(value: Any) -> int | None:
    if value in (None, b"", ""):
        return None
    return int(float(scripts.decode(value)))


# -- overview ----------------------------------------------------------------


@dataclass(frozen=True)
class QueueSummary:
    """One queue on the overview. ``done``/``failed``: jobs per minute, oldest
    first, the last entry being the current minute; ``upcoming``: scheduled
    jobs per BUCKET_MS bucket over the next hour; ``overdue``: scheduled jobs
    already due (the metronome has not promoted them yet)."""

    name: str
    pending: int
    schedule: int
    active: int
    dead: int
    repeat: int
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
    MAX_QUEUES / MAX_WORKERS members), then one pipeline of 21 commands per
    queue plus one HGETALL per live process.
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
        for set_name in SETS:
            pipe.zcard(getattr(ks, set_name))
        pipe.get(ks.paused)
        pipe.mget([ks.stats("done", m) for m in minutes])
        pipe.mget([ks.stats("failed", m) for m in minutes])
        pipe.zcount(ks.schedule, "-inf", now)
        for b in range(BUCKETS):
            pipe.zcount(ks.schedule, f"({now + b * BUCKET_MS}", now + (b + 1) * BUCKET_MS)
    for worker_id in worker_ids:
        pipe.hgetall(keyspace.worker(worker_id))
    replies = pipe.execute()

    per_queue = len(SETS) + 4 + BUCKETS
    queues = []
    for i, name in enumerate(names):
        r = replies[i * per_queue:(i + 1) * per_queue]
        counts = [int(c) for c in r[:len(SETS)]]
        paused, done, failed, overdue = r[len(SETS):len(SETS) + 4]
        queues.append(QueueSummary(
            name, *counts, paused_at_ms=_int(paused),
            done=[_int(v) or 0 for v in done], failed=[_int(v) or 0 for v in failed],
            overdue=int(overdue), upcoming=[int(c) for c in r[len(SETS) + 4:]],
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
    lease deadline or time of death; 0 in pending); text values are cut to
    CUT_BYTES. ``exists`` is False for a member whose row has expired.
    ``error`` is the last line of the whole ``last_error`` that is not blank
    (a traceback's ``ExceptionClass: message``), cut to CUT_BYTES."""

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


@dataclass(frozen=True)
class RepeatSummary:
    """One recurring schedule as a list row; ``entry`` is None when its record
    is missing or cannot be read (``problem`` says which)."""

    name: str
    next_run_ms: int
    entry: RepeatEntry | None
    problem: str | None = None


@dataclass(frozen=True)
class SetPage:
    queue: str
    set_name: str
    now_ms: int
    total: int
    page: int
    per_page: int
    #: Every set's size (ZCARD) and the paused mark, read with the page.
    counts: dict[str, int] = field(default_factory=dict)
    paused_at_ms: int | None = None
    rows: list = field(default_factory=list)
    #: When a runechomq process last announced that it serves the queue (ms).
    announced_at_ms: int | None = None

    @property
    def served(self) -> bool:
        """A live process serves the queue (announced within LIVE_MS)."""
        return self.announced_at_ms is not None and self.announced_at_ms >= self.now_ms - LIVE_MS

    @property
    def holds_nothing(self) -> bool:
        """No set holds anything and the queue is not paused."""
        return not any(self.counts.values()) and self.paused_at_ms is None

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))

    @property
    def first_index(self) -> int:
        return (self.page - 1) * self.per_page


def _check_page(page: object, per_page: object) -> tuple[int, int]:
    try:
        return (rules.check_int("page", page, 1, 10**9),
                rules.check_int("per_page", per_page, 1, MAX_PAGE_SIZE))
    except TypeError as err:
        raise ValueError(str(err)) from None


def set_page(conn, queue: str, set_name: str, page: int = 1,
             per_page: int = PAGE_SIZE) -> SetPage:
    """One page of a set, in the set's order: pending in claim order, schedule
    by run-at, active by lease deadline, repeat by next run (all ascending),
    dead newest first.

    Two round trips: TIME, the five sets' ZCARD, the paused mark, the queue's
    last announcement by a live process and ``ZRANGE start stop`` in one
    pipeline;
    then the rows in one ``admin/rows`` script (or one HGETALL per schedule
    record for repeat, pipelined).

    Raises ValueError for a bad queue, set name, page or per_page.
    """
    ks = Keyspace(queue)
    if set_name not in SETS:
        raise ValueError(f"set must be one of {SETS}, got {set_name!r}")
    page, per_page = _check_page(page, per_page)
    key = getattr(ks, set_name)
    start = (page - 1) * per_page
    pipe = conn.pipeline(transaction=False)
    pipe.time()
    for name in SETS:
        pipe.zcard(getattr(ks, name))
    pipe.get(ks.paused)
    pipe.zscore(keyspace.QUEUES, queue)
    pipe.zrange(key, start, start + per_page - 1, desc=set_name == "dead", withscores=True)
    time_reply, *sizes, paused, announced, members = pipe.execute()
    counts = {name: int(size) for name, size in zip(SETS, sizes)}
    members = [(scripts.decode(m), int(score)) for m, score in members]
    result = SetPage(queue, set_name, time_reply_ms(time_reply), counts[set_name], page, per_page,
                     counts, _int(paused),
                     announced_at_ms=int(announced) if announced is not None else None)
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
            payload=v["payload"], error=values[len(_ROW_FIELDS) + 1]))
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
    the row does not exist. Raises ValueError for a bad queue name."""
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
    sets = {s: int(score) for s, score in zip(SETS[:4], scores) if score is not None}
    return JobDetail(time_reply_ms(time_reply), row, sets, int(ttl) if int(ttl) >= 0 else None)


def job_exists(conn, queue: str, job_id: str) -> bool:
    """True when the job's row exists (one EXISTS)."""
    return bool(conn.exists(Keyspace(queue).job(job_id)))
