"""A consumer process's books: how many jobs it holds, how many it may claim.

One :class:`Books` per consumer, shared by its fetcher, its handler threads
and its finisher (thread-safe). ``outstanding`` counts jobs claimed and not
finished (handed off, running, or reserved for a claim in flight);
``processed`` counts jobs whose outcome is over. Room is what is left of
``concurrency``, and of ``max_jobs`` when set; reaching ``max_jobs`` sets the
consumer's stop event. Whenever room appears, ``freed`` is set (the fetcher
waits on it while it has no room).
"""

from __future__ import annotations

import threading

__all__ = ["Books"]


class Books:
    """Capacity accounting for ``concurrency`` handlers (see the module doc)."""

    def __init__(self, concurrency: int, max_jobs: int | None, stop: threading.Event) -> None:
        self.concurrency = concurrency
        self.max_jobs = max_jobs
        self.stop = stop
        self.freed = threading.Event()
        self.outstanding = 0
        self.processed = 0
        self._lock = threading.Lock()

    def reserve(self, freeing: int = 0) -> int:
        """Reserve the room for a claim (counting ``freeing`` handlers, whose
        outcomes the claiming call records, as free); returns it (>= 0)."""
        with self._lock:
            room = self.concurrency - self.outstanding + freeing
            if self.max_jobs is not None:
                room = min(room, self.max_jobs - self.processed - self.outstanding)
            room = max(0, room)
            self.outstanding += room
            return room

    def unreserve(self, n: int) -> None:
        """``n`` reserved were not claimed (negative: a repeated claim
        answered more leases than were reserved; they are held all the same)."""
        with self._lock:
            self.outstanding -= n

    def settled(self, freed: int, reserved: int, claimed: int) -> None:
        """After a finish: ``freed`` jobs are over and ``claimed`` of
        ``reserved`` came. Room left unfilled (or stopping) sets ``freed``; a
        finish that refilled every slot wakes nobody."""
        with self._lock:
            self.outstanding -= freed + reserved - claimed
            self._count(freed)
            room = self.outstanding < self.concurrency
        if room or self.stop.is_set():
            self.freed.set()

    def done_one(self, counted: bool = True) -> None:
        """One job is over (``counted``: it ran; False: handed back unrun)."""
        with self._lock:
            self.outstanding -= 1
            if counted:
                self._count(1)
        self.freed.set()

    def idle(self) -> bool:
        """True when the process holds no job."""
        with self._lock:
            return self.outstanding == 0

    def at_limit(self) -> bool:
        """True when max_jobs is set and every job it allows is done or held."""
        with self._lock:
            return self.max_jobs is not None and \
                self.processed + self.outstanding >= self.max_jobs

    def _count(self, n: int) -> None:
        self.processed += n
        if self.max_jobs is not None and self.processed >= self.max_jobs:
            self.stop.set()
