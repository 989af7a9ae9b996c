"""Lifecycle controls end to end (issue 4): runechomq subprocesses on the real
test server, handlers from tests/testapp/jobs.py that record what they saw in
Redis under keys starting with the test's queue name.

Protocol deadlines are measured on the server clock; nothing here asserts
how fast a worker is.
"""

from __future__ import annotations

import signal
import time

import pytest

from echomq_django import JobFailedError, Jobs
from echomq_django.exceptions import NoSuchJobError
from echomq_django import JobHandle
from echomq_django import Outcome
from echomq_django.protocol import keyspace
from echomq_django.protocol.clock import time_command
from echomq_django.protocol.keyspace import Keyspace
from tests.procs import runechomq, state_of, stop, wait_for
from tests.testapp import jobs as testjobs

DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS


# -- helpers ------------------------------------------------------------------


def row_of(conn, queue, job_id):
    return Jobs(conn).get(queue, job_id)


def stats_sum(client, queue, kind):
    base = Keyspace(queue).base
    return sum(int(client.get(key) or 0)
               for key in client.scan_iter(match=f"{base}stats:{kind}:*", count=1000))


def in_sets(client, queue, job_id):
    ks = Keyspace(queue)
    return {name for name in ("pending", "schedule", "active", "dead")
            if client.zscore(getattr(ks, name), job_id) is not None}


def announced_pids(client, queue):
    """Pids of the consumer processes announced for ``queue``."""
    pids = set()
    for worker_id in client.zrange(keyspace.WORKERS, 0, -1):
        fields = client.hgetall(keyspace.worker(worker_id))
        if fields.get("queues") == queue:
            pids.add(int(fields["pid"]))
    return pids



def start(worker_procs, queue, *args):
    proc = runechomq(queue, *args)
    worker_procs.append(proc)
    return proc


# -- the zombie and the killed worker ----------------------------------------------


@pytest.mark.slow
def test_a_sigstopped_worker_past_its_lease_cannot_touch_the_job_afterwards(
        conn, queue, redis_client, worker_procs):
    handle = testjobs.hold_then_return.using(queue=queue).enqueue(queue, 2.0)
    zombie = start(worker_procs, queue, "--lease-ms", "500", "--concurrency", "1")
    wait_for(lambda: redis_client.llen(f"{queue}:runs") == 1)
    assert redis_client.lindex(f"{queue}:runs", 0) == f"{zombie.pid}:1"
    zombie.send_signal(signal.SIGSTOP)

    heir = start(worker_procs, queue, "--lease-ms", "500", "--concurrency", "1")
    wait_for(lambda: state_of(conn, queue, handle.job_id) == "done", timeout=20)
    row = row_of(conn, queue, handle.job_id)
    assert row.result_value == {"pid": heir.pid, "attempt": 2}
    assert (row.attempts, row.stalls) == (2, 1)
    assert stop(heir)[0] == 0
    settled = redis_client.hgetall(Keyspace(queue).job(handle.job_id))

    zombie.send_signal(signal.SIGCONT)
    # Its handler wakes, finishes its sleep and returns: the ack is refused.
    wait_for(lambda: redis_client.get(f"{queue}:first_finished"), timeout=10)
    code, out = stop(zombie)
    assert code == 0, out
    assert (f"job {handle.job_id} tests.testapp.jobs.hold_then_return attempt 1 -> stale"
            in out), out
    assert redis_client.hgetall(Keyspace(queue).job(handle.job_id)) == settled
    assert in_sets(redis_client, queue, handle.job_id) == set()
    assert stats_sum(redis_client, queue, "done") == 1


@pytest.mark.slow
def test_a_sigkilled_job_is_pending_within_lease_plus_200_ms_and_completes_on_attempt_2(
        conn, queue, redis_client, worker_procs, server_time_ms):
    lease_ms = 1000
    start(worker_procs, queue, "--metronome-only")
    victim = start(worker_procs, queue, "--without-metronome", "--lease-ms", str(lease_ms),
                   "--concurrency", "1")
    handle = testjobs.hold_then_return.using(queue=queue).enqueue(queue, 30)
    wait_for(lambda: redis_client.llen(f"{queue}:runs") == 1)
    killed_ms = server_time_ms()  # read before the kill: the measured interval can only grow
    victim.kill()
    victim.communicate()
    deadline_ms = row_of(conn, queue, handle.job_id).lease_until_ms
    assert deadline_ms <= killed_ms + lease_ms

    row_key = Keyspace(queue).job(handle.job_id)
    give_up = time.monotonic() + 10
    while True:
        pipe = redis_client.pipeline(transaction=True)
        pipe.hget(row_key, "state")
        time_command(pipe, queue)   # TIME, on a cluster the queue's node's
        seen, (sec, usec) = pipe.execute()
        if seen != "active" or time.monotonic() > give_up:
            break
        time.sleep(0.002)
    seen_ms = int(sec) * 1000 + int(usec) // 1000
    assert seen == "pending"
    assert seen_ms >= deadline_ms, "reaped before its lease expired"
    assert seen_ms - killed_ms <= lease_ms + 200, (seen_ms - killed_ms, deadline_ms - killed_ms)
    row = row_of(conn, queue, handle.job_id)
    assert (row.stalls, row.attempts, row.token) == (1, 1, None)

    heir = start(worker_procs, queue, "--without-metronome")
    wait_for(lambda: state_of(conn, queue, handle.job_id) == "done")
    row = row_of(conn, queue, handle.job_id)
    assert (row.attempts, row.stalls) == (2, 1)
    assert row.result_value == {"pid": heir.pid, "attempt": 2}
    assert stop(heir)[0] == 0


@pytest.mark.slow
def test_the_heartbeat_keeps_a_handler_longer_than_its_lease(conn, queue, redis_client,
                                                               worker_procs):
    handle = testjobs.hold_then_return.using(queue=queue).enqueue(queue, 1.5)
    proc = start(worker_procs, queue, "--lease-ms", "300", "--concurrency", "1")
    wait_for(lambda: state_of(conn, queue, handle.job_id) == "done")
    row = row_of(conn, queue, handle.job_id)
    assert (row.attempts, row.stalls) == (1, 0)
    assert row.result_value == {"pid": proc.pid, "attempt": 1}
    assert stop(proc)[0] == 0


@pytest.mark.slow
def test_a_poison_job_ends_dead_stalled_while_the_supervisor_replaces_its_victims(
        conn, queue, redis_client, worker_procs):
    handle = testjobs.poison.using(queue=queue).enqueue(f"{queue}:runs")
    proc = start(worker_procs, queue, "--processes", "2", "--concurrency", "1",
                 "--lease-ms", "500")
    wait_for(lambda: state_of(conn, queue, handle.job_id) == "dead", timeout=30)
    row = row_of(conn, queue, handle.job_id)
    # MAX_STALLS is 1: the first expiry hands it back, the second ends it.
    assert (row.reason, row.stalls, row.attempts) == ("stalled", 2, 2)
    assert redis_client.get(f"{queue}:runs") == "2"
    assert in_sets(redis_client, queue, handle.job_id) == {"dead"}
    # The workers live on.
    after = testjobs.add.using(queue=queue).enqueue(2, 2)
    wait_for(lambda: state_of(conn, queue, after.job_id) == "done", timeout=20)
    code, out = stop(proc)
    assert code == 0, out
    assert out.count("exited with -9; starting a new one") == 2, out


# -- snooze, outcomes, results ---------------------------------------------------------


@pytest.mark.slow
def test_snooze_50_times_then_fail_once_backs_off_from_attempt_1(conn, queue, redis_client,
                                                                   worker_procs):
    handle = testjobs.snooze_then_fail.using(queue=queue).enqueue(queue, 50)
    proc = start(worker_procs, queue, "--concurrency", "1", "-v", "2")  # snoozes log at DEBUG
    row = wait_for(lambda: (r := row_of(conn, queue, handle.job_id)).failed_at_ms and r,
                   timeout=30)
    assert (row.state, row.attempts, row.snoozes) == ("scheduled", 1, 50)
    # exponential(1000, 300000), attempt 1: exactly 1000 ms.
    assert row.run_at_ms - row.failed_at_ms == 1000
    wait_for(lambda: state_of(conn, queue, handle.job_id) == "done")
    row = row_of(conn, queue, handle.job_id)
    assert (row.attempts, row.snoozes) == (2, 50)
    assert row.result_value == {"attempt": 2, "snoozes": 50}
    runs = redis_client.lrange(f"{queue}:runs", 0, -1)
    assert runs == [f"1:{n}" for n in range(51)] + ["2:50"]
    code, out = stop(proc)
    assert code == 0, out
    assert f"job {handle.job_id} tests.testapp.jobs.snooze_then_fail attempt 1 -> snooze" in out


@pytest.mark.slow
def test_each_outcome_a_handler_can_choose(conn, queue, redis_client, worker_procs):
    fn = testjobs.choose.using(queue=queue)
    handles = {kind: fn.enqueue(f"{queue}:{kind}", kind, delay_ms=delay)
               for kind, delay in [("done", 0), ("retry", 700), ("discard", 0),
                                   ("snooze_raise", 60_000), ("snooze_return", 60_000),
                                   ("error", 0)]}
    proc = start(worker_procs, queue, "--concurrency", "4")

    def row(kind):
        return row_of(conn, queue, handles[kind].job_id)

    retried = wait_for(lambda: (r := row("retry")).failed_at_ms and r)
    assert retried.run_at_ms == retried.failed_at_ms + 700
    wait_for(lambda: all(row(k).state == "dead" for k in ("retry", "discard", "error")))
    wait_for(lambda: all(row(k).snoozes == 1 for k in ("snooze_raise", "snooze_return")))
    code, out = stop(proc)
    assert code == 0, out

    assert (row("done").state, row("done").result_value) == ("done", {"outcome": "done"})
    assert (row("retry").reason, row("retry").attempts) == ("failed", 3)
    assert redis_client.get(f"{queue}:retry") == "3"
    discarded = row("discard")
    assert (discarded.reason, discarded.attempts) == ("the user was deleted", 1)
    assert redis_client.get(f"{queue}:discard") == "1"
    assert "Discard: the user was deleted" in discarded.last_error
    for kind in ("snooze_raise", "snooze_return"):
        snoozed = row(kind)
        assert (snoozed.state, snoozed.attempts, snoozed.snoozes) == ("scheduled", 0, 1), kind
        assert snoozed.run_at_ms - snoozed.started_at_ms >= 60_000 - 1000
    failed = row("error")
    assert (failed.reason, failed.attempts) == ("failed", 3)
    assert "KeyError: 'boom'" in failed.last_error
    assert redis_client.get(f"{queue}:error") == "3"
    assert f"job {handles['discard'].job_id} tests.testapp.jobs.choose attempt 1 -> dead " \
           "(the user was deleted)" in out


def test_results_are_kept_and_the_handle_returns_or_raises(conn, queue, redis_client,
                                                          worker_procs):
    ok = testjobs.add.using(queue=queue).enqueue(2, 3)
    bad = testjobs.always_fails.using(queue=queue).enqueue(f"{queue}:bad")
    proc = start(worker_procs, queue)
    assert ok.result(timeout_s=15) == 5
    with pytest.raises(JobFailedError) as failed:
        bad.result(timeout_s=15)
    assert failed.value.row.reason == "failed" and failed.value.row.state == "dead"
    assert "ended dead (failed)" in str(failed.value)
    assert stop(proc)[0] == 0

    done = ok.wait(timeout_s=1)
    assert (done.state, done.result_value) == ("done", 5)
    assert done.enqueued_at_ms <= done.started_at_ms <= done.finished_at_ms
    # RESULT_TTL_MS defaults to 24 h (tests.settings does not set it).
    assert DAY_MS - 120_000 < redis_client.pttl(Keyspace(queue).job(ok.job_id)) <= DAY_MS
    dead = bad.wait(timeout_s=1)
    assert "Traceback" in dead.last_error and "permanent failure" in dead.last_error
    assert WEEK_MS - 120_000 < redis_client.pttl(Keyspace(queue).job(bad.job_id)) <= WEEK_MS
    assert in_sets(redis_client, queue, bad.job_id) == {"dead"}


def test_handle_wait_times_out_on_a_waiting_job_and_raises_for_an_unknown_one(conn, queue):
    waiting = testjobs.add.using(queue=queue).enqueue(1, 1)
    with pytest.raises(TimeoutError, match="still pending"):
        waiting.wait(timeout_s=0.1)
    unknown = JobHandle(queue, "JOB" + "0" * 26, Outcome.ENQUEUED)
    with pytest.raises(NoSuchJobError):
        unknown.wait(timeout_s=0.1)
    with pytest.raises(NoSuchJobError):
        unknown.result(timeout_s=0.1)


def test_progress_is_stored_on_the_row_while_it_runs(conn, queue, redis_client, worker_procs):
    handle = testjobs.report_progress.using(queue=queue).enqueue(queue)
    proc = start(worker_procs, queue)
    wait_for(lambda: redis_client.get(f"{queue}:reported"))
    row = row_of(conn, queue, handle.job_id)
    assert (row.state, row.progress, row.progress_message) == ("active", 40, "reading")
    redis_client.set(f"{queue}:go", 1)
    assert handle.result(timeout_s=15) == "reported"
    row = row_of(conn, queue, handle.job_id)
    assert (row.progress, row.progress_message) == (100, "written")
    assert row.progress_at_ms <= row.finished_at_ms
    assert stop(proc)[0] == 0


def test_the_handler_s_context(conn, queue, worker_procs):
    with_context = testjobs.context_report.using(queue=queue).enqueue()
    without = testjobs.no_context.using(queue=queue).enqueue(1, flag=True)
    proc = start(worker_procs, queue)
    assert with_context.result(timeout_s=15) == {
        "job_id": with_context.job_id, "attempt": 1, "snoozes": 0, "scheduled_for_ms": None,
        "missed": 0, "cancelled": False, "queue": queue, "timeout_ms": None}
    assert without.result(timeout_s=15) == ["flag"]
    assert stop(proc)[0] == 0


# -- cancel ------------------------------------------------------------------------------


def test_jobs_cancelled_while_no_process_is_alive_never_run(conn, queue, redis_client,
                                                             worker_procs):
    fn = testjobs.record_start.using(queue=queue)
    waiting = fn.enqueue(f"{queue}:pending-ran")
    scheduled = fn.enqueue_in(200, f"{queue}:scheduled-ran")
    jobs = Jobs(conn)
    assert jobs.cancel(queue, waiting.job_id) == "cancelled"
    assert jobs.cancel(queue, scheduled.job_id) == "cancelled"
    # Enqueued after both and due after the scheduled one: once it has run,
    # the cancelled ones would have run too.
    marker = testjobs.add.using(queue=queue).enqueue_in(400, 1, 1)
    proc = start(worker_procs, queue, "--concurrency", "2")
    assert marker.result(timeout_s=15) == 2
    assert stop(proc)[0] == 0
    for handle, key in ((waiting, "pending-ran"), (scheduled, "scheduled-ran")):
        assert redis_client.get(f"{queue}:{key}") is None
        row = row_of(conn, queue, handle.job_id)
        assert (row.state, row.attempts, row.started_at_ms) == ("cancelled", 0, None)
        assert in_sets(redis_client, queue, handle.job_id) == set()
        with pytest.raises(JobFailedError, match="ended cancelled"):
            handle.result(timeout_s=1)


@pytest.mark.parametrize("raise_after", [True, False], ids=["raises", "returns"])
def test_a_cancel_while_running_is_seen_and_ends_cancelled_without_retry(
        conn, queue, redis_client, worker_procs, raise_after):
    proc = start(worker_procs, queue, "--concurrency", "1")
    handle = testjobs.wait_for_cancel.using(queue=queue).enqueue(queue, raise_after)
    wait_for(lambda: redis_client.get(f"{queue}:runs") == "1")
    assert stats_sum(redis_client, queue, "done") == 0
    assert Jobs(conn).cancel(queue, handle.job_id) == "flagged"
    row = handle.wait(timeout_s=15)
    assert row.state == "cancelled" and row.attempts == 1
    assert redis_client.get(f"{queue}:saw_cancel") == "1"
    # Later work still runs: the cancelled job is not in the way, and not retried.
    after = testjobs.add.using(queue=queue).enqueue(1, 2)
    assert after.result(timeout_s=15) == 3
    code, out = stop(proc)
    assert code == 0, out
    assert redis_client.get(f"{queue}:runs") == "1"
    assert in_sets(redis_client, queue, handle.job_id) == set()
    assert row_of(conn, queue, handle.job_id).state == "cancelled"
    # Only the later job counts as done; the cancelled one neither done nor failed.
    assert stats_sum(redis_client, queue, "done") == 1
    assert stats_sum(redis_client, queue, "failed") == 0
    assert f"job {handle.job_id} tests.testapp.jobs.wait_for_cancel attempt 1 -> cancelled" in out


# -- time limits ---------------------------------------------------------------------------


@pytest.mark.slow
def test_thread_mode_fails_an_overdue_job_while_its_thread_still_sleeps(
        conn, queue, redis_client, worker_procs):
    once = testjobs.overrun.using(queue=queue).enqueue(f"{queue}:once", 1.5)
    twice = testjobs.overrun_twice.using(queue=queue).enqueue(f"{queue}:twice", 1.5)
    proc = start(worker_procs, queue, "--concurrency", "4")
    wait_for(lambda: state_of(conn, queue, once.job_id) == "dead")
    assert redis_client.get(f"{queue}:once:finished") is None, "the handler was not overdue"
    row = row_of(conn, queue, once.job_id)
    assert (row.reason, row.attempts) == ("timeout", 1)
    assert "overran its time limit of 300 ms" in row.last_error
    assert redis_client.get(f"{queue}:once:pid") == str(proc.pid)
    # max_attempts=2: a retry with backoff first, then dead "timeout".
    wait_for(lambda: state_of(conn, queue, twice.job_id) == "dead")
    row = row_of(conn, queue, twice.job_id)
    assert (row.reason, row.attempts) == ("timeout", 2)
    assert redis_client.llen(f"{queue}:twice:runs") == 2
    assert proc.poll() is None  # thread mode: the process lives on
    # The sleeping thread returns late; its outcome is refused, the row stays dead.
    wait_for(lambda: redis_client.get(f"{queue}:once:finished"), timeout=10)
    code, out = stop(proc)
    assert code == 0, out
    assert row_of(conn, queue, once.job_id).reason == "timeout"
    assert f"job {once.job_id} tests.testapp.jobs.overrun attempt 1 returned after its time " \
           "limit" in out


@pytest.mark.slow
def test_process_mode_replaces_the_process_running_an_overdue_job(conn, queue, redis_client,
                                                                  worker_procs):
    proc = start(worker_procs, queue, "--processes", "2", "--concurrency", "1")
    first = wait_for(lambda: (p := announced_pids(redis_client, queue)) and len(p) == 2 and p,
                     timeout=20)
    handle = testjobs.overrun.using(queue=queue).enqueue(f"{queue}:p", 5)
    wait_for(lambda: state_of(conn, queue, handle.job_id) == "dead", timeout=20)
    row = row_of(conn, queue, handle.job_id)
    assert (row.reason, row.attempts) == ("timeout", 1)
    victim = int(redis_client.get(f"{queue}:p:pid"))
    assert victim in first and victim != proc.pid
    # A new consumer process takes the victim's place.
    wait_for(lambda: (p := announced_pids(redis_client, queue)) and len(p) == 2
             and victim not in p, timeout=20)
    assert len(announced_pids(redis_client, queue) - first) == 1
    after = testjobs.add.using(queue=queue).enqueue(3, 4)
    assert after.result(timeout_s=15) == 7
    code, out = stop(proc)
    assert code == 0, out
    assert f"consumer process {victim} exited with 75; starting a new one" in out, out
    assert redis_client.get(f"{queue}:p:finished") is None


# -- a cancel outlives the worker that was running the job ---------------------------------


def test_a_flagged_job_handed_back_at_shutdown_ends_cancelled(conn, queue, redis_client,
                                                             worker_procs):
    handle = testjobs.hold_then_return.using(queue=queue).enqueue(queue, 30)
    proc = start(worker_procs, queue, "--shutdown-grace-ms", "200")
    wait_for(lambda: redis_client.llen(f"{queue}:runs") == 1)
    assert Jobs(conn).cancel(queue, handle.job_id) == "flagged"
    code, out = stop(proc)  # the handler never checks: the grace runs out
    assert code == 0, out
    row = row_of(conn, queue, handle.job_id)
    assert (row.state, row.attempts) == ("cancelled", 1)
    assert in_sets(redis_client, queue, handle.job_id) == set()


@pytest.mark.slow
def test_a_flagged_job_whose_worker_is_killed_ends_cancelled_and_never_runs_again(
        conn, queue, redis_client, worker_procs):
    handle = testjobs.hold_then_return.using(queue=queue).enqueue(queue, 30)
    victim = start(worker_procs, queue, "--lease-ms", "500", "--concurrency", "1")
    wait_for(lambda: redis_client.llen(f"{queue}:runs") == 1)
    assert Jobs(conn).cancel(queue, handle.job_id) == "flagged"
    victim.kill()
    victim.communicate()
    heir = start(worker_procs, queue, "--lease-ms", "500")
    wait_for(lambda: state_of(conn, queue, handle.job_id) != "active", timeout=10)
    after = testjobs.add.using(queue=queue).enqueue(1, 1)
    assert after.result(timeout_s=15) == 2
    assert stop(heir)[0] == 0
    row = row_of(conn, queue, handle.job_id)
    assert (row.state, row.stalls, row.attempts) == ("cancelled", 1, 1)
    assert redis_client.llen(f"{queue}:runs") == 1
    assert in_sets(redis_client, queue, handle.job_id) == set()
