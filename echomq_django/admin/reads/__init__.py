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

from .base import (BUCKET_MS, CUT_BYTES, HISTORY_MINUTES, LANE_CHOICES, LANE_PAGE_SIZE, MAX_LANE_PAGE_SIZE,
                   MAX_PAGE_SIZE, MAX_QUEUES, MAX_WORKERS, PAGE_SIZE, SETS, TABS, QueueHead)
from .job import JobDetail, job_detail, job_exists
from .lanes import LanesPage, LaneSummary, lanes_page
from .overview import Overview, QueueSummary, WorkerInfo, overview
from .sets import JobSummary, RepeatSummary, SetPage, set_page

__all__ = [
    "SETS", "TABS", "overview", "set_page", "lanes_page", "job_detail", "job_exists",
    "Overview", "QueueSummary", "WorkerInfo", "QueueHead", "SetPage", "JobSummary",
    "RepeatSummary", "LanesPage", "LaneSummary", "JobDetail",
    "BUCKET_MS", "CUT_BYTES", "HISTORY_MINUTES", "LANE_CHOICES", "LANE_PAGE_SIZE", "MAX_LANE_PAGE_SIZE",
    "MAX_PAGE_SIZE", "MAX_QUEUES", "MAX_WORKERS", "PAGE_SIZE",
]
