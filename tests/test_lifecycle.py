"""Lifecycle controls on the real server (issue 4), at the protocol level.

The scripts one by one (extend, snooze, cancel, reap's stalled sweep, progress,
retention), the zombie race (an old lease holder changes nothing, 1,000
trials), bad input, and the consumer's outcome mapping run in this process
(``Consumer.run_claim`` on a real claim). End-to-end versions with runechomq
subprocesses are in test_lifecycle_worker.py.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta

import pytest
import redis

from echomq_django import Backoff, JobContext, Jobs, Retry, Snooze
from echomq_django.runtime.consumer import Consumer, Retention
from echomq_django.exceptions import NoSuchJobError, StaleTokenError
from echomq_django.protocol.records import Finish
from echomq_django.protocol.ids import BrandedId
from echomq_django.protocol.jobs import DEFAULT_DEAD_TTL_MS, DEFAULT_KEEP_MS
from echomq_django.protocol import scripts
from echomq_django.protocol.keyspace import Keyspace
from tests import nodes
from tests.testapp import jobs as testjobs

PAYLOAD = json.dumps({"job": "tests.testapp.jobs.add", "args": [1, 2], "kwargs": {}})


@pytest.fixture
def jobs(conn):
    return Jobs(conn)


@pytest.fixture
def ks(queue):
    return Keyspace(queue)


def new_job(jobs, queue, payload=PAYLOAD) -> str:
    job_id = BrandedId.generate("JOB")
    assert jobs.enqueue(queue, job_id, payload) == "enqueued"
    return job_id


def claimed(jobs, queue, lease_ms=60_000, consumer="c1"):
    job_id = new_job(jobs, queue)
    claim = jobs.claim(queue, consumer, lease_ms)
    assert claim is not None and claim.job_id == job_id
    return claim


def reap_until(jobs, queue, count=1, **options) -> None:
    """Reap until ``count`` expired leases were handled (leases of a few ms)."""
    deadline = time.monotonic() + 5
    handled = 0
    while handled < count:
        handled += jobs.reap(queue, **options)
        assert time.monotonic() < deadline, "the lease never expired"
        if handled < count:
            time.sleep(0.001)


def stats_sum(client, ks, kind: str) -> int:
    """The sum of every per-minute ``kind`` counter of the queue (a minute
    boundary between two readings does not hide a change)."""
    return sum(int(client.get(key) or 0)
               for key in client.scan_iter(match=f"{ks.base}stats:{kind}:*", count=1000))


def state(client, ks, job_id, minute: int) -> tuple[dict, int]:
    """Everything a lifecycle script may write for ``job_id`` on its queue:
    the row, the four sets, the wake and beat lists, the token counter and
    the per-minute counters around ``minute``; and, apart, the row's PTTL
    (which counts down by itself)."""
    values, (pttl,) = queue_state(client, ks, [job_id], minute)
    return {"values": values}, pttl


def unchanged(before, after) -> bool:
    (b, b_ttl), (a, a_ttl) = before, after
    # A PTTL only counts down; any write that sets an expiry moves it up.
    same_ttl = (b_ttl == a_ttl) if b_ttl < 0 else (0 <= a_ttl <= b_ttl)
    return a == b and same_ttl


# -- the zombie ------------------------------------------------------------

ZOMBIE_CALLS = {
    "ack": lambda jobs, q, c: jobs.ack(q, c.job_id, c.token, {"by": "zombie"}),
    "retry": lambda jobs, q, c: jobs.retry(q, c.job_id, c.token, 0, "zombie failure"),
    "extend": lambda jobs, q, c: jobs.extend(q, c.job_id, c.token, 600_000),
    "snooze": lambda jobs, q, c: jobs.snooze(q, c.job_id, c.token, 0),
    "delay": lambda jobs, q, c: jobs.delay(q, c.job_id, c.token, 5),
    "dead": lambda jobs, q, c: jobs.dead(q, c.job_id, c.token, "zombie", "zombie error"),
    "progress": lambda jobs, q, c: jobs.progress(q, c.job_id, c.token, 99, "zombie"),
    "release": lambda jobs, q, c: jobs.release(q, c.job_id, c.token),
    "finish (ack, then claim)": lambda jobs, q, c: jobs.finish_many(
        q, [Finish("ack", c.job_id, c.token, {"by": "zombie"})], consumer="zombie",
        lease_ms=600_000, count=0),
    "finish (dead)": lambda jobs, q, c: jobs.finish_many(
        q, [Finish("dead", c.job_id, c.token, reason="zombie", error="zombie error")]),
}


def refused_as_stale(reply) -> bool:
    """A zombie's call is refused: an EMQSTALE error reply (the single
    scripts), or the per-lease stale answer of the scripts that take many
    (extend {-1, 0, msg}, release {0, msg}, finish {now, -1, {{-1, 'stale',
    msg}}})."""
    if isinstance(reply, redis.ResponseError):
        return isinstance(scripts.translate(reply), StaleTokenError)
    entries = reply[2] if len(reply) == 3 and isinstance(reply[2], list) else reply
    return len(entries) == 1 and scripts.decode(entries[0][-1]).startswith("EMQSTALE")


class _Captured(Exception):
    """Raised by the recorder in place of running a script."""


def wire_calls(monkeypatch, jobs, queue, claims, call) -> list[tuple[str, list, list]]:
    """The (script, keys, args) each ``call(jobs, queue, claim)`` sends,
    recorded through the real Jobs method without sending anything."""
    calls = []

    def capture(conn, name, keys, args):
        calls.append((name, list(keys), list(args)))
        raise _Captured

    with monkeypatch.context() as patch:
        patch.setattr(scripts, "run", capture)
        for claim in claims:
            try:
                call(jobs, queue, claim)
            except _Captured:
                continue
            raise AssertionError(f"{call} sent nothing")
    return calls


def queue_state(client, ks, job_ids, minute: int) -> tuple[list, list]:
    """Everything a lifecycle script may write in the queue (every row, the
    four sets, the wake and beat lists, the token counter and the per-minute
    counters around ``minute``), and, apart, each row's PTTL; one pipeline."""
    pipe = client.pipeline(transaction=True)
    for job_id in job_ids:
        pipe.hgetall(ks.job(job_id))
    for key in (ks.pending, ks.schedule, ks.active, ks.dead):
        pipe.zrange(key, 0, -1, withscores=True)
    for key in (ks.wake, ks.beat):
        pipe.lrange(key, 0, -1)
    pipe.hgetall(ks.claims)
    for kind in ("done", "failed"):
        for m in (minute - 1, minute, minute + 1):
            pipe.get(ks.stats(kind, m))
    for job_id in job_ids:
        pipe.pttl(ks.job(job_id))
    replies = pipe.execute()
    return replies[:-len(job_ids)], replies[-len(job_ids):]


def queue_unchanged(before, after) -> bool:
    (b, b_ttls), (a, a_ttls) = before, after
    # A PTTL only counts down; any write that sets an expiry moves it up.
    return a == b and all((bt == at) if bt < 0 else (0 <= at <= bt)
                          for bt, at in zip(b_ttls, a_ttls))


@pytest.mark.slow
def test_a_zombie_changes_nothing_in_1000_trials(jobs, conn, redis_client, queue, ks,
                                                 server_time_ms, monkeypatch):
    """1,000 workers whose leases expired (claimed with a 1 ms lease, lease
    lapsed, reaped) cannot ack, retry, extend, snooze, dead, progress or
    release their jobs: not while they wait in pending, not while another
    worker holds them, not after that worker completed them. Every call
    (the real Jobs methods' script calls, 1,000 at a time in one pipeline) is
    refused with EMQSTALE and changes nothing."""
    trials = 1000
    job_ids = [new_job(jobs, queue) for _ in range(trials)]
    zombies = {}
    for _ in job_ids:
        claim = jobs.claim(queue, "zombie", 1)
        zombies[claim.job_id] = claim
    assert sorted(zombies) == sorted(job_ids)
    reap_until(jobs, queue, count=trials)
    changes: list[tuple[str, str]] = []
    refusals = 0

    def attack(phase):
        nonlocal refusals
        minute = server_time_ms() // 60_000
        before = queue_state(redis_client, ks, job_ids, minute)
        for name, call in ZOMBIE_CALLS.items():
            pipe = conn.pipeline(transaction=False)
            loaded = {}   # one Script a name: the pipeline checks each one's sha before it runs
            for script, keys, args in wire_calls(monkeypatch, jobs, queue, zombies.values(),
                                                 call):
                if script not in loaded:
                    loaded[script] = nodes.on_pipeline(pipe, scripts._script(conn, script))
                loaded[script](keys, args)
            for reply in pipe.execute(raise_on_error=False):
                assert refused_as_stale(reply), (phase, name, reply)
                refusals += 1
            after = queue_state(redis_client, ks, job_ids, minute)
            if not queue_unchanged(before, after):
                changes.append((phase, name))
            before = after

    attack("pending after reap")
    heirs = {}
    for _ in job_ids:
        heir = jobs.claim(queue, "heir", 600_000)
        assert heir.attempts == 2 and heir.token != zombies[heir.job_id].token
        heirs[heir.job_id] = heir
    assert sorted(heirs) == sorted(job_ids)
    attack("held by the heir")
    for heir in heirs.values():
        assert jobs.ack(queue, heir.job_id, heir.token, {"by": "heir"},
                        keep_ms=3_600_000) == "done"
    attack("done by the heir")
    for job_id in job_ids:
        row = jobs.get(queue, job_id)
        assert (row.state, row.result_value, row.attempts, row.stalls, row.consumer) == \
            ("done", {"by": "heir"}, 2, 1, "heir")
    assert changes == []
    assert refusals == trials * 3 * len(ZOMBIE_CALLS)


# -- extend ------------------------------------------------------------------


def test_extend_pushes_the_deadline_to_server_now_plus_lease(jobs, redis_client, queue, ks,
                                                             server_time_ms):
    claim = claimed(jobs, queue, lease_ms=200)
    before = server_time_ms()
    deadline = jobs.extend(queue, claim.job_id, claim.token, 90_000)
    after = server_time_ms()
    assert before + 90_000 <= deadline <= after + 90_000
    assert redis_client.zscore(ks.active, claim.job_id) == deadline
    assert jobs.get(queue, claim.job_id).lease_until_ms == deadline
    # The extended lease survives a reap that the original would not have.
    time.sleep(0.3)
    assert jobs.reap(queue) == 0
    assert jobs.get(queue, claim.job_id).state == "active"


# -- snooze --------------------------------------------------------------------


def test_snooze_gives_the_attempt_back_and_counts_the_snooze(jobs, redis_client, queue, ks,
                                                             server_time_ms):
    claim = claimed(jobs, queue)
    assert claim.attempts == 1 and claim.snoozes == 0
    before = server_time_ms()
    assert jobs.snooze(queue, claim.job_id, claim.token, 5_000) == "scheduled"
    after = server_time_ms()
    row = jobs.get(queue, claim.job_id)
    assert (row.state, row.attempts, row.snoozes) == ("scheduled", 0, 1)
    assert before + 5_000 <= row.run_at_ms <= after + 5_000
    assert redis_client.zscore(ks.schedule, claim.job_id) == row.run_at_ms
    assert redis_client.zscore(ks.active, claim.job_id) is None
    assert row.token is None and row.lease_until_ms is None
    # A snooze is neither a failure nor a completion.
    assert row.failed_at_ms is None and row.last_error is None
    assert stats_sum(redis_client, ks, "failed") == stats_sum(redis_client, ks, "done") == 0
    # The old token is spent.
    with pytest.raises(StaleTokenError):
        jobs.ack(queue, claim.job_id, claim.token)


def test_delay_is_snooze(jobs):
    assert Jobs.delay is Jobs.snooze


def test_1500_snoozes_overflow_nothing_and_a_real_failure_backs_off_from_attempt_1(
        jobs, redis_client, queue, ks):
    claim = claimed(jobs, queue)
    for n in range(1500):
        assert (claim.attempts, claim.snoozes) == (1, n)
        assert jobs.snooze(queue, claim.job_id, claim.token, 0) == "scheduled"
        assert jobs.promote(queue) == 1
        claim = jobs.claim(queue, "c1", 60_000)
    assert (claim.attempts, claim.snoozes) == (1, 1500)
    row = jobs.get(queue, claim.job_id)
    assert (row.attempts, row.snoozes, row.stalls) == (1, 1500, 0)
    policy = Backoff.exponential(1000, 300_000)
    delay_ms = Backoff.delay_ms(policy, claim.attempts)
    assert delay_ms == 1000
    assert jobs.retry(queue, claim.job_id, claim.token, delay_ms, "real failure") == "scheduled"
    row = jobs.get(queue, claim.job_id)
    assert row.run_at_ms - row.failed_at_ms == 1000
    assert (row.attempts, row.snoozes) == (1, 1500)
    assert redis_client.zscore(ks.schedule, claim.job_id) == row.run_at_ms


@pytest.mark.parametrize("verb", ["snooze", "retry"])
@pytest.mark.parametrize("delay", [-1, -60_000])
def test_a_negative_delay_is_refused_and_writes_nothing(jobs, redis_client, queue, ks, verb,
                                                        delay, server_time_ms):
    claim = claimed(jobs, queue)
    minute = server_time_ms() // 60_000
    before = state(redis_client, ks, claim.job_id, minute)
    with pytest.raises(ValueError, match="delay_ms"):
        getattr(jobs, verb)(queue, claim.job_id, claim.token, delay)
    assert unchanged(before, state(redis_client, ks, claim.job_id, minute))


@pytest.mark.parametrize("outcome", [Snooze, Retry])
@pytest.mark.parametrize("delay", [-1, 1.5, "10", timedelta(microseconds=-1)])
def test_outcomes_refuse_a_bad_delay(outcome, delay):
    with pytest.raises(ValueError, match="delay_ms"):
        outcome(delay)


# -- cancel ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["pending", "scheduled"])
def test_cancel_of_a_waiting_job_ends_it_at_once(jobs, redis_client, queue, ks, where,
                                                 server_time_ms):
    job_id = BrandedId.generate("JOB")
    if where == "pending":
        jobs.enqueue(queue, job_id, PAYLOAD)
    else:
        jobs.enqueue_in(queue, job_id, PAYLOAD, 50)
    before = server_time_ms()
    assert jobs.cancel(queue, job_id, keep_ms=120_000) == "cancelled"
    row = jobs.get(queue, job_id)
    assert row.state == "cancelled" and row.finished_at_ms >= before
    assert redis_client.zscore(ks.pending, job_id) is None
    assert redis_client.zscore(ks.schedule, job_id) is None
    assert 110_000 < redis_client.pttl(ks.job(job_id)) <= 120_000
    # It never runs: not after its run-at, not on a claim.
    time.sleep(0.1)
    assert jobs.promote(queue) == 0
    assert jobs.claim(queue, "c1", 1000) is None
    assert jobs.get(queue, job_id).state == "cancelled"
    # A second cancel changes nothing.
    assert jobs.cancel(queue, job_id) == "finished"


@pytest.mark.parametrize("verb", ["ack", "retry", "snooze", "dead"])
def test_cancel_of_a_running_job_flags_it_and_any_outcome_ends_cancelled(
        jobs, redis_client, queue, ks, verb):
    claim = claimed(jobs, queue)
    assert not jobs.cancel_requested(queue, claim.job_id)
    assert jobs.cancel(queue, claim.job_id) == "flagged"
    row = jobs.get(queue, claim.job_id)
    assert (row.state, row.cancel_requested) == ("active", "1")
    assert jobs.cancel_requested(queue, claim.job_id)
    # progress doubles as the handler's cancellation check
    assert jobs.progress(queue, claim.job_id, claim.token, 10) is True
    outcome = {
        "ack": lambda: jobs.ack(queue, claim.job_id, claim.token, "ignored", keep_ms=120_000),
        "retry": lambda: jobs.retry(queue, claim.job_id, claim.token, 0, "boom",
                                    keep_ms=120_000),
        "snooze": lambda: jobs.snooze(queue, claim.job_id, claim.token, 0, keep_ms=120_000),
        "dead": lambda: jobs.dead(queue, claim.job_id, claim.token, "failed", "boom",
                                  keep_ms=120_000),
    }[verb]()
    # The row is kept as long as the outcome's keep_ms (the consumer passes
    # RESULT_TTL_MS), not as a dead letter.
    assert outcome == "cancelled"
    row = jobs.get(queue, claim.job_id)
    assert row.state == "cancelled" and row.token is None and row.result is None
    assert row.reason is None and row.attempts == 1
    for key in (ks.pending, ks.schedule, ks.active, ks.dead):
        assert redis_client.zscore(key, claim.job_id) is None
    assert 110_000 < redis_client.pttl(ks.job(claim.job_id)) <= 120_000
    # Not counted as done, nor as a failure.
    assert stats_sum(redis_client, ks, "done") == stats_sum(redis_client, ks, "failed") == 0
    assert jobs.promote(queue) == 0 and jobs.claim(queue, "c1", 1000) is None


def test_cancel_of_a_finished_job_changes_nothing(jobs, redis_client, queue, ks, server_time_ms):
    claim = claimed(jobs, queue)
    jobs.ack(queue, claim.job_id, claim.token, 3)
    minute = server_time_ms() // 60_000
    before = state(redis_client, ks, claim.job_id, minute)
    assert jobs.cancel(queue, claim.job_id) == "finished"
    assert unchanged(before, state(redis_client, ks, claim.job_id, minute))
    assert jobs.get(queue, claim.job_id).state == "done"


def test_cancel_of_an_unknown_job_raises_and_writes_nothing(jobs, redis_client, queue, ks):
    job_id = BrandedId.generate("JOB")
    with pytest.raises(NoSuchJobError, match=job_id):
        jobs.cancel(queue, job_id)
    assert not redis_client.exists(ks.job(job_id))


# -- the stalled sweep ---------------------------------------------------------


def test_first_expiry_returns_to_pending_the_second_ends_dead_stalled(
        jobs, redis_client, queue, ks, server_time_ms):
    first = claimed(jobs, queue, lease_ms=1)
    reap_until(jobs, queue)  # max_stalls=1, the default
    row = jobs.get(queue, first.job_id)
    assert (row.state, row.stalls, row.attempts, row.token) == ("pending", 1, 1, None)
    assert redis_client.zscore(ks.pending, first.job_id) == 0
    assert redis_client.zscore(ks.active, first.job_id) is None
    second = jobs.claim(queue, "c2", 1)
    assert second.attempts == 2
    before = server_time_ms()
    reap_until(jobs, queue, dead_ttl_ms=3_600_000)
    row = jobs.get(queue, first.job_id)
    assert (row.state, row.reason, row.stalls, row.attempts) == ("dead", "stalled", 2, 2)
    assert "expired 2 times" in row.last_error
    assert row.finished_at_ms >= before and row.token is None
    assert redis_client.zscore(ks.dead, first.job_id) == row.finished_at_ms
    assert redis_client.zscore(ks.pending, first.job_id) is None
    assert redis_client.zscore(ks.active, first.job_id) is None
    assert 3_500_000 < redis_client.pttl(ks.job(first.job_id)) <= 3_600_000
    assert stats_sum(redis_client, ks, "failed") == 1
    for claim in (first, second):
        with pytest.raises(StaleTokenError):
            jobs.ack(queue, claim.job_id, claim.token)


@pytest.mark.parametrize("max_stalls", [0, 3])
def test_the_stall_threshold_is_max_stalls(jobs, queue, max_stalls):
    job_id = new_job(jobs, queue)
    for stall in range(1, max_stalls + 1):
        jobs.claim(queue, "c1", 1)
        reap_until(jobs, queue, max_stalls=max_stalls)
        assert jobs.get(queue, job_id).state == "pending", stall
    jobs.claim(queue, "c1", 1)
    reap_until(jobs, queue, max_stalls=max_stalls)
    row = jobs.get(queue, job_id)
    assert (row.state, row.reason, row.stalls) == ("dead", "stalled", max_stalls + 1)


def test_stalled_deaths_keep_the_dead_letter_retention(jobs, conn, redis_client, queue, ks):
    """A stalled death trims the dead set as dead does (issue 9, item 4): at
    most dead_max letters, the newest kept, trimmed rows deleted; the
    metronome reaps with the consumer's Retention."""
    from echomq_django.runtime.metronome import Metronome
    from echomq_django.runtime.outcome import Retention

    metronome = Metronome(conn, [queue], max_stalls=0,
                          retention=Retention(result_ttl_ms=60_000, dead_ttl_ms=3_600_000,
                                              dead_max=3))
    ids = []
    for _ in range(5):
        ids.append(claimed(jobs, queue, lease_ms=1).job_id)
        deadline = time.monotonic() + 5
        while metronome.beat(queue)[1] == 0:   # reap, as a beat does, once the lease lapses
            assert time.monotonic() < deadline, "the lease never expired"
            time.sleep(0.001)
        time.sleep(0.002)  # distinct times of death, so "newest" is unambiguous
    assert redis_client.zrange(ks.dead, 0, -1) == ids[2:]
    for job_id in ids[:2]:
        assert redis_client.exists(ks.job(job_id)) == 0
    for job_id in ids[2:]:
        assert redis_client.hget(ks.job(job_id), "reason") == "stalled"
        assert 3_500_000 < redis_client.pttl(ks.job(job_id)) <= 3_600_000


def test_a_stalled_death_drops_letters_older_than_the_ttl(jobs, redis_client, queue, ks):
    first = claimed(jobs, queue)
    jobs.dead(queue, first.job_id, first.token, "failed", dead_ttl_ms=2_000)
    time.sleep(0.05)
    stalled = claimed(jobs, queue, lease_ms=1)
    reap_until(jobs, queue, max_stalls=0, dead_ttl_ms=20)
    assert redis_client.zrange(ks.dead, 0, -1) == [stalled.job_id]
    assert redis_client.exists(ks.job(first.job_id)) == 0


def test_reap_leaves_live_leases_alone(jobs, queue):
    live = claimed(jobs, queue, lease_ms=60_000)
    assert jobs.reap(queue) == 0
    assert jobs.get(queue, live.job_id).stalls == 0


# -- progress ------------------------------------------------------------------


def test_progress_is_stored_on_the_row(jobs, redis_client, queue, ks, server_time_ms):
    claim = claimed(jobs, queue)
    before = server_time_ms()
    assert jobs.progress(queue, claim.job_id, claim.token, 40, "reading") is False
    row = jobs.get(queue, claim.job_id)
    assert (row.progress, row.progress_message) == (40, "reading")
    assert before <= row.progress_at_ms <= server_time_ms()
    assert jobs.progress(queue, claim.job_id, claim.token, 100) is False
    row = jobs.get(queue, claim.job_id)
    assert (row.progress, row.progress_message) == (100, "")
    # Still active, lease untouched.
    assert row.state == "active" and row.lease_until_ms == claim.lease_deadline_ms


def test_progress_with_a_stale_token_is_refused(jobs, redis_client, queue, ks):
    zombie = claimed(jobs, queue, lease_ms=1)
    reap_until(jobs, queue)
    heir = jobs.claim(queue, "heir", 60_000)
    jobs.progress(queue, heir.job_id, heir.token, 10, "heir")
    with pytest.raises(StaleTokenError):
        jobs.progress(queue, zombie.job_id, zombie.token, 90, "zombie")
    row = jobs.get(queue, heir.job_id)
    assert (row.progress, row.progress_message) == (10, "heir")


@pytest.mark.parametrize("percent, exc", [(101, ValueError), (-1, ValueError),
                                          (50.5, TypeError), (True, TypeError)])
def test_progress_out_of_range_is_refused_and_writes_nothing(jobs, redis_client, queue, ks,
                                                             percent, exc, server_time_ms):
    claim = claimed(jobs, queue)
    minute = server_time_ms() // 60_000
    before = state(redis_client, ks, claim.job_id, minute)
    with pytest.raises(exc, match="percent"):
        jobs.progress(queue, claim.job_id, claim.token, percent)
    with pytest.raises(TypeError, match="message"):
        jobs.progress(queue, claim.job_id, claim.token, 50, 7)
    assert unchanged(before, state(redis_client, ks, claim.job_id, minute))


# -- results and retention -------------------------------------------------------


def test_done_keeps_the_json_result_and_timings_for_keep_ms(jobs, redis_client, queue, ks):
    claim = claimed(jobs, queue)
    assert jobs.ack(queue, claim.job_id, claim.token, {"total": 3, "items": [1, 2]},
                    keep_ms=5_000) == "done"
    row = jobs.get(queue, claim.job_id)
    assert row.result_value == {"total": 3, "items": [1, 2]}
    assert json.loads(row.result) == {"total": 3, "items": [1, 2]}
    assert row.enqueued_at_ms <= row.started_at_ms <= row.finished_at_ms
    assert 4_000 < redis_client.pttl(ks.job(claim.job_id)) <= 5_000
    assert stats_sum(redis_client, ks, "done") == 1


def test_done_rows_are_kept_24_hours_by_default(jobs, redis_client, queue, ks):
    assert DEFAULT_KEEP_MS == 86_400_000
    claim = claimed(jobs, queue)
    jobs.ack(queue, claim.job_id, claim.token, "ok")
    assert DEFAULT_KEEP_MS - 60_000 < redis_client.pttl(ks.job(claim.job_id)) <= DEFAULT_KEEP_MS


def test_a_done_row_expires_on_its_own_and_its_id_can_be_used_again(jobs, redis_client, queue,
                                                                     ks):
    claim = claimed(jobs, queue)
    jobs.ack(queue, claim.job_id, claim.token, "ok", keep_ms=50)
    deadline = time.monotonic() + 5
    while jobs.get(queue, claim.job_id) is not None:
        assert time.monotonic() < deadline, "the done row never expired"
        time.sleep(0.02)
    assert jobs.enqueue(queue, claim.job_id, PAYLOAD) == "enqueued"


def test_dead_keeps_reason_and_traceback_for_dead_ttl(jobs, redis_client, queue, ks):
    claim = claimed(jobs, queue)
    assert jobs.dead(queue, claim.job_id, claim.token, "failed",
                     "Traceback (most recent call last):\nValueError: nope") == "dead"
    row = jobs.get(queue, claim.job_id)
    assert (row.state, row.reason) == ("dead", "failed")
    assert row.last_error.startswith("Traceback") and "ValueError: nope" in row.last_error
    assert redis_client.zscore(ks.dead, claim.job_id) == row.finished_at_ms
    ttl = redis_client.pttl(ks.job(claim.job_id))
    assert DEFAULT_DEAD_TTL_MS - 60_000 < ttl <= DEFAULT_DEAD_TTL_MS


def test_retry_with_an_explicit_delay_runs_at_failed_at_plus_delay(jobs, redis_client, queue, ks):
    claim = claimed(jobs, queue)
    assert jobs.retry(queue, claim.job_id, claim.token, 1234, "boom") == "scheduled"
    row = jobs.get(queue, claim.job_id)
    assert row.run_at_ms == row.failed_at_ms + 1234
    assert (row.state, row.attempts, row.last_error) == ("scheduled", 1, "boom")
    assert stats_sum(redis_client, ks, "failed") == 1


# -- the handler's context --------------------------------------------------------


def test_context_reports_the_claim_and_sees_a_cancel(jobs, queue):
    claim = claimed(jobs, queue)
    context = JobContext(jobs, claim, lease_ms=60_000)
    assert (context.job_id, context.attempt, context.snoozes) == (claim.job_id, 1, 0)
    assert (context.scheduled_for_ms, context.missed, context.queue) == (None, 0, queue)
    assert context.cancelled is False
    jobs.cancel(queue, claim.job_id)
    assert context.cancelled is True


def test_context_progress_is_a_cancellation_check(jobs, queue):
    claim = claimed(jobs, queue)
    context = JobContext(jobs, claim, lease_ms=60_000)
    context.progress(20, "started")
    assert jobs.get(queue, claim.job_id).progress == 20
    assert jobs.cancel(queue, claim.job_id) == "flagged"
    context.progress(30)
    assert context._cancelled  # learnt from the progress reply, without another read
    assert context.cancelled


def test_context_extend_is_a_checkpoint_refused_once_the_lease_is_lost(jobs, redis_client,
                                                                       queue, ks):
    claim = claimed(jobs, queue, lease_ms=1)
    context = JobContext(jobs, claim, lease_ms=60_000)
    reap_until(jobs, queue)
    with pytest.raises(StaleTokenError):
        context.extend()
    heir = jobs.claim(queue, "heir", 5_000)
    context = JobContext(jobs, heir, lease_ms=60_000)
    deadline = context.extend()
    assert context.lease_deadline_ms == deadline == redis_client.zscore(ks.active, heir.job_id)
    assert deadline > heir.lease_deadline_ms + 50_000


def test_context_counts_as_cancelled_past_its_time_limit(jobs, queue):
    claim = claimed(jobs, queue)
    context = JobContext(jobs, claim, lease_ms=60_000, timeout_ms=50)
    assert context.cancelled is False
    time.sleep(0.08)
    assert context.cancelled is True
    assert jobs.get(queue, claim.job_id).state == "active"  # the consumer records the timeout


# -- the consumer's outcomes, in this process ---------------------------------------


@pytest.fixture
def consumer(conn, queue, monkeypatch):
    # run_claim resets Django's database connections around the handler; an
    # earlier test of the session may have opened one that pytest-django then
    # forbids touching. These handlers use no database.
    monkeypatch.setattr("echomq_django.runtime.outcome.close_old_connections", lambda: None)
    return Consumer(conn, [queue], concurrency=1, lease_ms=60_000,
                    retention=Retention(result_ttl_ms=3_600_000, dead_ttl_ms=7_200_000,
                                        dead_max=100))


def run_one(consumer, jobs, queue, fn, *args, **kwargs):
    """Enqueue ``fn(*args, **kwargs)`` on ``queue``, claim it and run it here."""
    handle = fn.using(queue=queue).enqueue(*args, **kwargs)
    claim = jobs.claim(queue, "here", 60_000)
    assert claim.job_id == handle.job_id
    return handle.job_id, consumer.run_claim(claim)


def test_returning_acks_with_the_result_kept_result_ttl(consumer, jobs, redis_client, queue, ks):
    job_id, outcome = run_one(consumer, jobs, queue, testjobs.choose, f"{queue}:n", "done")
    assert outcome == "done"
    row = jobs.get(queue, job_id)
    assert (row.state, row.result_value) == ("done", {"outcome": "done"})
    assert 3_500_000 < redis_client.pttl(ks.job(job_id)) <= 3_600_000


def test_a_result_with_a_lone_surrogate_is_not_kept_and_the_job_is_done(
        consumer, jobs, queue, caplog):
    with caplog.at_level(logging.WARNING, logger="echomq"):
        job_id, outcome = run_one(consumer, jobs, queue, testjobs.lone_surrogate)
    assert outcome == "done"
    row = jobs.get(queue, job_id)
    assert (row.state, row.result) == ("done", "")
    assert f"job {job_id} returned a value that is not JSON" in caplog.text
    assert "result['name'] must be text UTF-8 can encode" in caplog.text


def test_raising_retry_uses_its_delay_exactly(consumer, jobs, queue):
    job_id, outcome = run_one(consumer, jobs, queue, testjobs.choose, f"{queue}:n", "retry",
                              delay_ms=4321)
    assert outcome == "retry"
    row = jobs.get(queue, job_id)
    assert row.state == "scheduled" and row.run_at_ms == row.failed_at_ms + 4321
    assert "asked to retry" in row.last_error


def test_raising_retry_on_the_last_attempt_ends_dead(consumer, jobs, redis_client, queue, ks):
    handle = testjobs.choose.using(queue=queue).enqueue(f"{queue}:n", "retry", delay_ms=0)
    for attempt in (1, 2, 3):
        claim = jobs.claim(queue, "here", 60_000)
        assert claim.attempts == attempt
        outcome = consumer.run_claim(claim)
        jobs.promote(queue)
    assert outcome == "dead"
    row = jobs.get(queue, handle.job_id)
    assert (row.state, row.reason, row.attempts) == ("dead", "failed", 3)


@pytest.mark.parametrize("kind", ["snooze_raise", "snooze_return"])
def test_snooze_raised_or_returned_gives_the_attempt_back(consumer, jobs, redis_client, queue,
                                                          ks, kind):
    job_id, outcome = run_one(consumer, jobs, queue, testjobs.choose, f"{queue}:n", kind,
                              delay_ms=60_000)
    assert outcome == "snooze"
    row = jobs.get(queue, job_id)
    assert (row.state, row.attempts, row.snoozes) == ("scheduled", 0, 1)
    assert row.run_at_ms == redis_client.zscore(ks.schedule, job_id)
    assert row.result is None and row.failed_at_ms is None


@pytest.mark.parametrize("discard", [False, True])
def test_a_failure_whose_text_utf8_cannot_encode_is_still_recorded(consumer, jobs, queue,
                                                                   discard):
    # surrogateescape turns an undecodable byte into a lone surrogate, which
    # Redis cannot store; the traceback and reason keep it as an escape.
    job_id, outcome = run_one(consumer, jobs, queue, testjobs.fail_with, "caf",
                              discard=discard, bad_byte=True)
    assert outcome == ("dead" if discard else "retry")
    row = jobs.get(queue, job_id)
    assert row.state == ("dead" if discard else "scheduled")
    assert "caf\\udcff" in row.last_error
    assert row.reason == ("caf\\udcff" if discard else None)


def test_discard_ends_dead_at_once_with_its_reason(consumer, jobs, redis_client, queue, ks):
    job_id, outcome = run_one(consumer, jobs, queue, testjobs.choose, f"{queue}:n", "discard")
    assert outcome == "dead"
    row = jobs.get(queue, job_id)
    assert (row.state, row.reason, row.attempts) == ("dead", "the user was deleted", 1)
    assert "Discard" in row.last_error and "Traceback" in row.last_error
    assert redis_client.zscore(ks.dead, job_id) is not None
    assert redis_client.zscore(ks.schedule, job_id) is None
    assert 7_100_000 < redis_client.pttl(ks.job(job_id)) <= 7_200_000


def test_other_exceptions_back_off_until_max_attempts(consumer, jobs, redis_client, queue, ks):
    handle = testjobs.choose.using(queue=queue).enqueue(f"{queue}:n", "error")
    outcomes = []
    for attempt in (1, 2, 3):
        claim = jobs.claim(queue, "here", 60_000)
        assert claim is not None and claim.attempts == attempt
        outcomes.append(consumer.run_claim(claim))
        row = jobs.get(queue, handle.job_id)
        if attempt < 3:
            # choose's policy: Backoff.fixed(20)
            assert row.state == "scheduled" and row.run_at_ms == row.failed_at_ms + 20
            time.sleep(0.03)
            assert jobs.promote(queue) == 1
    assert outcomes == ["retry", "retry", "dead"]
    row = jobs.get(queue, handle.job_id)
    assert (row.state, row.reason, row.attempts) == ("dead", "failed", 3)
    assert "KeyError: 'boom'" in row.last_error
    assert redis_client.get(f"{queue}:n") == "3"


def test_snooze_50_times_then_fail_once_backs_off_from_attempt_1(consumer, jobs, redis_client,
                                                                 queue, ks):
    handle = testjobs.snooze_then_fail.using(queue=queue).enqueue(queue, 50)
    for n in range(50):
        claim = jobs.claim(queue, "here", 60_000)
        assert (claim.attempts, claim.snoozes) == (1, n)
        assert consumer.run_claim(claim) == "snooze"
        assert jobs.promote(queue) == 1
    claim = jobs.claim(queue, "here", 60_000)
    assert consumer.run_claim(claim) == "retry"
    row = jobs.get(queue, handle.job_id)
    assert (row.state, row.attempts, row.snoozes) == ("scheduled", 1, 50)
    # exponential(1000, 300000) after attempt 1: exactly 1000 ms (2**50 s if
    # the snoozes had been counted, capped at 300000).
    assert row.run_at_ms - row.failed_at_ms == 1000
    assert "a real failure after the snoozes" in row.last_error
    runs = redis_client.lrange(f"{queue}:runs", 0, -1)
    assert runs == [f"1:{n}" for n in range(51)]


def test_a_cancel_seen_by_the_handler_ends_cancelled_even_when_it_raises(
        consumer, jobs, redis_client, queue, ks):
    handle = testjobs.wait_for_cancel.using(queue=queue).enqueue(queue, True)
    claim = jobs.claim(queue, "here", 60_000)
    assert jobs.cancel(queue, handle.job_id) == "flagged"
    assert consumer.run_claim(claim) == "cancelled"
    assert redis_client.get(f"{queue}:saw_cancel") == "1"
    row = jobs.get(queue, handle.job_id)
    assert (row.state, row.attempts) == ("cancelled", 1)
    assert redis_client.zscore(ks.schedule, handle.job_id) is None
    assert stats_sum(redis_client, ks, "done") == stats_sum(redis_client, ks, "failed") == 0


def test_handlers_without_context_true_do_not_get_it(consumer, jobs, queue):
    job_id, outcome = run_one(consumer, jobs, queue, testjobs.no_context, 1, x=2)
    assert outcome == "done"
    assert jobs.get(queue, job_id).result_value == ["x"]


def test_a_plain_job_s_context(consumer, jobs, queue):
    job_id, outcome = run_one(consumer, jobs, queue, testjobs.context_report)
    assert outcome == "done"
    assert jobs.get(queue, job_id).result_value == {
        "job_id": job_id, "attempt": 1, "snoozes": 0, "scheduled_for_ms": None, "missed": 0,
        "cancelled": False, "queue": queue, "timeout_ms": None}


# -- a cancel outlives the worker that was running the job ----------------------------


def test_a_flagged_job_whose_lease_expires_ends_cancelled_not_back_to_pending(
        jobs, redis_client, queue, ks):
    claim = claimed(jobs, queue, lease_ms=1)
    assert jobs.cancel(queue, claim.job_id) == "flagged"
    reap_until(jobs, queue, keep_ms=120_000)  # its worker died before it saw the flag
    row = jobs.get(queue, claim.job_id)
    assert (row.state, row.attempts, row.token) == ("cancelled", 1, None)
    assert in_any_set(redis_client, ks, claim.job_id) == set()
    assert 110_000 < redis_client.pttl(ks.job(claim.job_id)) <= 120_000
    assert jobs.claim(queue, "c2", 60_000) is None
    assert stats_sum(redis_client, ks, "failed") == stats_sum(redis_client, ks, "done") == 0


def test_a_flagged_job_past_max_stalls_ends_cancelled_not_dead(jobs, redis_client, queue, ks):
    claim = claimed(jobs, queue, lease_ms=1)
    jobs.cancel(queue, claim.job_id)
    reap_until(jobs, queue, max_stalls=0)
    assert jobs.get(queue, claim.job_id).state == "cancelled"
    assert redis_client.zscore(ks.dead, claim.job_id) is None


def test_a_flagged_job_handed_back_at_shutdown_ends_cancelled(jobs, redis_client, queue, ks):
    claim = claimed(jobs, queue)
    assert jobs.cancel(queue, claim.job_id) == "flagged"
    jobs.release(queue, claim.job_id, claim.token, keep_ms=120_000)
    row = jobs.get(queue, claim.job_id)
    assert (row.state, row.token) == ("cancelled", None)
    assert in_any_set(redis_client, ks, claim.job_id) == set()
    assert 110_000 < redis_client.pttl(ks.job(claim.job_id)) <= 120_000
    assert jobs.claim(queue, "c2", 60_000) is None


def in_any_set(client, ks, job_id) -> set[str]:
    return {name for name in ("pending", "schedule", "active", "dead")
            if client.zscore(getattr(ks, name), job_id) is not None}
