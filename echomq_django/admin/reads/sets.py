"""One page of one set (a pending lane, schedule, active, dead, repeat), in
the set's order, with its rows cut short (docs/admin.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ... import rules
from ...protocol import scripts
from ...protocol.keyspace import Keyspace
from ...repeat.definition import RepeatEntry
from .base import (
    CUT_BYTES,
    HEAD_COMMANDS,
    LANE_CHOICES,
    PAGE_SIZE,
    ROW_FIELDS,
    SETS,
    Paged,
    QueueHead,
    check_page,
    queue_head,
    read_head,
    to_int,
)

__all__ = ["JobSummary", "RepeatSummary", "SetPage", "set_page"]


@dataclass(frozen=True)
class JobSummary:
    """One job as a list row: ``score_ms`` is its score in the set (run-at,
    lease deadline or time of death; -priority in a lane); text values are
    cut to CUT_BYTES. ``exists`` is False for a member whose row has expired.
    ``error`` is the last line of the whole ``last_error`` that is not blank
    (a traceback's ``ExceptionClass: message``), cut to CUT_BYTES.
    ``group`` is the job's lane (None: the ungrouped lane) and ``priority``
    its priority in it (-100..100, higher first). ``progress`` is a running
    job's last report (0-100, None: none) with its ``progress_message``
    (cut)."""

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
    progress: int | None = None
    progress_message: str | None = None


@dataclass(frozen=True)
class RepeatSummary:
    """One recurring schedule as a list row; ``entry`` is None when its record
    is missing or cannot be read (``problem`` says which)."""

    name: str
    next_run_ms: int
    entry: RepeatEntry | None
    problem: str | None = None


@dataclass(frozen=True)
class SetPage(Paged):
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
    page, per_page = check_page(page, per_page)
    try:
        lane = rules.check_group(lane)
    except TypeError as err:
        raise ValueError(str(err)) from None
    if lane is not None and set_name != "pending":
        raise ValueError(f"only pending has lanes, got lane {lane!r} for {set_name}")
    key = ks.lane_pending(lane) if set_name == "pending" else getattr(ks, set_name)
    start = (page - 1) * per_page
    pipe = conn.pipeline(transaction=False)
    queue_head(pipe, ks)
    if set_name == "pending":
        pipe.zcard(key)
        pipe.zrange(ks.lanes, 0, LANE_CHOICES - 1, desc=True, withscores=True)
    pipe.zrange(key, start, start + per_page - 1, desc=set_name == "dead", withscores=True)
    replies = pipe.execute()
    head = read_head(ks, replies[:HEAD_COMMANDS])
    members = [(scripts.decode(m), int(score)) for m, score in replies[-1]]
    if set_name == "pending":
        total = int(replies[HEAD_COMMANDS])
        choices = [(scripts.decode(m), int(score)) for m, score in replies[HEAD_COMMANDS + 1]]
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
                         json.dumps(ROW_FIELDS)])
    rows = []
    for (job_id, score), values in zip(members, reply):
        v = dict(zip(ROW_FIELDS, values))
        rows.append(JobSummary(
            job_id=job_id, score_ms=score, exists=v["state"] is not None,
            job=values[len(ROW_FIELDS)], state=v["state"],
            attempts=to_int(v["attempts"]) or 0, stalls=to_int(v["stalls"]) or 0,
            enqueued_at_ms=to_int(v["enqueued_at_ms"]), run_at_ms=to_int(v["run_at_ms"]),
            started_at_ms=to_int(v["started_at_ms"]), finished_at_ms=to_int(v["finished_at_ms"]),
            failed_at_ms=to_int(v["failed_at_ms"]), lease_until_ms=to_int(v["lease_until_ms"]),
            consumer=v["consumer"], reason=v["reason"], last_error=v["last_error"],
            cancel_requested=v["cancel_requested"] == "1", repeat=v["repeat"],
            payload=v["payload"], error=values[len(ROW_FIELDS) + 1],
            group=v["group"] or None, priority=to_int(v["priority"]) or 0,
            progress=to_int(v["progress"]), progress_message=v["progress_message"] or None))
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
