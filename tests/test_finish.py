"""jobs/finish, and extend and release over many leases (issue 11, items 1-2;
docs/protocol.md, "finish", "extend", "release"): several outcomes recorded
and the next jobs claimed in one call, with the single calls' rules."""

from __future__ import annotations

import pytest

from echomq_django import Jobs
from echomq_django.exceptions import StaleTokenError
from echomq_django.protocol import scripts
from echomq_django.protocol.ids import BrandedId
from echomq_django.protocol.keyspace import WAKE_CAP, Keyspace
from echomq_django.protocol.records import Finish
from tests.state import queue_pattern, snapshot


@pytest.fixture
def jobs(conn):
    return Jobs(conn)


def enqueue(jobs, queue, n, **options) -> list[str]:
    ids = [BrandedId.generate() for _ in range(n)]
    for job_id in ids:
        assert jobs.enqueue(queue, job_id, '{"n": 1}', **options) == "enqueued"
    return ids


def test_an_ack_takes_the_next_job_in_the_same_call(jobs, queue, redis_client):
    first, second = enqueue(jobs, queue, 2)
    claim = jobs.claim(queue, "w", 60_000)
    assert claim.job_id == first
    states, claims, wait_ms = jobs.finish_many(
        queue, [Finish("ack", first, claim.token, {"ok": True})], consumer="w",
        lease_ms=60_000, count=1)
    assert states == ["done"] and wait_ms is None
    assert [c.job_id for c in claims] == [second]
    assert claims[0].attempts == 1 and claims[0].token != claim.token
    ks = Keyspace(queue)
    assert redis_client.hget(ks.job(first), "state") == "done"
    assert redis_client.hget(ks.job(first), "result") == '{"ok":true}'
    assert redis_client.hget(ks.job(second), "state") == "active"
    assert redis_client.zrange(ks.active, 0, -1) == [second]


def test_every_outcome_in_one_call_ends_as_its_single_call_ends(jobs, queue, redis_client):
    """Two queues, the same four jobs: one ends each by its single call, the
    other all four in one finish; the rows and sets agree field for field
    (times and tokens aside)."""
    twin = queue + "-twin"
    rows = {}
    for q in (queue, twin):
        enqueue(jobs, q, 4)
        a, r, s, d = (jobs.claim(q, "w", 60_000) for _ in range(4))
        if q == queue:
            assert jobs.ack(q, a.job_id, a.token, [1]) == "done"
            assert jobs.retry(q, r.job_id, r.token, 5_000, "boom") == "scheduled"
            assert jobs.snooze(q, s.job_id, s.token, 7_000) == "scheduled"
            assert jobs.dead(q, d.job_id, d.token, "failed", "tb") == "dead"
        else:
            states, claims, _ = jobs.finish_many(q, [
                Finish("ack", a.job_id, a.token, [1]),
                Finish("retry", r.job_id, r.token, delay_ms=5_000, error="boom"),
                Finish("snooze", s.job_id, s.token, delay_ms=7_000),
                Finish("dead", d.job_id, d.token, reason="failed", error="tb")])
            assert states == ["done", "scheduled", "scheduled", "dead"] and claims == []
        ks = Keyspace(q)
        timeless = {"finished_at_ms", "failed_at_ms", "run_at_ms", "enqueued_at_ms",
                    "started_at_ms", "first_started_at_ms", "settled_token", "consumer"}
        rows[q] = ([{k: v for k, v in redis_client.hgetall(ks.job(c.job_id)).items()
                     if k not in timeless} for c in (a, r, s, d)],
                   [redis_client.zcard(key) for key in (ks.active, ks.schedule, ks.dead)],
                   redis_client.hlen(ks.claims))
    assert rows[queue] == rows[twin]
    assert rows[queue][1] == [0, 2, 1]


def test_a_stale_outcome_is_answered_stale_and_the_others_are_recorded(jobs, queue,
                                                                        redis_client):
    enqueue(jobs, queue, 3)
    a, b = jobs.claim(queue, "w", 60_000), jobs.claim(queue, "w", 60_000)
    states, claims, _ = jobs.finish_many(
        queue, [Finish("ack", a.job_id, "not-the-token"), Finish("ack", b.job_id, b.token)],
        consumer="w", lease_ms=60_000, count=5)
    assert states == ["stale", "done"]
    assert len(claims) == 1
    ks = Keyspace(queue)
    assert redis_client.hget(ks.job(a.job_id), "state") == "active"
    assert redis_client.hget(ks.job(a.job_id), "token") == a.token


def test_a_repeat_of_the_whole_call_answers_the_same_and_claims_nothing_more(
        jobs, queue, redis_client):
    enqueue(jobs, queue, 4)
    held = [jobs.claim(queue, "w", 60_000) for _ in range(2)]
    outcomes = [Finish("ack", held[0].job_id, held[0].token),
                Finish("retry", held[1].job_id, held[1].token, delay_ms=1_000, error="x")]
    first = jobs.finish_many(queue, outcomes, consumer="w", lease_ms=60_000, count=2,
                             token="batch-1")
    before = snapshot(redis_client, queue_pattern(queue))
    again = jobs.finish_many(queue, outcomes, consumer="w", lease_ms=60_000, count=2,
                             token="batch-1")
    assert again[0] == first[0] == ["done", "scheduled"]
    assert [c.job_id for c in again[1]] == [c.job_id for c in first[1]]
    assert [c.token for c in again[1]] == ["batch-1.1", "batch-1.2"]
    assert snapshot(redis_client, queue_pattern(queue)) == before


def test_a_freed_lane_is_served_in_the_same_call(jobs, queue):
    """lane_concurrency 1: lane a's second job waits while its first runs;
    finishing the first claims the second in the same call, in ring order
    after the other lanes' work (fairness as claim's)."""
    jobs.set_limits(queue, lane_concurrency=1)
    a1, a2 = enqueue(jobs, queue, 2, group="a")
    (b1,) = enqueue(jobs, queue, 1, group="b")
    first, _ = jobs.claim_many(queue, "w", 60_000, 5)
    assert sorted(c.job_id for c in first) == sorted([a1, b1])
    held = {c.job_id: c for c in first}
    states, claims, _ = jobs.finish_many(
        queue, [Finish("ack", a1, held[a1].token)], consumer="w", lease_ms=60_000, count=5)
    assert states == ["done"] and [c.job_id for c in claims] == [a2]


def test_a_malformed_outcome_writes_nothing_and_names_its_index(jobs, queue, redis_client,
                                                              conn):
    enqueue(jobs, queue, 3)
    held = [jobs.claim(queue, "w", 60_000) for _ in range(2)]
    good = Finish("ack", held[0].job_id, held[0].token)
    before = snapshot(redis_client, queue_pattern(queue))
    bad_cases = [
        (Finish("ack", held[1].job_id, held[1].token, result={1, 2}), TypeError,
         r"outcomes\[1\]"),
        (Finish("retry", held[1].job_id, held[1].token, delay_ms=-1), ValueError,
         r"outcomes\[1\].*delay_ms"),
        (Finish("dead", held[1].job_id, held[1].token, reason=""), TypeError,
         r"outcomes\[1\].*reason"),
        (Finish("explode", held[1].job_id, held[1].token), ValueError, r"outcomes\[1\]\.op"),
        (Finish("ack", "not an id!", held[1].token), ValueError, "job_id"),
    ]
    for bad, kind, match in bad_cases:
        with pytest.raises(kind, match=match):
            jobs.finish_many(queue, [good, bad], consumer="w", lease_ms=60_000, count=1)
        assert snapshot(redis_client, queue_pattern(queue)) == before
    # The script checks every outcome before recording any, whatever the caller.
    ks = Keyspace(queue)
    keys = [ks.pending, ks.active, ks.claims, ks.wake, ks.beat, ks.paused, ks.schedule, ks.dead,
            ks.job(held[0].job_id), ks.job(held[1].job_id)]
    fixed = [ks.base, "w", 60_000, WAKE_CAP, "t", 1, 60_000, 60_000, 10, 60_000]
    good_args = ["ack", held[0].job_id, held[0].token, "", "", ""]
    for tail, match in [(["ack", held[1].job_id, held[1].token, "{nope", "", ""], "result"),
                        (["retry", held[1].job_id, held[1].token, "1.5", "", ""], "delay_ms"),
                        (["dead", held[1].job_id, held[1].token, "", "", ""], "reason"),
                        (["pause", held[1].job_id, held[1].token, "", "", ""], "op"),
                        (["ack", held[1].job_id, held[1].token, "", ""], "six entries")]:
        with pytest.raises(ValueError, match=match):
            scripts.run(conn, "jobs/finish", keys, fixed + good_args + tail)
        assert snapshot(redis_client, queue_pattern(queue)) == before
    with pytest.raises(ValueError, match="one row key per outcome"):
        scripts.run(conn, "jobs/finish", keys[:-1], fixed + good_args + good_args)
    with pytest.raises(ValueError, match="EMQKEY|must be"):
        scripts.run(conn, "jobs/finish", keys[:-1] + [ks.job(held[0].job_id)],
                    fixed + good_args + ["ack", held[1].job_id, held[1].token, "", "", ""])
    assert snapshot(redis_client, queue_pattern(queue)) == before


def test_extend_renews_every_lease_and_reads_the_cancel_flags(jobs, queue, server_time_ms):
    enqueue(jobs, queue, 3)
    held = [jobs.claim(queue, "w", 10_000) for _ in range(3)]
    assert jobs.cancel(queue, held[1].job_id) == "flagged"
    jobs.ack(queue, held[2].job_id, held[2].token)
    before = server_time_ms()
    renewals = jobs.extend_many(queue, [(c.job_id, c.token, 90_000) for c in held])
    assert [r.cancel_requested for r in renewals] == [False, True, False]
    assert all(r.deadline_ms >= before + 90_000 for r in renewals[:2])
    assert renewals[2].deadline_ms is None and "EMQSTALE" in renewals[2].stale
    assert jobs.get(queue, held[0].job_id).lease_until_ms == renewals[0].deadline_ms
    with pytest.raises(StaleTokenError, match="does not hold the lease"):
        jobs.extend(queue, held[2].job_id, held[2].token, 1_000)


def test_release_hands_every_lease_back_in_one_call(jobs, queue, redis_client):
    ids = enqueue(jobs, queue, 3)
    held = [jobs.claim(queue, "w", 60_000) for _ in range(3)]
    jobs.cancel(queue, held[1].job_id)
    jobs.ack(queue, held[2].job_id, held[2].token)
    answers = jobs.release_many(queue, [(c.job_id, c.token) for c in held])
    assert answers[:2] == ["pending", "cancelled"]
    assert isinstance(answers[2], StaleTokenError)
    ks = Keyspace(queue)
    assert redis_client.zrange(ks.pending, 0, -1) == [ids[0]]
    assert redis_client.hget(ks.job(ids[0]), "attempts") in (None, "0")
    assert redis_client.hget(ks.job(ids[1]), "state") == "cancelled"
    # A repeat (the first reply lost) answers the same and changes nothing.
    before = snapshot(redis_client, queue_pattern(queue))
    again = jobs.release_many(queue, [(c.job_id, c.token) for c in held[:2]])
    assert again == ["pending", "cancelled"]
    assert snapshot(redis_client, queue_pattern(queue)) == before


def test_garbage_lists_name_the_argument_and_the_index_and_write_nothing(jobs, queue,
                                                                        redis_client):
    """finish_many, extend_many and release_many: whatever the caller passes,
    a clear TypeError or ValueError naming the list and the entry, and
    nothing written. Before, an outcome that was not a Finish raised
    AttributeError ('dict' object has no attribute 'job_id'), a lease of the
    wrong shape "not enough values to unpack", a bad job id named no index,
    and a generator "object of type 'generator' has no len()"."""
    enqueue(jobs, queue, 2)
    held = [jobs.claim(queue, "w", 60_000) for _ in range(2)]
    good = Finish("ack", held[0].job_id, held[0].token)
    before = snapshot(redis_client, queue_pattern(queue))
    cases = [
        (lambda: jobs.finish_many(queue, None), TypeError, r"^outcomes must be a list"),
        (lambda: jobs.finish_many(queue, [good, {"op": "ack"}]), TypeError,
         r"^outcomes\[1\] must be a Finish, got dict"),
        (lambda: jobs.finish_many(queue, [good, ("ack", held[1].job_id, held[1].token)]),
         TypeError, r"^outcomes\[1\] must be a Finish, got tuple"),
        (lambda: jobs.finish_many(queue, [good, Finish("ack", "no id!", held[1].token)]),
         ValueError, r"^outcomes\[1\]: job_id must be"),
        (lambda: jobs.finish_many(queue, [good, Finish("ack", 5, held[1].token)]),
         TypeError, r"^outcomes\[1\]: job_id must be a str"),
        (lambda: jobs.extend_many(queue, None), TypeError, r"^leases must be a list"),
        (lambda: jobs.extend_many(queue, [(held[0].job_id, held[0].token)]), TypeError,
         r"^leases\[0\] must be a tuple \(job_id, token, lease_ms\)"),
        (lambda: jobs.extend_many(queue, [(held[0].job_id, held[0].token, 1_000),
                                          ("no id!", held[1].token, 1_000)]),
         ValueError, r"^leases\[1\]: job_id must be"),
        (lambda: jobs.extend_many(queue, [(held[0].job_id, held[0].token, 1_000),
                                          (held[1].job_id, held[1].token, 0)]),
         ValueError, r"^leases\[1\]: lease_ms must be in 1\.\."),
        (lambda: jobs.release_many(queue, "JOB1"), TypeError, r"^leases must be a list"),
        (lambda: jobs.release_many(queue, [(held[0].job_id, held[0].token, 1)]), TypeError,
         r"^leases\[0\] must be a tuple \(job_id, token\)"),
        (lambda: jobs.release_many(queue, [(held[0].job_id, held[0].token),
                                           (held[1].job_id, 5)]),
         TypeError, r"^leases\[1\]: token must be a non-empty str"),
    ]
    for call, kind, words in cases:
        with pytest.raises(kind, match=words):
            call()
        assert snapshot(redis_client, queue_pattern(queue)) == before
    # Any iterable of the right entries is taken, a generator included.
    renewals = jobs.extend_many(queue, ((c.job_id, c.token, 60_000) for c in held))
    assert all(r.deadline_ms is not None for r in renewals)


def test_a_claim_repeated_with_a_smaller_count_answers_every_lease_its_token_holds(
        jobs, queue, redis_client):
    """The fetcher repeats a claim whose reply was lost with the same token
    but with the room it has by then, which finishes may have filled
    meanwhile (runtime/consumer.py). Before, the repeat answered only its
    first ``count`` leases: the others stayed leased to a consumer that never
    learned of them until reap took them back with a stall (twice: dead
    "stalled")."""
    enqueue(jobs, queue, 5)
    first, _ = jobs.claim_many(queue, "w", 60_000, 3, token="lost-reply")
    assert len(first) == 3
    before = snapshot(redis_client, queue_pattern(queue))
    again, _ = jobs.claim_many(queue, "w", 60_000, 1, token="lost-reply")
    assert [(c.job_id, c.token) for c in again] == [(c.job_id, c.token) for c in first]
    _, by_finish, _ = jobs.finish_many(queue, [], consumer="w", lease_ms=60_000, count=2,
                                       token="lost-reply")
    assert [c.job_id for c in by_finish] == [c.job_id for c in first]
    assert snapshot(redis_client, queue_pattern(queue)) == before


def test_every_attempt_keeps_its_worker_and_its_error(jobs, queue):
    """The row's attempt trail ("The job row": worker.<n>, error.<n>,
    error_class.<n>, first_started_at_ms): two failed attempts by two
    workers, then a third that succeeds."""
    (job_id,) = enqueue(jobs, queue, 1)
    starts = []
    for attempt, (worker, cls) in enumerate([("w1", "builtins.ValueError"),
                                             ("w2", "")], start=1):
        claim = jobs.claim(queue, worker, 60_000)
        assert claim.job_id == job_id and claim.attempts == attempt
        starts.append(claim.claimed_at_ms)
        states, _, _ = jobs.finish_many(queue, [Finish(
            "retry", job_id, claim.token, delay_ms=0, error=f"tb {attempt}", error_class=cls)])
        assert states == ["scheduled"]
        jobs.promote(queue)
    claim = jobs.claim(queue, "w3", 60_000)
    jobs.finish_many(queue, [Finish("ack", job_id, claim.token, "ok")])
    row = jobs.get(queue, job_id)
    assert row.state == "done" and row.attempts == 3
    assert row.workers == ("w1", "w2", "w3")
    assert [(e.attempt, e.error_class, e.traceback) for e in row.errors] == [
        (1, "builtins.ValueError", "tb 1"), (2, "", "tb 2")]
    assert row.first_started_at_ms == starts[0] and row.started_at_ms == claim.claimed_at_ms
    assert row.last_error == "tb 2"


def test_a_dead_attempt_keeps_its_error_class(jobs, queue):
    (job_id,) = enqueue(jobs, queue, 1)
    claim = jobs.claim(queue, "w", 60_000)
    jobs.finish_many(queue, [Finish("dead", job_id, claim.token, reason="failed", error="tb",
                                    error_class="app.errors.Boom")])
    row = jobs.get(queue, job_id)
    assert row.state == "dead"
    assert [(e.attempt, e.error_class, e.traceback) for e in row.errors] == [
        (1, "app.errors.Boom", "tb")]
    with pytest.raises(ValueError, match="error_class"):
        jobs.finish_many(queue, [Finish("dead", job_id, "t", reason="x", error_class="\ud800")])


def test_metadata_is_saved_behind_the_fence(jobs, queue, redis_client):
    (job_id,) = enqueue(jobs, queue, 1)
    claim = jobs.claim(queue, "w", 60_000)
    assert jobs.save_metadata(queue, job_id, claim.token, {"trace": "t-1"}) is False
    assert redis_client.hget(Keyspace(queue).job(job_id), "metadata") == '{"trace":"t-1"}'
    before = redis_client.hgetall(Keyspace(queue).job(job_id))
    with pytest.raises(StaleTokenError):
        jobs.save_metadata(queue, job_id, "not-the-token", {"trace": "t-2"})
    with pytest.raises(TypeError, match="metadata"):
        jobs.save_metadata(queue, job_id, claim.token, ["a", "list"])
    with pytest.raises(TypeError, match="metadata"):
        jobs.save_metadata(queue, job_id, claim.token, {"x": float("nan")})
    assert redis_client.hgetall(Keyspace(queue).job(job_id)) == before


def test_a_retried_or_snoozed_attempt_takes_its_progress_with_it(jobs, queue):
    for op in ("retry", "snooze"):
        (job_id,) = enqueue(jobs, queue, 1)
        claim = jobs.claim(queue, "w", 60_000)
        jobs.progress(queue, job_id, claim.token, 80, "uploading part 4/5")
        jobs.finish_many(queue, [Finish(op, job_id, claim.token, delay_ms=0, error="e")])
        row = jobs.get(queue, job_id)
        assert (row.progress, row.progress_message, row.progress_at_ms) == (None, None, None), op
        jobs.promote(queue)
        jobs.claim(queue, "w", 60_000)       # the next attempt
