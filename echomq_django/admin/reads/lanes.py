"""One page of a queue's lanes, busiest first, each with its state (ready,
at cap, rate-limited), in two round trips whatever the number of lanes
(docs/admin.md, "Lanes")."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...protocol import scripts
from ...protocol.keyspace import Keyspace
from .base import (
    HEAD_COMMANDS,
    LANE_PAGE_SIZE,
    MAX_LANE_PAGE_SIZE,
    Paged,
    QueueHead,
    check_page,
    queue_head,
    read_head,
    to_int,
)

__all__ = ["LaneSummary", "LanesPage", "lanes_page"]


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
class LanesPage(Paged):
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
    page, per_page = check_page(page, per_page, MAX_LANE_PAGE_SIZE)
    start = (page - 1) * per_page
    pipe = conn.pipeline(transaction=False)
    queue_head(pipe, ks)
    pipe.zcard(ks.ring)
    pipe.scard(ks.capped)
    pipe.zcard(ks.waiting)
    pipe.zrange(ks.lanes, start, start + per_page - 1, desc=True, withscores=True)
    replies = pipe.execute()
    head = read_head(ks, replies[:HEAD_COMMANDS])
    ready, capped, waiting, members = replies[HEAD_COMMANDS:]
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
            name, pending, None if name == "" else to_int(run) or 0, state,
            int(due_ms) if due_ms is not None else None))
    return result
