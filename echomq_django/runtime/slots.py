"""The running jobs of one consumer process, as its threads and its lease
keeper share them: one :class:`Slot` per handler thread."""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass

from ..protocol.records import Claim

__all__ = ["Slot", "Slots", "process_name"]


@dataclass
class Slot:
    """One thread's running job, as the lease keeper sees it."""

    claim: Claim
    lease_ms: int
    started: float  # time.monotonic() at claim
    timeout_ms: int | None = None
    max_attempts: int = 1
    policy: tuple = ("fixed", 0)
    timed_out: bool = False
    path: str = "?"
    #: Set once the finisher recorded this job's outcome and counted its
    #: handler free (the handler thread is on its way back).
    freed: bool = False
    #: A cancel was requested (read by the lease keeper's renewal).
    cancel_requested: bool = False
    #: The job the finisher claimed for this handler to run next, if any.
    next_claim: Claim | None = None

    def overdue(self, now: float) -> bool:
        return (self.timeout_ms is not None and not self.timed_out
                and (now - self.started) * 1000 > self.timeout_ms)


class Slots:
    """The running jobs of one process, one per handler thread. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[int, Slot] = {}

    def put(self, slot: Slot) -> None:
        """Record ``slot`` as the calling thread's running job."""
        with self._lock:
            self._slots[threading.get_ident()] = slot

    def pop(self) -> None:
        """The calling thread's job has finished."""
        with self._lock:
            self._slots.pop(threading.get_ident(), None)

    def current(self) -> Slot | None:
        """The calling thread's running job, or None."""
        with self._lock:
            return self._slots.get(threading.get_ident())

    def running(self) -> list[Slot]:
        """Every running job that has not timed out."""
        with self._lock:
            return [slot for slot in self._slots.values() if not slot.timed_out]

    def __len__(self) -> int:
        with self._lock:
            return len(self._slots)


def process_name() -> str:
    """``host:pid``, the name a consumer process announces and claims under."""
    return f"{socket.gethostname()}:{os.getpid()}"
