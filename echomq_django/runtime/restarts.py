"""A supervised child's restart schedule: a child that dies soon after its start,
again and again, is started again after a delay that doubles (a broken import
or a corrupt key is not forked in a tight loop)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ChildSlot", "RESTART_STABLE_S", "RESTART_FIRST_S", "RESTART_CAP_S"]

#: A child that ran this long before it exited is started again at once (s).
RESTART_STABLE_S = 30.0
#: A child that exits sooner than RESTART_STABLE_S after its start, twice or
#: more in a row, waits before the next start: RESTART_FIRST_S, doubling with
#: each such exit up to RESTART_CAP_S (s). A child that dies as it starts (a
#: broken import, a corrupt key) is not forked in a tight loop.
RESTART_FIRST_S = 0.5
RESTART_CAP_S = 30.0


@dataclass
class ChildSlot:
    """One child process the supervisor keeps running, across its restarts."""

    role: str                   # "consumer" or "metronome"
    number: int                 # 1.., for the log
    pid: int | None = None      # None while no child runs in the slot
    started: float = 0.0        # time.monotonic() at the last start
    quick_exits: int = 0        # exits in a row that came before RESTART_STABLE_S
    due: float | None = None    # when to start again (monotonic); None: never

    def exited(self, now: float) -> float:
        """Record that the child exited at ``now`` (monotonic s); return how
        long to wait before the next start (s): 0 after a run of
        RESTART_STABLE_S or a first quick exit, then RESTART_FIRST_S
        doubling, at most RESTART_CAP_S."""
        self.pid = None
        self.quick_exits = self.quick_exits + 1 if now - self.started < RESTART_STABLE_S else 0
        if self.quick_exits <= 1:
            return 0.0
        return min(RESTART_CAP_S, RESTART_FIRST_S * 2 ** min(self.quick_exits - 2, 16))
