"""The archive's events on the bus (issue 13, item 3; docs/protocol.md,
"Archive"): every way a job ends appends one event to ``emq:{q}:archive``
while the queue's archive is on (``archive_max`` in its limits hash), and
none while it is off; set_limits keeps the cap."""

from __future__ import annotations

import time

import pytest

from echomq_django import BrandedId, Jobs, Queues
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.protocol.records import Finish


def _events(redis_client, queue):
    return [(f["id"], f["state"], int(f["at"]))
            for _, f in redis_client.xrange(Keyspace(queue).archive)]


def _enqueue(jobs, queue, n=1, **kw):
    ids = [BrandedId.generate() for _ in range(n)]
    for job_id in ids:
        jobs.enqueue(queue, job_id, "{}", **kw)
    return ids


def test_every_end_appends_one_event_when_the_archive_is_on(
        conn, redis_client, queue, server_time_ms):
    jobs, queues = Jobs(conn), Queues(conn)
    assert queues.set_archive(queue, 1000) is True
    assert queues.archive_max(queue) == 1000
    before = server_time_ms()
    done, retried, dead, flagged, waiting = _enqueue(jobs, queue, 5)
    scheduled = BrandedId.generate()
    jobs.enqueue_in(queue, scheduled, "{}", 60_000)
    held = {c.job_id: c for c in (jobs.claim(queue, "w", 60_000) for _ in range(4))}
    assert jobs.ack(queue, done, held[done].token, {"ok": 1}) == "done"
    # a retry and a snooze do not end the job: no event
    assert jobs.retry(queue, retried, held[retried].token, 60_000, "boom") == "scheduled"
    states, _, _ = jobs.finish_many(queue, [Finish("dead", dead, held[dead].token,
                                                   reason="failed", error="x",
                                                   error_class="builtins.ValueError")])
    assert states == ["dead"]
    assert jobs.cancel(queue, flagged) == "flagged"
    assert _events(redis_client, queue) == [(done, "done", _events(redis_client, queue)[0][2]),
                                            (dead, "dead", _events(redis_client, queue)[1][2])]
    assert jobs.ack(queue, flagged, held[flagged].token) == "cancelled"
    assert jobs.cancel(queue, waiting) == "cancelled"
    assert jobs.cancel(queue, scheduled) == "cancelled"
    events = _events(redis_client, queue)
    assert [(i, s) for i, s, _ in events] == [(done, "done"), (dead, "dead"),
                                               (flagged, "cancelled"), (waiting, "cancelled"),
                                               (scheduled, "cancelled")]
    assert all(before <= at <= server_time_ms() for _, _, at in events)
    # an end repeated by the same token (a lost reply) appends nothing more
    assert jobs.ack(queue, done, held[done].token, {"ok": 1}) == "done"
    assert len(_events(redis_client, queue)) == 5


def test_reap_s_stalled_death_and_cancel_append_events(conn, redis_client, queue):
    jobs = Jobs(conn)
    Queues(conn).set_archive(queue, 1000)
    stalled, cancelled = _enqueue(jobs, queue, 2)
    jobs.claim(queue, "w", 1)
    jobs.claim(queue, "w", 1)
    jobs.cancel(queue, cancelled)
    time.sleep(0.01)
    assert jobs.reap(queue, max_stalls=0) == 2
    assert sorted((i, s) for i, s, _ in _events(redis_client, queue)) == sorted(
        [(stalled, "dead"), (cancelled, "cancelled")])


def test_no_event_and_no_stream_when_the_archive_is_off(conn, redis_client, queue):
    jobs, queues = Jobs(conn), Queues(conn)
    queues.set_archive(queue, 10)
    assert queues.set_archive(queue, None) is True
    assert queues.set_archive(queue, None) is False
    assert queues.archive_max(queue) is None
    a, b = _enqueue(jobs, queue, 2)
    claim = jobs.claim(queue, "w", 60_000)
    jobs.ack(queue, claim.job_id, claim.token)
    jobs.cancel(queue, b)
    assert not redis_client.exists(Keyspace(queue).archive)


def test_the_stream_is_capped_near_archive_max(conn, redis_client, queue):
    jobs = Jobs(conn)
    Queues(conn).set_archive(queue, 100)
    for job_id in _enqueue(jobs, queue, 400):
        jobs.cancel(queue, job_id)
    # MAXLEN ~ trims whole nodes (100 entries each by default): near the cap, never far
    assert 100 <= redis_client.xlen(Keyspace(queue).archive) < 300


def test_set_limits_keeps_the_archive_cap_and_set_archive_checks_its_argument(
        conn, redis_client, queue):
    queues = Queues(conn)
    assert queues.set_archive(queue, 500) is True
    assert queues.set_archive(queue, 500) is False
    assert queues.set_limits(queue, concurrency=3) is True
    assert queues.set_limits(queue, concurrency=3) is False   # the cap is not a limit
    assert queues.archive_max(queue) == 500
    assert queues.limits(queue)["concurrency"] == 3
    assert queues.set_limits(queue) is True
    assert redis_client.hgetall(Keyspace(queue).limits) == {"archive_max": "500"}
    for bad, err in ((0, ValueError), (2**53 + 1, ValueError), ("5", TypeError),
                     (True, TypeError)):
        with pytest.raises(err, match="stream_max"):
            queues.set_archive(queue, bad)
    assert queues.archive_max(queue) == 500
