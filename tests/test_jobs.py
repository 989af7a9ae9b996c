"""jobs: the protocol surface against a real server (enqueue ... reap, horizon, get, wake)."""

import json
import random
import time

import pytest

from echomq_django.exceptions import KindError, StaleTokenError
from echomq_django.protocol.ids import BrandedId
from echomq_django import Claim, JobRow, Jobs, Outcome, Queues
from echomq_django.protocol.keyspace import WAKE_CAP
from echomq_django.rules import MAX_MS, MIN_RUN_AT_MS
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.repeat import sync
from tests import state





@pytest.fixture
def jobs(conn):
    return Jobs(conn)


@pytest.fixture
def ks(queue):
    return Keyspace(queue)


def _new_id() -> str:
    return BrandedId.generate("JOB")


# -- enqueue ---------------------------------------------------------------


def test_enqueue_writes_a_pending_row_at_score_zero(jobs, redis_client, queue, ks, server_time_ms):
    job_id = _new_id()
    before = server_time_ms()
    assert jobs.enqueue(queue, job_id, '{"n": 1}') is Outcome.ENQUEUED
    after = server_time_ms()
    row = redis_client.hgetall(ks.job(job_id))
    assert row["state"] == "pending"
    assert row["payload"] == '{"n": 1}'
    assert before <= int(row["enqueued_at_ms"]) <= after
    # attempts is not stored until the first claim: absent reads as 0.
    assert set(row) == {"state", "payload", "enqueued_at_ms"}
    assert jobs.get(queue, job_id).attempts == 0
    assert redis_client.zrange(ks.pending, 0, -1, withscores=True) == [(job_id, 0.0)]
    assert Outcome.ENQUEUED == "enqueued" and str(Outcome.ENQUEUED) == "enqueued"


def test_enqueue_duplicate_changes_nothing(jobs, redis_client, queue, ks):
    job_id = _new_id()
    jobs.enqueue(queue, job_id, '{"v": "first"}')
    before = snapshot(redis_client, queue)
    assert jobs.enqueue(queue, job_id, '{"v": "second"}') is Outcome.DUPLICATE
    assert jobs.enqueue_at(queue, job_id, '{"v": "third"}', MIN_RUN_AT_MS) is Outcome.DUPLICATE
    assert jobs.enqueue_in(queue, job_id, '{"v": "fourth"}', 10) is Outcome.DUPLICATE
    assert snapshot(redis_client, queue) == before
    assert redis_client.hget(ks.job(job_id), "payload") == '{"v": "first"}'


@pytest.mark.parametrize("namespace", ["USR", "NOT", "JO"])
def test_non_job_ids_raise_kind_error_and_write_nothing(jobs, redis_client, queue, namespace):
    job_id = BrandedId.generate(namespace)
    with pytest.raises(KindError, match="JOB-namespaced"):
        jobs.enqueue(queue, job_id, "{}")
    with pytest.raises(KindError, match="JOB-namespaced"):
        jobs.enqueue_at(queue, job_id, "{}", MIN_RUN_AT_MS)
    with pytest.raises(KindError, match="JOB-namespaced"):
        jobs.enqueue_in(queue, job_id, "{}", 0)
    assert snapshot(redis_client, queue) == {}


@pytest.mark.parametrize(
    "payload, exc",
    [("not json", ValueError), ("{", ValueError), ("", ValueError), (b"{}", TypeError),
     ({"a": 1}, TypeError), (None, TypeError)],
)
def test_bad_payload_is_refused_before_anything_is_written(jobs, redis_client, queue, payload, exc):
    with pytest.raises(exc, match="payload must be"):
        jobs.enqueue(queue, _new_id(), payload)
    with pytest.raises(exc, match="payload must be"):
        jobs.enqueue_at(queue, _new_id(), payload, MIN_RUN_AT_MS)
    assert snapshot(redis_client, queue) == {}


@pytest.mark.parametrize("job_id", [None, 5, b"JOB"])
def test_bad_job_id_type_is_refused(jobs, redis_client, queue, job_id):
    with pytest.raises(TypeError, match="job_id must be a str"):
        jobs.enqueue(queue, job_id, "{}")
    assert snapshot(redis_client, queue) == {}


# -- enqueue_at / enqueue_in ----------------------------------------------


def test_enqueue_at_parks_the_row_on_schedule_at_exactly_run_at(
    jobs, redis_client, queue, ks, server_time_ms
):
    job_id = _new_id()
    run_at = server_time_ms() + 3_600_123
    assert jobs.enqueue_at(queue, job_id, '{"x": 1}', run_at) is Outcome.SCHEDULED
    row = redis_client.hgetall(ks.job(job_id))
    assert row["state"] == "scheduled"
    assert "attempts" not in row and jobs.get(queue, job_id).attempts == 0
    assert row["payload"] == '{"x": 1}'
    assert int(row["run_at_ms"]) == run_at
    assert redis_client.zscore(ks.schedule, job_id) == run_at
    assert redis_client.zcard(ks.pending) == 0


@pytest.mark.parametrize("run_at", [MIN_RUN_AT_MS, MAX_MS])
def test_enqueue_at_accepts_the_bounds(jobs, redis_client, queue, ks, run_at):
    job_id = _new_id()
    assert jobs.enqueue_at(queue, job_id, "{}", run_at) == "scheduled"
    assert int(redis_client.zscore(ks.schedule, job_id)) == run_at
    assert int(redis_client.hget(ks.job(job_id), "run_at_ms")) == run_at


def test_enqueue_in_measures_the_delay_on_the_server_clock(
    jobs, redis_client, queue, ks, server_time_ms, monkeypatch
):
    real_time, real_time_ns = time.time, time.time_ns
    skew_s = 600
    monkeypatch.setattr(time, "time", lambda: real_time() + skew_s)
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + skew_s * 1_000_000_000)
    # The caller's clock really is ten minutes ahead now.
    assert time.time() - server_time_ms() / 1000 > skew_s - 5
    job_id = _new_id()
    before = server_time_ms()
    assert jobs.enqueue_in(queue, job_id, "{}", 5000) is Outcome.SCHEDULED
    after = server_time_ms()
    score = int(redis_client.zscore(ks.schedule, job_id))
    assert before + 5000 <= score <= after + 5000
    assert abs(score - (after + 5000)) <= 50
    assert int(redis_client.hget(ks.job(job_id), "run_at_ms")) == score
    assert redis_client.hget(ks.job(job_id), "state") == "scheduled"


def test_enqueue_in_zero_is_due_now(jobs, redis_client, queue, ks, server_time_ms):
    job_id = _new_id()
    jobs.enqueue_in(queue, job_id, "{}", 0)
    assert abs(int(redis_client.zscore(ks.schedule, job_id)) - server_time_ms()) <= 50
    assert jobs.promote(queue) == 1
    assert redis_client.zscore(ks.pending, job_id) == 0


@pytest.mark.parametrize("delay", [-1, -5000, MAX_MS + 1])
def test_enqueue_in_out_of_range_delay_raises_value_error(jobs, redis_client, queue, delay):
    with pytest.raises(ValueError, match=r"delay_ms must be in 0\.\.9007199254740992"):
        jobs.enqueue_in(queue, _new_id(), "{}", delay)
    assert snapshot(redis_client, queue) == {}


@pytest.mark.parametrize("run_at, words", [
    (-1, r"run_at_ms must be Unix milliseconds \(>= 946684800000, 2000-01-01\); got -1$"),
    (0, r"run_at_ms must be Unix milliseconds \(>= 946684800000, 2000-01-01\); got 0$"),
    (1_764_590_405, r"run_at_ms must be Unix milliseconds \(>= 946684800000, 2000-01-01\); "
                    r"got 1764590405, which looks like seconds$"),
    (MIN_RUN_AT_MS - 1, r"got 946684799999$"),
    (MAX_MS + 1, r"run_at_ms must be in 946684800000\.\.9007199254740992"),
    (2**64, r"run_at_ms must be in 946684800000\.\.9007199254740992"),
])
def test_enqueue_at_out_of_range_run_at_raises_value_error(jobs, redis_client, queue, run_at,
                                                           words):
    with pytest.raises(ValueError, match=words):
        jobs.enqueue_at(queue, _new_id(), "{}", run_at)
    assert snapshot(redis_client, queue) == {}


@pytest.mark.parametrize("value", [True, False, 1.0, 1000.5, "1000", None])
def test_non_int_times_raise_type_error(jobs, redis_client, queue, value):
    with pytest.raises(TypeError, match="run_at_ms must be an int"):
        jobs.enqueue_at(queue, _new_id(), "{}", value)
    with pytest.raises(TypeError, match="delay_ms must be an int"):
        jobs.enqueue_in(queue, _new_id(), "{}", value)
    assert snapshot(redis_client, queue) == {}


def test_a_bad_queue_name_writes_nothing_anywhere(jobs, redis_client, queue):
    bad = f"{queue} has spaces"
    job_id = _new_id()
    calls = [
        lambda: jobs.enqueue(bad, job_id, "{}"),
        lambda: jobs.enqueue_at(bad, job_id, "{}", MIN_RUN_AT_MS),
        lambda: jobs.enqueue_in(bad, job_id, "{}", 10),
        lambda: jobs.promote(bad),
        lambda: jobs.reap(bad),
        lambda: jobs.claim(bad, "w", 1000),
        lambda: jobs.ack(bad, job_id, "1"),
        lambda: jobs.retry(bad, job_id, "1", 10),
        lambda: jobs.dead(bad, job_id, "1", "failed"),
        lambda: jobs.release(bad, job_id, "1"),
        lambda: jobs.horizon(bad),
        lambda: jobs.get(bad, job_id),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"queue name must be 1-100 characters"):
            call()
    assert list(redis_client.scan_iter(match=f"*{queue}*", count=1000)) == []
    assert list(redis_client.scan_iter(match=f"*{job_id}*", count=1000)) == []


# -- promote ---------------------------------------------------------------


def test_promote_releases_only_due_jobs_oldest_due_first_within_the_batch(
    jobs, redis_client, queue, ks, server_time_ms
):
    now = server_time_ms()
    due = {_new_id(): now - 3000, _new_id(): now - 2000, _new_id(): now - 1000}
    future = _new_id()
    admission = list(due.items()) + [(future, now + 60_000)]
    random.Random(7).shuffle(admission)
    for job_id, run_at in admission:
        jobs.enqueue_at(queue, job_id, "{}", run_at)
    oldest_due = sorted(due, key=due.get)

    assert jobs.promote(queue, batch=2) == 2
    assert set(redis_client.zrange(ks.pending, 0, -1)) == set(oldest_due[:2])
    assert redis_client.zrange(ks.schedule, 0, -1) == [oldest_due[2], future]

    assert jobs.promote(queue, batch=2) == 1
    assert set(redis_client.zrange(ks.pending, 0, -1)) == set(oldest_due)
    assert redis_client.zrange(ks.schedule, 0, -1) == [future]

    assert jobs.promote(queue) == 0
    for job_id in oldest_due:
        assert redis_client.hget(ks.job(job_id), "state") == "pending"
        assert redis_client.zscore(ks.pending, job_id) == 0
    assert redis_client.hget(ks.job(future), "state") == "scheduled"
    # One wake marker per released job.
    assert redis_client.llen(ks.wake) == 3


def test_promote_on_an_empty_queue_returns_zero_and_writes_nothing(jobs, redis_client, queue):
    assert jobs.promote(queue) == 0
    assert snapshot(redis_client, queue) == {}


@pytest.mark.parametrize("batch, exc", [(0, ValueError), (100_001, ValueError),
                                        (True, TypeError), (1.0, TypeError)])
def test_promote_batch_is_checked(jobs, queue, batch, exc):
    with pytest.raises(exc, match="batch must be"):
        jobs.promote(queue, batch=batch)


# -- claim -----------------------------------------------------------------


def test_claim_order_is_mint_order_not_admission_order(jobs, queue):
    minted = [_new_id() for _ in range(30)]
    shuffled = minted[:]
    random.Random(11).shuffle(shuffled)
    assert shuffled != minted
    for job_id in shuffled:
        jobs.enqueue(queue, job_id, json.dumps({"id": job_id}))
    claimed = []
    while (claim := jobs.claim(queue, "w", 60_000)) is not None:
        claimed.append(claim.job_id)
        assert json.loads(claim.payload) == {"id": claim.job_id}
    assert claimed == minted


def test_claim_leases_the_job_on_the_server_clock(jobs, redis_client, queue, ks, server_time_ms):
    job_id = _new_id()
    jobs.enqueue(queue, job_id, '{"p": 2}')
    before = server_time_ms()
    claim = jobs.claim(queue, "host:1:main", 45_000)
    after = server_time_ms()
    assert isinstance(claim, Claim)
    assert claim.queue == queue and claim.job_id == job_id
    assert claim.payload == '{"p": 2}'
    assert claim.attempts == 1
    assert before <= claim.claimed_at_ms <= after
    assert claim.lease_deadline_ms == claim.claimed_at_ms + 45_000
    row = redis_client.hgetall(ks.job(job_id))
    assert row["state"] == "active"
    assert row["token"] == claim.token
    assert row["consumer"] == "host:1:main"
    assert int(row["attempts"]) == 1
    assert int(row["lease_until_ms"]) == claim.lease_deadline_ms
    assert int(row["started_at_ms"]) == claim.claimed_at_ms
    assert redis_client.zscore(ks.active, job_id) == claim.lease_deadline_ms
    assert redis_client.zscore(ks.pending, job_id) is None


def test_each_claim_gets_a_fresh_token(jobs, queue):
    for _ in range(3):
        jobs.enqueue(queue, _new_id(), "{}")
    tokens = [jobs.claim(queue, "w", 1000).token for _ in range(3)]
    assert len(set(tokens)) == 3


def test_claim_on_empty_returns_none_and_writes_nothing(jobs, redis_client, queue):
    assert jobs.claim(queue, "w", 1000) is None
    assert snapshot(redis_client, queue) == {}


def test_claim_skips_ids_whose_row_was_deleted(jobs, redis_client, queue, ks):
    gone, kept = _new_id(), _new_id()
    jobs.enqueue(queue, gone, "{}")
    jobs.enqueue(queue, kept, "{}")
    redis_client.delete(ks.job(gone))
    assert jobs.claim(queue, "w", 1000).job_id == kept
    assert redis_client.zcard(ks.pending) == 0
    assert redis_client.exists(ks.job(gone)) == 0


@pytest.mark.parametrize("lease_ms, exc", [(0, ValueError), (-1, ValueError), (1.5, TypeError),
                                           (True, TypeError)])
def test_claim_lease_is_checked(jobs, redis_client, queue, lease_ms, exc):
    jobs.enqueue(queue, _new_id(), "{}")
    before = snapshot(redis_client, queue)
    with pytest.raises(exc, match="lease_ms must be"):
        jobs.claim(queue, "w", lease_ms)
    assert snapshot(redis_client, queue) == before


# -- ack -------------------------------------------------------------------


def _claimed(jobs, queue, lease_ms=60_000, payload="{}"):
    job_id = _new_id()
    jobs.enqueue(queue, job_id, payload)
    claim = jobs.claim(queue, "w", lease_ms)
    assert claim.job_id == job_id
    return claim


def test_ack_with_the_current_token_completes_and_keeps_the_row(
    jobs, redis_client, queue, ks, server_time_ms
):
    claim = _claimed(jobs, queue)
    before = server_time_ms()
    assert jobs.ack(queue, claim.job_id, claim.token, {"sent": 3}, keep_ms=60_000) == "done"
    after = server_time_ms()
    row = redis_client.hgetall(ks.job(claim.job_id))
    finished = int(row["finished_at_ms"])
    assert before <= finished <= after
    assert row["state"] == "done"
    assert json.loads(row["result"]) == {"sent": 3}
    assert int(row["finished_at_ms"]) == finished
    assert "token" not in row and "lease_until_ms" not in row
    assert row["attempts"] == "1"
    assert redis_client.zscore(ks.active, claim.job_id) is None
    assert 59_000 <= redis_client.pttl(ks.job(claim.job_id)) <= 60_000
    assert jobs.get(queue, claim.job_id).result_value == {"sent": 3}


def test_ack_without_result_stores_none(jobs, redis_client, queue, ks):
    claim = _claimed(jobs, queue)
    jobs.ack(queue, claim.job_id, claim.token)
    assert redis_client.hget(ks.job(claim.job_id), "result") == ""
    assert jobs.get(queue, claim.job_id).result_value is None
    # The default retention is a day.
    assert 86_399_000 <= redis_client.pttl(ks.job(claim.job_id)) <= 86_400_000


def test_ack_with_a_non_json_result_raises_type_error_and_changes_nothing(
    jobs, redis_client, queue
):
    claim = _claimed(jobs, queue)
    before = snapshot(redis_client, queue)
    with pytest.raises(TypeError, match="result must be JSON-serialisable"):
        jobs.ack(queue, claim.job_id, claim.token, object())
    with pytest.raises(TypeError, match="result must be JSON-serialisable"):
        jobs.ack(queue, claim.job_id, claim.token, float("nan"))
    assert snapshot(redis_client, queue) == before


def _stale_calls(jobs, queue, job_id, token):
    return {
        "ack": lambda: jobs.ack(queue, job_id, token, "r"),
        "retry": lambda: jobs.retry(queue, job_id, token, 1000, "err"),
        "dead": lambda: jobs.dead(queue, job_id, token, "failed", "err"),
        "release": lambda: jobs.release(queue, job_id, token),
    }


@pytest.mark.parametrize("verb", ["ack", "retry", "dead", "release"])
def test_a_wrong_token_is_stale_and_changes_nothing(jobs, redis_client, queue, verb):
    claim = _claimed(jobs, queue)
    wrong = claim.token + "0"
    before = snapshot(redis_client, queue)
    with pytest.raises(StaleTokenError, match="token does not hold the lease"):
        _stale_calls(jobs, queue, claim.job_id, wrong)[verb]()
    assert snapshot(redis_client, queue) == before


@pytest.mark.parametrize("verb", ["ack", "retry", "dead", "release"])
def test_the_old_token_after_reap_is_stale_and_changes_nothing(
    jobs, redis_client, queue, ks, verb
):
    claim = _claimed(jobs, queue, lease_ms=1)
    time.sleep(0.01)
    assert jobs.reap(queue) == 1
    before = snapshot(redis_client, queue)
    assert redis_client.hget(ks.job(claim.job_id), "state") == "pending"
    with pytest.raises(StaleTokenError, match=r"\(state pending\)"):
        _stale_calls(jobs, queue, claim.job_id, claim.token)[verb]()
    assert snapshot(redis_client, queue) == before
    # A new claim gets a new token; the old one stays stale against it too.
    again = jobs.claim(queue, "w2", 60_000)
    assert again.job_id == claim.job_id and again.token != claim.token
    before = snapshot(redis_client, queue)
    with pytest.raises(StaleTokenError, match=r"\(state active\)"):
        _stale_calls(jobs, queue, claim.job_id, claim.token)[verb]()
    assert snapshot(redis_client, queue) == before


def test_ack_of_a_missing_row_is_stale(jobs, redis_client, queue):
    with pytest.raises(StaleTokenError, match="job row does not exist"):
        jobs.ack(queue, _new_id(), "1")
    assert snapshot(redis_client, queue) == {}


def test_an_ack_repeated_by_its_token_answers_done_and_changes_nothing(
        jobs, redis_client, queue):
    # A repeat whose first reply was lost (a dropped connection, a client
    # retry) is idempotent: it answers the recorded outcome.
    claim = _claimed(jobs, queue)
    assert jobs.ack(queue, claim.job_id, claim.token, 1) == "done"
    before = snapshot(redis_client, queue)
    assert jobs.ack(queue, claim.job_id, claim.token, 2) == "done"
    assert snapshot(redis_client, queue) == before
    assert jobs.get(queue, claim.job_id).result_value == 1


# -- retry -----------------------------------------------------------------


def test_retry_reparks_on_schedule_at_server_now_plus_delay(
    jobs, redis_client, queue, ks, server_time_ms
):
    claim = _claimed(jobs, queue)
    before = server_time_ms()
    assert jobs.retry(queue, claim.job_id, claim.token, 7_000, "Traceback: boom") == "scheduled"
    after = server_time_ms()
    row = redis_client.hgetall(ks.job(claim.job_id))
    run_at = int(row["run_at_ms"])
    assert before + 7_000 <= run_at <= after + 7_000
    assert row["state"] == "scheduled"
    assert int(row["run_at_ms"]) == run_at
    assert row["last_error"] == "Traceback: boom"
    assert int(row["failed_at_ms"]) == run_at - 7_000
    assert row["attempts"] == "1"
    assert "token" not in row and "lease_until_ms" not in row
    assert redis_client.zscore(ks.schedule, claim.job_id) == run_at
    assert redis_client.zscore(ks.active, claim.job_id) is None
    assert redis_client.zscore(ks.pending, claim.job_id) is None


def test_a_retried_job_comes_back_with_its_attempts_counted(jobs, redis_client, queue, ks):
    claim = _claimed(jobs, queue)
    jobs.retry(queue, claim.job_id, claim.token, 0, "e1")
    assert jobs.promote(queue) == 1
    again = jobs.claim(queue, "w", 60_000)
    assert again.job_id == claim.job_id
    assert again.attempts == 2


@pytest.mark.parametrize("delay, exc", [(-1, ValueError), (1.0, TypeError), (True, TypeError)])
def test_retry_delay_is_checked(jobs, redis_client, queue, delay, exc):
    claim = _claimed(jobs, queue)
    before = snapshot(redis_client, queue)
    with pytest.raises(exc, match="delay_ms must be"):
        jobs.retry(queue, claim.job_id, claim.token, delay)
    assert snapshot(redis_client, queue) == before


# -- dead ------------------------------------------------------------------


def test_dead_moves_the_job_to_the_dead_set_with_reason_and_error(
    jobs, redis_client, queue, ks, server_time_ms
):
    claim = _claimed(jobs, queue)
    before = server_time_ms()
    assert jobs.dead(queue, claim.job_id, claim.token, "failed", "ZeroDivisionError",
                     dead_ttl_ms=120_000) == "dead"
    after = server_time_ms()
    row = redis_client.hgetall(ks.job(claim.job_id))
    died = int(row["finished_at_ms"])
    assert before <= died <= after
    assert row["state"] == "dead"
    assert row["reason"] == "failed"
    assert row["last_error"] == "ZeroDivisionError"
    assert int(row["finished_at_ms"]) == died
    assert "token" not in row and "lease_until_ms" not in row
    assert redis_client.zscore(ks.dead, claim.job_id) == died
    assert redis_client.zscore(ks.active, claim.job_id) is None
    assert 119_000 <= redis_client.pttl(ks.job(claim.job_id)) <= 120_000


def test_dead_retention_keeps_the_newest_and_deletes_trimmed_rows(jobs, redis_client, queue, ks):
    claims = [_claimed(jobs, queue) for _ in range(5)]
    for claim in claims:
        jobs.dead(queue, claim.job_id, claim.token, "failed", "e", dead_max=3)
        time.sleep(0.002)  # distinct times of death, so "newest" is unambiguous
    ids = [c.job_id for c in claims]
    assert redis_client.zrange(ks.dead, 0, -1) == ids[2:]
    for job_id in ids[:2]:
        assert redis_client.exists(ks.job(job_id)) == 0
    for job_id in ids[2:]:
        assert redis_client.hget(ks.job(job_id), "state") == "dead"


def test_dead_retention_drops_letters_older_than_the_ttl(jobs, redis_client, queue, ks):
    # The sweep runs at each death with that call's ttl (one setting in practice).
    first = _claimed(jobs, queue)
    jobs.dead(queue, first.job_id, first.token, "failed", dead_ttl_ms=2_000)
    assert redis_client.zrange(ks.dead, 0, -1) == [first.job_id]
    time.sleep(0.05)
    second = _claimed(jobs, queue)
    jobs.dead(queue, second.job_id, second.token, "failed", dead_ttl_ms=20)
    assert redis_client.zrange(ks.dead, 0, -1) == [second.job_id]


@pytest.mark.parametrize("reason", ["", None, 3])
def test_dead_needs_a_reason(jobs, redis_client, queue, reason):
    claim = _claimed(jobs, queue)
    before = snapshot(redis_client, queue)
    with pytest.raises(TypeError, match="reason must be a non-empty str"):
        jobs.dead(queue, claim.job_id, claim.token, reason)
    assert snapshot(redis_client, queue) == before


# -- reap ------------------------------------------------------------------


def test_reap_hands_expired_leases_back_and_leaves_the_rest(jobs, redis_client, queue, ks):
    expired = _claimed(jobs, queue, lease_ms=1)
    live = _claimed(jobs, queue, lease_ms=60_000)
    live_row = redis_client.hgetall(ks.job(live.job_id))
    time.sleep(0.01)
    assert jobs.reap(queue) == 1
    row = redis_client.hgetall(ks.job(expired.job_id))
    assert row["state"] == "pending"
    assert row["stalls"] == "1"
    assert row["attempts"] == "1"
    assert "token" not in row and "lease_until_ms" not in row
    assert redis_client.zscore(ks.pending, expired.job_id) == 0
    assert redis_client.zscore(ks.active, expired.job_id) is None
    # The unexpired lease is untouched.
    assert redis_client.hgetall(ks.job(live.job_id)) == live_row
    assert redis_client.zscore(ks.active, live.job_id) == live.lease_deadline_ms
    assert jobs.reap(queue) == 0
    # Claimed again: a second attempt under a new token.
    again = jobs.claim(queue, "w2", 1)
    assert again.job_id == expired.job_id
    assert again.attempts == 2
    assert again.token not in (live.token, expired.token)
    time.sleep(0.01)
    assert jobs.reap(queue) == 1
    assert redis_client.hget(ks.job(expired.job_id), "stalls") == "2"


def test_reap_respects_the_batch(jobs, redis_client, queue, ks):
    for _ in range(3):
        _claimed(jobs, queue, lease_ms=1)
    time.sleep(0.01)
    assert jobs.reap(queue, batch=2) == 2
    assert redis_client.zcard(ks.active) == 1
    assert jobs.reap(queue, batch=2) == 1
    assert redis_client.zcard(ks.pending) == 3


def test_reap_on_an_empty_queue_writes_nothing(jobs, redis_client, queue):
    assert jobs.reap(queue) == 0
    assert snapshot(redis_client, queue) == {}


# -- release ---------------------------------------------------------------


def test_release_gives_back_the_attempt(jobs, redis_client, queue, ks):
    claim = _claimed(jobs, queue)
    assert jobs.release(queue, claim.job_id, claim.token) == "pending"
    row = redis_client.hgetall(ks.job(claim.job_id))
    assert row["state"] == "pending"
    assert row["attempts"] == "0"
    assert "token" not in row and "lease_until_ms" not in row
    assert redis_client.zscore(ks.pending, claim.job_id) == 0
    assert redis_client.zscore(ks.active, claim.job_id) is None
    assert jobs.claim(queue, "w", 1000).attempts == 1


# -- horizon ---------------------------------------------------------------


def test_horizon_of_an_empty_queue(jobs, redis_client, queue, server_time_ms):
    before = server_time_ms()
    now, next_ms, synced, plan_ms, heads, now_us = jobs.horizon(queue)
    after = server_time_ms()
    assert before <= now <= after
    assert now_us // 1000 == now        # one reading, in microseconds too
    assert next_ms is None and heads == (None, None, None)
    assert synced is False  # no sync of declared schedules wrote its marker
    assert plan_ms is None  # a read: no plan stored
    assert snapshot(redis_client, queue) == {}


def test_a_metronome_s_horizon_stores_its_plan(jobs, redis_client, queue, ks, server_time_ms):
    empty = jobs.horizon(queue, max_sleep_ms=30_000)
    assert empty.plan_ms == empty.now_ms + 30_000      # nothing due: the longest sleep
    assert int(redis_client.get(ks.beat_at)) == empty.plan_ms
    now = server_time_ms()
    jobs.enqueue_at(queue, _new_id(), "{}", now + 5_000)
    soon = jobs.horizon(queue, max_sleep_ms=30_000)
    assert soon.plan_ms == now + 5_000 == soon.heads[0] == soon.next_ms
    assert int(redis_client.get(ks.beat_at)) == soon.plan_ms
    jobs.enqueue_at(queue, _new_id(), "{}", MIN_RUN_AT_MS)  # long due
    due = jobs.horizon(queue, max_sleep_ms=30_000)
    assert due.next_ms == MIN_RUN_AT_MS and due.plan_ms == due.now_ms  # beat at once
    # The plan lapses a second after its instant.
    assert 0 < redis_client.pttl(ks.beat_at) <= 1_000


def test_the_horizon_s_nudge_wakes_a_consumer_only_for_work_nobody_was_woken_for(
        jobs, redis_client, queue, ks):
    jobs.horizon(queue, nudge=True)                 # nothing ready: nothing to wake
    assert redis_client.exists(ks.wake) == 0
    jobs.enqueue(queue, _new_id(), "{}")
    jobs.horizon(queue, nudge=True)                 # a marker waits already
    assert redis_client.llen(ks.wake) == 1
    redis_client.delete(ks.wake)                    # lost (its consumer died)
    jobs.horizon(queue)                             # no nudge asked: nothing
    assert redis_client.exists(ks.wake) == 0
    Queues(jobs.conn).pause(queue)
    jobs.horizon(queue, nudge=True)                 # paused: nobody may claim
    assert redis_client.exists(ks.wake) == 0
    redis_client.delete(ks.paused)
    jobs.horizon(queue, nudge=True)
    assert redis_client.lrange(ks.wake, 0, -1) == ["1"]


@pytest.mark.parametrize("earliest", ["schedule", "active", "repeat"])
def test_horizon_is_the_lowest_head_of_schedule_active_and_repeat(
    jobs, redis_client, queue, ks, server_time_ms, earliest
):
    now = server_time_ms()
    heads = {"schedule": now + 300_000, "active": now + 300_000, "repeat": now + 300_000}
    heads[earliest] = now + 100_000
    # Later members behind each head must not matter.
    jobs.enqueue_at(queue, _new_id(), "{}", heads["schedule"])
    jobs.enqueue_at(queue, _new_id(), "{}", heads["schedule"] + 1)
    jobs.enqueue(queue, _new_id(), "{}")
    claim = jobs.claim(queue, "w", heads["active"] - server_time_ms())
    redis_client.zadd(ks.repeat, {"nightly": heads["repeat"], "hourly": heads["repeat"] + 5})
    next_ms = jobs.horizon(queue).next_ms
    if earliest == "active":
        assert next_ms == claim.lease_deadline_ms
        assert abs(next_ms - heads["active"]) <= 50
    else:
        assert next_ms == heads[earliest]


def test_horizon_reports_the_sync_marker(jobs, redis_client, queue):
    assert jobs.horizon(queue).synced is False
    sync(redis_client, [], queues=[queue])
    assert redis_client.exists(Keyspace(queue).synced)
    assert jobs.horizon(queue).synced is True
    redis_client.delete(Keyspace(queue).synced)  # as a flush would
    assert jobs.horizon(queue).synced is False


# -- get -------------------------------------------------------------------


def test_get_returns_a_typed_row(jobs, redis_client, queue, ks):
    claim = _claimed(jobs, queue, payload='{"k": [1]}')
    redis_client.hset(ks.job(claim.job_id), "future_field", "x")
    row = jobs.get(queue, claim.job_id)
    assert isinstance(row, JobRow)
    assert row.queue == queue and row.job_id == claim.job_id
    assert row.state == "active"
    assert row.payload == '{"k": [1]}'
    assert row.attempts == 1 and isinstance(row.attempts, int)
    assert row.stalls == 0
    assert row.token == claim.token
    assert row.consumer == "w"
    assert row.lease_until_ms == claim.lease_deadline_ms
    assert row.started_at_ms == claim.claimed_at_ms
    assert row.first_started_at_ms == claim.claimed_at_ms
    assert row.workers == ("w",) and row.errors == ()
    assert isinstance(row.enqueued_at_ms, int)
    assert row.finished_at_ms is None and row.result is None and row.last_error is None
    assert row.extra == {"future_field": "x"}


def test_get_of_a_missing_job_is_none(jobs, queue):
    assert jobs.get(queue, _new_id()) is None


# -- wake and beat markers -------------------------------------------------


def test_enqueue_pushes_a_wake_marker(jobs, redis_client, queue, ks):
    jobs.enqueue(queue, _new_id(), "{}")
    assert redis_client.lrange(ks.wake, 0, -1) == ["1"]
    jobs.enqueue(queue, _new_id(), "{}")
    assert redis_client.llen(ks.wake) == 2


def test_the_wake_list_never_exceeds_the_cap(jobs, redis_client, queue, ks):
    assert WAKE_CAP == 100
    for n in range(1, 501):
        jobs.enqueue(queue, _new_id(), "{}")
        if n % 25 == 0:
            assert redis_client.llen(ks.wake) == min(n, WAKE_CAP)
    assert redis_client.llen(ks.wake) == WAKE_CAP
    assert redis_client.zcard(ks.pending) == 500


def test_schedule_marks_the_beat_only_for_a_run_at_before_the_metronome_s_plan(
    jobs, redis_client, queue, ks, server_time_ms
):
    now = server_time_ms()
    jobs.enqueue_at(queue, _new_id(), "{}", now + 60_000)       # no plan (no metronome): beat
    assert redis_client.lrange(ks.beat, 0, -1) == ["1"]
    redis_client.delete(ks.beat)                                # the metronome took it
    # It reads the horizon (head 60 s on) and plans to wake at its cap, 30 s on.
    plan = jobs.horizon(queue, max_sleep_ms=30_000).plan_ms
    assert now + 30_000 <= plan < now + 60_000
    jobs.enqueue_at(queue, _new_id(), "{}", now + 90_000)       # after the plan: no beat
    jobs.enqueue_at(queue, _new_id(), "{}", plan)               # at the plan: no beat
    jobs.enqueue_in(queue, _new_id(), "{}", 120_000)            # after: no beat
    assert redis_client.exists(ks.beat) == 0
    jobs.enqueue_at(queue, _new_id(), "{}", plan - 1)           # earlier: beat
    assert redis_client.lrange(ks.beat, 0, -1) == ["1"]
    jobs.enqueue_at(queue, _new_id(), "{}", now + 10_000)       # earlier again: still one
    assert redis_client.lrange(ks.beat, 0, -1) == ["1"]
    assert redis_client.exists(ks.wake) == 0                    # schedule never wakes consumers
    # A plan nobody renews lapses soon after its instant (a metronome that
    # died): then every instant marks the beat again.
    assert 30_000 <= redis_client.pttl(ks.beat_at) <= 30_000 + 1_000
    redis_client.delete(ks.beat, ks.beat_at)                    # as the expiry would
    jobs.enqueue_at(queue, _new_id(), "{}", now + 90_000)
    assert redis_client.lrange(ks.beat, 0, -1) == ["1"]


def test_claim_chains_a_wake_while_work_remains(jobs, redis_client, queue, ks):
    jobs.enqueue(queue, _new_id(), "{}")
    jobs.enqueue(queue, _new_id(), "{}")
    redis_client.delete(ks.wake)
    jobs.claim(queue, "w", 60_000)
    assert redis_client.llen(ks.wake) == 1      # one job left: wake one more consumer
    redis_client.delete(ks.wake)
    jobs.claim(queue, "w", 60_000)
    assert redis_client.exists(ks.wake) == 0    # pending is empty: nobody to wake


def test_claim_and_extend_mark_the_beat_only_for_a_deadline_before_the_plan(
        jobs, redis_client, queue, ks):
    for _ in range(3):
        jobs.enqueue(queue, _new_id(), "{}")
    jobs.claim(queue, "w", 60_000)               # no plan: beat
    assert redis_client.lrange(ks.beat, 0, -1) == ["1"]
    redis_client.delete(ks.beat)
    jobs.horizon(queue, max_sleep_ms=30_000)     # the plan: the cap, before the 60 s deadline
    held = jobs.claim(queue, "w", 120_000)       # after the plan: no beat
    jobs.extend(queue, held.job_id, held.token, 90_000)
    assert redis_client.exists(ks.beat) == 0
    jobs.extend(queue, held.job_id, held.token, 5_000)     # before: beat
    assert redis_client.lrange(ks.beat, 0, -1) == ["1"]
    redis_client.delete(ks.beat)
    jobs.claim(queue, "w", 1_000)                # before: beat
    assert redis_client.lrange(ks.beat, 0, -1) == ["1"]


def test_one_job_after_another_never_wakes_the_sleeping_metronome(jobs, redis_client, queue, ks):
    # Concurrency 1: each claim's lease is the only one, so it used to be the
    # new earliest deadline and cost a whole beat per job.
    jobs.horizon(queue, max_sleep_ms=30_000)     # nothing due: the metronome sleeps 30 s
    for _ in range(5):
        jobs.enqueue(queue, _new_id(), "{}")
        claim = jobs.claim(queue, "w", 30_000)   # the default lease
        jobs.ack(queue, claim.job_id, claim.token, None)
    assert redis_client.exists(ks.beat) == 0


# -- extend ----------------------------------------------------------------


def test_extend_moves_the_lease_deadline(jobs, redis_client, queue, ks, server_time_ms):
    claim = _claimed(jobs, queue, lease_ms=1_000)
    before = server_time_ms()
    deadline = jobs.extend(queue, claim.job_id, claim.token, 90_000)
    after = server_time_ms()
    assert before + 90_000 <= deadline <= after + 90_000
    assert redis_client.zscore(ks.active, claim.job_id) == deadline
    assert int(redis_client.hget(ks.job(claim.job_id), "lease_until_ms")) == deadline
    time.sleep(0.01)
    assert jobs.reap(queue) == 0


def test_extend_with_a_stale_token_changes_nothing(jobs, redis_client, queue):
    claim = _claimed(jobs, queue)
    before = snapshot(redis_client, queue)
    with pytest.raises(StaleTokenError):
        jobs.extend(queue, claim.job_id, claim.token + "0", 90_000)
    assert snapshot(redis_client, queue) == before


@pytest.mark.parametrize("job_id, exc, words", [
    ("JOB a:b", ValueError, "job_id must be 1-200 characters"),
    ("JOB" + "x" * 198, ValueError, "job_id must be 1-200 characters"),
    ("", ValueError, "job_id must be 1-200 characters"),
    (b"JOB1", TypeError, "job_id must be a str"),
])
def test_malformed_job_ids_are_refused_and_write_nothing(jobs, redis_client, queue, job_id, exc,
                                                         words):
    for call in (lambda: jobs.enqueue(queue, job_id, "{}"),
                 lambda: jobs.enqueue_in(queue, job_id, "{}", 10)):
        with pytest.raises(exc, match=words):
            call()
    assert list(redis_client.scan_iter(match=f"emq:{{{queue}}}:*")) == []


def test_kind_error_names_the_id(jobs, queue):
    with pytest.raises(KindError, match="got USR123"):
        jobs.enqueue(queue, "USR123", "{}")


@pytest.mark.parametrize("payload", ['{"a": NaN}', '[Infinity]', '-Infinity'])
def test_payload_json_constants_are_refused(jobs, redis_client, queue, payload):
    with pytest.raises(ValueError, match="JSON has no"):
        jobs.enqueue(queue, BrandedId.generate(), payload)
    assert list(redis_client.scan_iter(match=f"emq:{{{queue}}}:*")) == []


def test_a_payload_nested_past_the_parser_is_a_clear_error(jobs, redis_client, queue):
    with pytest.raises(ValueError, match="nested too deep"):
        jobs.enqueue(queue, BrandedId.generate(), "[" * 100_000 + "]" * 100_000)
    assert list(redis_client.scan_iter(match=f"emq:{{{queue}}}:*")) == []


def test_payload_size_limit_on_the_protocol_surface(conn, redis_client, queue):
    from echomq_django import PayloadTooLargeError

    small = Jobs(conn, max_payload_bytes=100)
    with pytest.raises(PayloadTooLargeError, match="101 bytes; the limit is 100"):
        small.enqueue(queue, BrandedId.generate(), '"' + "x" * 99 + '"')
    assert small.enqueue(queue, BrandedId.generate(), '"' + "x" * 98 + '"') == "enqueued"
    with pytest.raises(PayloadTooLargeError):
        Jobs(conn).enqueue(queue, BrandedId.generate(), '"' + "x" * 524_288 + '"')
    assert len(redis_client.zrange(Keyspace(queue).pending, 0, -1)) == 1


def test_an_ack_result_nested_too_deep_or_containing_itself_changes_nothing(
        jobs, redis_client, queue):
    from echomq_django import PayloadError

    claim = _claimed(jobs, queue)
    deep = []
    for _ in range(100_000):
        deep = [deep]
    loop = {}
    loop["me"] = loop
    before = snapshot(redis_client, queue)
    with pytest.raises(PayloadError, match="^result is nested deeper than 100 levels"):
        jobs.ack(queue, claim.job_id, claim.token, deep)
    with pytest.raises(PayloadError, match=r"^result contains itself \(again at result\['me'\]\)"):
        jobs.ack(queue, claim.job_id, claim.token, loop)
    assert snapshot(redis_client, queue) == before


# -- text that UTF-8 cannot encode -----------------------------------------------


LONE = "\ud800"  # a lone surrogate: what surrogateescape leaves for a bad byte


@pytest.mark.parametrize("verb", ["enqueue", "enqueue_at", "enqueue_in"])
def test_a_lone_surrogate_in_payload_text_is_refused_naming_payload(
        jobs, redis_client, queue, verb):
    text = '{"name": "caf' + LONE + '"}'
    extra = {"enqueue": (), "enqueue_at": (2_000_000_000_000,), "enqueue_in": (10,)}[verb]
    with pytest.raises(ValueError, match=r"payload must be text UTF-8 can encode; it has a "
                                         r"lone surrogate '\\ud800' at index 13") as info:
        getattr(jobs, verb)(queue, _new_id(), text, *extra)
    assert not isinstance(info.value, UnicodeError)
    assert snapshot(redis_client, queue) == {}
    # The escaped form is plain ASCII JSON text and is accepted.
    assert getattr(jobs, verb)(queue, _new_id(), '{"name": "caf\\ud800"}', *extra) in (
        "enqueued", "scheduled")


def test_a_lone_surrogate_in_a_claim_s_consumer_is_refused(jobs, redis_client, queue):
    jobs.enqueue(queue, _new_id(), "{}")
    before = snapshot(redis_client, queue)
    with pytest.raises(ValueError, match="consumer must be text UTF-8 can encode"):
        jobs.claim(queue, "worker-" + LONE, 60_000)
    assert snapshot(redis_client, queue) == before


@pytest.mark.parametrize("name, call", [
    ("error", lambda j, q, c: j.retry(q, c.job_id, c.token, 10, error="boom " + LONE)),
    ("reason", lambda j, q, c: j.dead(q, c.job_id, c.token, "bad " + LONE)),
    ("error", lambda j, q, c: j.dead(q, c.job_id, c.token, "failed", error=LONE)),
    ("message", lambda j, q, c: j.progress(q, c.job_id, c.token, 50, message=LONE)),
    ("token", lambda j, q, c: j.ack(q, c.job_id, c.token + LONE)),
    ("token", lambda j, q, c: j.retry(q, c.job_id, c.token + LONE, 10)),
    ("token", lambda j, q, c: j.snooze(q, c.job_id, c.token + LONE, 10)),
    ("token", lambda j, q, c: j.dead(q, c.job_id, c.token + LONE, "failed")),
    ("token", lambda j, q, c: j.extend(q, c.job_id, c.token + LONE, 1000)),
    ("token", lambda j, q, c: j.release(q, c.job_id, c.token + LONE)),
    ("token", lambda j, q, c: j.progress(q, c.job_id, c.token + LONE, 50)),
    ("result", lambda j, q, c: j.ack(q, c.job_id, c.token, LONE)),
    (r"result\['k'\]\[1\]", lambda j, q, c: j.ack(q, c.job_id, c.token, {"k": ["ok", LONE]})),
    (r"a key of result\[0\]", lambda j, q, c: j.ack(q, c.job_id, c.token, [{LONE: 1}])),
])
def test_a_lone_surrogate_in_a_held_job_s_text_is_refused_naming_it(
        jobs, redis_client, queue, name, call):
    claim = _claimed(jobs, queue)
    before = snapshot(redis_client, queue)
    with pytest.raises(ValueError, match=f"{name} must be text UTF-8 can encode") as info:
        call(jobs, queue, claim)
    assert not isinstance(info.value, UnicodeError)
    assert snapshot(redis_client, queue) == before


def snapshot(client, queue: str) -> dict:
    return state.snapshot(client, state.queue_pattern(queue))
