"""The workshop's figures (example_project/notifications/measure.py): the
most starts in a window, the most spans at once, and what a token bucket
allows in a window, checked against a bucket driven greedily."""

import pytest

from example_project.notifications.measure import bucket_allows, most_at_once, most_in_window


def test_most_in_window_counts_a_half_open_window():
    assert most_in_window([], 1_000) == 0
    assert most_in_window([0, 999], 1_000) == 2
    assert most_in_window([0, 1_000], 1_000) == 1       # 1,000 ms apart: two windows
    assert most_in_window([5, 0, 400, 1_200, 1_300, 1_399], 1_000) == 4   # unsorted input


def test_most_at_once_does_not_count_a_span_that_ends_as_another_starts():
    assert most_at_once([]) == 0
    assert most_at_once([(0, 10), (10, 20), (20, 30)]) == 1
    assert most_at_once([(0, 10), (5, 20), (9, 12), (15, 30)]) == 3


def _greedy_starts(count, per_ms, span_ms):
    """Take a token at every ms one is whole, from a full bucket (the claim
    script's arithmetic: lua/includes/bucket.lua)."""
    tokens, at, starts = float(count), 0, []
    for now in range(span_ms):
        tokens = min(count, tokens + (now - at) * count / per_ms)
        at = now
        if tokens >= 1:
            tokens -= 1
            starts.append(now)
    return starts


@pytest.mark.parametrize("count, per_ms, allowed", [
    (1, 34, 30), (1, 1_000, 1), (30, 1_000, 59), (2, 3_000, 2), (10, 60_000, 10)])
def test_bucket_allows_is_what_a_greedy_taker_reaches(count, per_ms, allowed):
    assert bucket_allows(count, per_ms, 1_000) == allowed
    assert most_in_window(_greedy_starts(count, per_ms, 5_000), 1_000) == allowed
