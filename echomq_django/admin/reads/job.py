"""One job: its whole row, the sets that hold it and its expiry."""

from __future__ import annotations

from dataclasses import dataclass

from ...protocol.clock import time_command, time_reply_ms
from ...protocol.keyspace import Keyspace
from ...protocol.records import JobRow
from .base import SETS

__all__ = ["JobDetail", "job_detail", "job_exists"]


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
    time_command(pipe, queue)
    pipe.hgetall(ks.job(job_id))
    pipe.pttl(ks.job(job_id))
    for set_name in SETS[:4]:
        pipe.zscore(getattr(ks, set_name), job_id)
    time_reply, raw, ttl, *scores = pipe.execute()
    if not raw:
        return None
    row = JobRow.from_hash(queue, job_id, raw)
    if row.group:
        scores[0] = conn.zscore(ks.lane_pending(row.group), job_id)
    sets = {s: int(score) for s, score in zip(SETS[:4], scores) if score is not None}
    return JobDetail(time_reply_ms(time_reply), row, sets, int(ttl) if int(ttl) >= 0 else None)


def job_exists(conn, queue: str, job_id: str) -> bool:
    """True when the job's row exists (one EXISTS)."""
    return bool(conn.exists(Keyspace(queue).job(job_id)))
