"""What the workshop measures from the fake API's call logs (server ms).

Pure functions over lists of instants and spans, so the table's figures can
be checked without a server (tests/test_workshop_measure.py).
"""

from __future__ import annotations

import math
from typing import Iterable

__all__ = ["most_in_window", "most_at_once", "bucket_allows"]


def most_in_window(starts: Iterable[int], window_ms: int) -> int:
    """The most instants of ``starts`` in any half-open window
    ``[t, t + window_ms)`` (0 for none)."""
    starts = sorted(starts)
    most, lo = 0, 0
    for hi, at in enumerate(starts):
        while at - starts[lo] >= window_ms:
            lo += 1
        most = max(most, hi - lo + 1)
    return most


def most_at_once(spans: Iterable[tuple[int, int]]) -> int:
    """The most spans ``(start_ms, end_ms)`` running at one instant; a span
    that ends when another starts does not overlap it."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                    key=lambda ev: (ev[0], ev[1]))        # ends before starts at a tie
    most = running = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def bucket_allows(count: int, per_ms: int, window_ms: int) -> int:
    """The most starts a token bucket of ``count`` per ``per_ms`` (holding at
    most ``count``) allows in any half-open window of ``window_ms``: the
    ``count`` it may hold when the window opens, plus every whole token that
    refills strictly inside it."""
    return count + math.ceil(count * window_ms / per_ms) - 1
