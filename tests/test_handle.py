"""JobHandle: its wait's arguments, checked before the first read (the real
test server answers the reads)."""

from __future__ import annotations

import math
import time

import pytest

from echomq_django import JobHandle, Outcome
from echomq_django.exceptions import NoSuchJobError
from tests.testapp import jobs as testjobs


@pytest.mark.parametrize("kwargs, error, words", [
    ({"timeout_s": "5"}, TypeError, r"^timeout_s must be an int or a float, got str$"),
    ({"timeout_s": None}, TypeError, r"^timeout_s must be an int or a float, got NoneType$"),
    ({"timeout_s": True}, TypeError, r"^timeout_s must be an int or a float, got bool$"),
    ({"poll_s": [0.1]}, TypeError, r"^poll_s must be an int or a float, got list$"),
    ({"timeout_s": -1}, ValueError, r"^timeout_s must be >= 0 seconds, got -1$"),
    ({"timeout_s": -0.001}, ValueError, r"^timeout_s must be >= 0 seconds"),
    ({"timeout_s": math.nan}, ValueError, r"^timeout_s must be a finite number"),
    ({"timeout_s": math.inf}, ValueError, r"^timeout_s must be a finite number"),
    ({"poll_s": 0}, ValueError, r"^poll_s must be > 0 seconds, got 0$"),
    ({"poll_s": 0.0}, ValueError, r"^poll_s must be > 0 seconds"),
    ({"poll_s": -0.5}, ValueError, r"^poll_s must be > 0 seconds"),
    ({"poll_s": math.inf}, ValueError, r"^poll_s must be a finite number"),
    ({"poll_s": math.nan}, ValueError, r"^poll_s must be a finite number"),
])
def test_wait_refuses_bad_arguments_naming_them(queue, kwargs, error, words):
    handle = testjobs.add.using(queue=queue).enqueue(1, 1)
    with pytest.raises(error, match=words):
        handle.wait(**kwargs)
    if "timeout_s" in kwargs:
        with pytest.raises(error, match=words):
            handle.result(timeout_s=kwargs["timeout_s"])


def test_a_timeout_of_zero_looks_once():
    unknown = JobHandle("q-handle", "JOB" + "0" * 26, Outcome.ENQUEUED)
    with pytest.raises(NoSuchJobError):
        unknown.wait(timeout_s=0)


def test_a_poll_longer_than_the_timeout_does_not_outlast_it(queue):
    waiting = testjobs.add.using(queue=queue).enqueue(1, 1)   # no worker serves it
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"still pending after 0.2 s"):
        waiting.wait(timeout_s=0.2, poll_s=60)
    # One read now, one at the deadline: never a whole poll past it.
    assert time.monotonic() - started < 10
