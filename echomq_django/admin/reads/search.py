"""Search and filters over a live set, bounded: a window of the set, read by
rank, filtered on the server (docs/admin.md, "Search and filters").

A set of a million jobs is never read whole to filter it. One search reads a
window of at most SEARCH_WINDOW members from a rank on (in the set's order),
keeps the jobs whose function, lane and arguments match (``lua/admin/search.lua``:
one HMGET per member, stopping at a page of matches) and reads the matches'
rows as a page does. The answer says which ranks were searched, so the page
can say "searched the first 1,000 of 1,000,000", and where the next search
starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ... import rules
from ...protocol import scripts
from ...protocol.keyspace import Keyspace
from .base import HEAD_COMMANDS, MAX_PAGE_SIZE, PAGE_SIZE, QueueHead, queue_head, read_head
from .sets import SetPage, _job_rows

__all__ = ["SEARCH_WINDOW", "Filters", "SearchPage", "search_page"]

#: Most members one search looks at.
SEARCH_WINDOW = 1000
#: The sets a search can read (repeat holds schedules, not jobs).
SEARCHABLE = ("pending", "schedule", "active", "dead")


@dataclass(frozen=True)
class Filters:
    """What a search keeps: ``function``, text the job's dotted path
    contains (``deliver``, ``notifications.jobs``); ``lane``, a group's
    name, exactly (None: any lane); ``text``, text the payload's JSON
    contains (an argument: ``chat-9``). Case-sensitive; "" keeps all."""

    function: str = ""
    lane: str | None = None
    text: str = ""

    @property
    def active(self) -> bool:
        """Whether anything is filtered."""
        return bool(self.function or self.lane or self.text)

    def describe(self) -> str:
        """The filters in words: ``function contains "deliver", lane chat-9``."""
        parts = []
        if self.function:
            parts.append(f'function contains "{self.function}"')
        if self.lane:
            parts.append(f"lane {self.lane}")
        if self.text:
            parts.append(f'arguments contain "{self.text}"')
        return ", ".join(parts)


@dataclass(frozen=True)
class SearchPage(SetPage):
    """A search's answer, a :class:`SetPage` whose ``rows`` are the matches
    (at most ``per_page``) and whose ``total`` is the set's (or lane's)
    size. ``start`` is the first rank searched (0-based), ``examined`` how
    many members were looked at from it (the window, or fewer when a page
    of matches was found first); ``next_start`` is where the next search
    starts (None: the set's end was reached)."""

    filters: Filters = Filters()
    start: int = 0
    examined: int = 0
    next_start: int | None = None


def check_filters(function: object = "", lane: object = None, text: object = "") -> Filters:
    """Filters from untrusted input. Raises ValueError for a lane that
    breaks the group rule or a function or text over 200 characters."""
    function = str(function or "").strip()
    text = str(text or "").strip()
    for name, value in (("function", function), ("text", text)):
        if len(value) > 200:
            raise ValueError(f"{name} must be at most 200 characters")
    try:
        lane = rules.check_group(str(lane).strip() if lane else None)
    except TypeError as err:
        raise ValueError(str(err)) from None
    return Filters(function, lane, text)


def search_page(conn, queue: str, set_name: str, filters: Filters, start: int = 0,
                per_page: int = PAGE_SIZE, lane: str | None = None) -> SearchPage:
    """Search ``set_name`` (pending: the lane ``lane``, None the ungrouped
    one) from rank ``start`` (0-based, in the set's order: dead newest
    first, the others ascending) over at most SEARCH_WINDOW members, keeping
    those ``filters`` match, at most ``per_page``.

    Three round trips, bounded whatever the set's size: the queue's head
    with the window's ``ZRANGE`` (and, for pending, the lane's ZCARD); one
    ``admin/search`` call (one HMGET per member looked at); the matches'
    rows (``admin/rows``). Raises ValueError for a bad queue, set (repeat
    cannot be searched), start, per_page or lane.
    """
    ks = Keyspace(queue)
    if set_name not in SEARCHABLE:
        raise ValueError(f"set must be one of {SEARCHABLE}, got {set_name!r}")
    rules.check_int("start", start, 0, 10**12)
    rules.check_int("per_page", per_page, 1, MAX_PAGE_SIZE)
    lane = rules.check_group(lane)
    if lane is not None and set_name != "pending":
        raise ValueError(f"only pending has lanes, got lane {lane!r} for {set_name}")
    key = ks.lane_pending(lane) if set_name == "pending" else getattr(ks, set_name)
    pipe = conn.pipeline(transaction=False)
    queue_head(pipe, ks)
    if set_name == "pending":
        pipe.zcard(key)
    pipe.zrange(key, start, start + SEARCH_WINDOW - 1, desc=set_name == "dead", withscores=True)
    replies = pipe.execute()
    head: QueueHead = read_head(ks, replies[:HEAD_COMMANDS])
    total = int(replies[HEAD_COMMANDS]) if set_name == "pending" else head.counts[set_name]
    window = [(scripts.decode(m), int(score)) for m, score in replies[-1]]
    examined, matches = 0, []
    if window:
        reply = scripts.run(conn, "admin/search", [ks.pending],
                            [ks.base, json.dumps([m for m, _ in window]), filters.function,
                             filters.lane or "", filters.text, per_page])
        examined = int(reply[0])
        matches = [window[int(i) - 1] for i in reply[1:]]
    after = start + examined
    next_start = after if examined and (examined < len(window) or len(window)
                                        == SEARCH_WINDOW) and after < total else None
    result = SearchPage(head, set_name, total, 1, per_page, lane=lane, filters=filters,
                        start=start, examined=examined, next_start=next_start)
    if matches:
        result.rows.extend(_job_rows(conn, ks, matches))
    return result
