"""Jobs the test suite enqueues. Each records what happened in Redis (not in
memory), so a test in another process can read it."""

import os
import time
from datetime import timedelta

import redis

from echomq_django import Backoff, job


def _client():
    return redis.Redis.from_url(os.environ["ECHOMQ_TEST_SERVER_URL"], decode_responses=True)


@job(queue="default")
def add(a, b):
    return a + b


@job(queue="default", max_attempts=3, backoff=Backoff.fixed(50))
def flaky(key, fail_times):
    """Fails the first ``fail_times`` runs, then returns the run count."""
    runs = _client().incr(key)
    if runs <= fail_times:
        raise RuntimeError(f"transient failure {runs}")
    return runs


@job(queue="default", max_attempts=2, backoff=Backoff.fixed(20))
def always_fails(key):
    _client().incr(key)
    raise ValueError("permanent failure")


@job(queue="default")
def record_start(key):
    """Stores the server time (ms) at which the handler started."""
    client = _client()
    sec, usec = client.time()
    client.set(key, sec * 1000 + usec // 1000)


@job(queue="default")
def sleep_then_mark(key, seconds):
    client = _client()
    client.set(key + ":started", 1)
    time.sleep(seconds)
    client.set(key + ":finished", 1)
    return "slept"


@job(queue="default", context=True)
def whoami(context):
    return {"job_id": context.job_id, "attempt": context.attempt, "queue": context.queue}


@job(queue="default", every=timedelta(hours=1))
def hourly_report():
    return "hourly"
