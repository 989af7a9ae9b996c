"""runechomq end to end: a real subprocess against the real test server."""

import json
import re
import time

import pytest

from echomq_django import Jobs
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.rules import MIN_RUN_AT_MS
from tests.procs import runechomq, state_of, stop, wait_for
from tests.testapp import jobs as testjobs



def terminal(conn, queue, *job_ids):
    return all(state_of(conn, queue, j) in ("done", "dead") for j in job_ids)


def test_done_retried_and_dead_then_clean_sigterm(conn, queue, redis_client, worker_procs):
    ok = testjobs.add.using(queue=queue).enqueue(2, 3)
    flaky = testjobs.flaky.using(queue=queue).enqueue(f"{queue}:flaky", 2)
    bad = testjobs.always_fails.using(queue=queue).enqueue(f"{queue}:bad")
    # -v 2: a job done is logged at DEBUG (the default formats no line per job done).
    proc = runechomq(queue, "--concurrency", "2", "-v", "2")
    worker_procs.append(proc)
    wait_for(lambda: terminal(conn, queue, ok.job_id, flaky.job_id, bad.job_id))
    code, out = stop(proc)
    assert code == 0, out

    jobs = Jobs(conn)
    done = jobs.get(queue, ok.job_id)
    assert (done.state, done.attempts, done.result_value) == ("done", 1, 5)
    retried = jobs.get(queue, flaky.job_id)
    assert (retried.state, retried.attempts, retried.result_value) == ("done", 3, 3)
    assert "transient failure 2" in retried.last_error
    dead = jobs.get(queue, bad.job_id)
    assert (dead.state, dead.attempts, dead.reason) == ("dead", 2, "failed")
    assert "Traceback" in dead.last_error and "permanent failure" in dead.last_error
    assert redis_client.zscore(Keyspace(queue).dead, bad.job_id) is not None
    assert redis_client.get(f"{queue}:bad") == "2"
    # The log says what happened to each job.
    assert f"job {ok.job_id} tests.testapp.jobs.add attempt 1 -> done" in out
    assert f"job {flaky.job_id} tests.testapp.jobs.flaky attempt 1 -> retry in 50 ms" in out
    assert f"job {bad.job_id} tests.testapp.jobs.always_fails attempt 2 -> dead (failed)" in out
    assert "received SIGTERM" in out


def test_unknown_job_path_goes_dead_and_the_worker_lives_on(conn, queue, worker_procs):
    jobs = Jobs(conn)
    evil = "JOB" + "0" * 26
    jobs.enqueue(queue, evil, json.dumps({"job": "os.system", "args": ["touch /tmp/pwned"], "kwargs": {}}))
    junk = "JOB" + "0" * 25 + "1"
    jobs.enqueue(queue, junk, json.dumps([1, 2, 3]))
    proc = runechomq(queue)
    worker_procs.append(proc)
    wait_for(lambda: terminal(conn, queue, evil, junk))
    after = testjobs.add.using(queue=queue).enqueue(1, 1)
    wait_for(lambda: state_of(conn, queue, after.job_id) == "done")
    code, out = stop(proc)
    assert code == 0, out
    row = jobs.get(queue, evil)
    assert (row.state, row.reason) == ("dead", "unknown job")
    assert "'os.system'" in row.last_error
    assert jobs.get(queue, junk).reason == "bad payload"


def test_job_scheduled_one_second_ahead_starts_within_50_ms(conn, queue, redis_client, worker_procs):
    proc = runechomq(queue)
    worker_procs.append(proc)
    warm = testjobs.add.using(queue=queue).enqueue(0, 0)
    wait_for(lambda: state_of(conn, queue, warm.job_id) == "done")
    # Three delayed jobs 1.0, 1.2 and 1.4 s ahead; each starts on its own run-at.
    handles = [testjobs.record_start.using(queue=queue).enqueue_in(1000 + 200 * i,
                                                                   f"{queue}:start:{i}")
               for i in range(3)]
    wait_for(lambda: terminal(conn, queue, *(h.job_id for h in handles)), timeout=5)
    lateness = []
    for i, handle in enumerate(handles):
        row = Jobs(conn).get(queue, handle.job_id)
        handler_saw = int(redis_client.get(f"{queue}:start:{i}"))
        assert row.started_at_ms >= row.run_at_ms, "started before its run-at"
        lateness.append(row.started_at_ms - row.run_at_ms)
        assert handler_saw - row.run_at_ms < 50
    stop(proc)
    assert max(lateness) < 50, lateness


def test_sigterm_hands_unfinished_jobs_back(conn, queue, redis_client, worker_procs):
    handle = testjobs.sleep_then_mark.using(queue=queue).enqueue(f"{queue}:long", 30)
    proc = runechomq(queue, "--shutdown-grace-ms", "300")
    worker_procs.append(proc)
    wait_for(lambda: redis_client.get(f"{queue}:long:started"))
    started = time.monotonic()
    code, out = stop(proc, timeout=10)
    assert code == 0, out
    assert time.monotonic() - started < 5
    row = Jobs(conn).get(queue, handle.job_id)
    assert row.state == "pending" and row.attempts == 0, row
    assert redis_client.zscore(Keyspace(queue).pending, handle.job_id) == 0
    assert redis_client.zscore(Keyspace(queue).active, handle.job_id) is None
    assert "handed back to pending" in out


def test_sigterm_lets_a_short_handler_finish(conn, queue, redis_client, worker_procs):
    handle = testjobs.sleep_then_mark.using(queue=queue).enqueue(f"{queue}:short", 1)
    proc = runechomq(queue)
    worker_procs.append(proc)
    wait_for(lambda: redis_client.get(f"{queue}:short:started"))
    code, out = stop(proc)
    assert code == 0, out
    assert state_of(conn, queue, handle.job_id) == "done"
    assert redis_client.get(f"{queue}:short:finished") == "1"


def test_burst_drains_and_exits(conn, queue, worker_procs):
    fn = testjobs.add.using(queue=queue)
    handles = [fn.enqueue(i, i) for i in range(5)]
    due = Jobs(conn).enqueue_at(queue, "JOB" + "1" * 26, fn._payload((9, 9), {}),
                                MIN_RUN_AT_MS)
    later = fn.enqueue_in(60_000, 1, 1)
    proc = runechomq(queue, "--burst")
    worker_procs.append(proc)
    code, out = proc.communicate(timeout=20)
    assert proc.returncode == 0, code
    assert all(state_of(conn, queue, h.job_id) == "done" for h in handles)
    assert due == "scheduled" and state_of(conn, queue, "JOB" + "1" * 26) == "done"
    assert state_of(conn, queue, later.job_id) == "scheduled"


def test_command_warns_about_a_queue_that_is_not_configured(conn, queue, worker_procs):
    # tests.settings configures only "default": ``queue`` is not configured.
    handle = testjobs.add.using(queue=queue).enqueue(2, 3)
    proc = runechomq(queue, "--burst")
    worker_procs.append(proc)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert f"WARNING echomq.worker: queue {queue!r} is not in ECHOMQ['QUEUES']" in out, out
    assert state_of(conn, queue, handle.job_id) == "done"  # served all the same


def test_max_jobs(conn, queue, redis_client, worker_procs):
    fn = testjobs.add.using(queue=queue)
    handles = [fn.enqueue(i, i) for i in range(5)]
    proc = runechomq(queue, "--concurrency", "1", "--max-jobs", "2")
    worker_procs.append(proc)
    proc.communicate(timeout=20)
    assert proc.returncode == 0
    states = [state_of(conn, queue, h.job_id) for h in handles]
    assert states == ["done", "done", "pending", "pending", "pending"]


def test_processes_share_the_queue(conn, queue, redis_client, worker_procs):
    fn = testjobs.sleep_then_mark.using(queue=queue)
    handles = [fn.enqueue(f"{queue}:p{i}", 0.3) for i in range(8)]
    proc = runechomq(queue, "--processes", "2", "--concurrency", "1")
    worker_procs.append(proc)
    wait_for(lambda: terminal(conn, queue, *(h.job_id for h in handles)), timeout=20)
    code, out = stop(proc)
    assert code == 0, out
    pids = {Jobs(conn).get(queue, h.job_id).consumer.split(":")[1] for h in handles}
    assert len(pids) == 2 and str(proc.pid) not in pids


def test_split_roles_metronome_only_and_consumers_only(conn, queue, worker_procs):
    consumer = runechomq(queue, "--without-metronome")
    metronome = runechomq(queue, "--metronome-only")
    worker_procs.extend([consumer, metronome])
    handle = testjobs.add.using(queue=queue).enqueue_in(300, 4, 4)
    wait_for(lambda: state_of(conn, queue, handle.job_id) == "done")
    assert stop(consumer)[0] == 0
    assert stop(metronome)[0] == 0


@pytest.mark.slow
def test_killed_worker_job_is_reaped_and_completes_on_attempt_2(conn, queue, redis_client, worker_procs):
    handle = testjobs.sleep_then_mark.using(queue=queue).enqueue(f"{queue}:kill", 1)
    first = runechomq(queue, "--lease-ms", "1000")
    worker_procs.append(first)
    wait_for(lambda: redis_client.get(f"{queue}:kill:started"))
    first.kill()
    first.communicate()
    killed_at = time.monotonic()
    second = runechomq(queue, "--lease-ms", "1000")
    worker_procs.append(second)
    try:
        wait_for(lambda: state_of(conn, queue, handle.job_id) == "done", timeout=10)
    except AssertionError:
        second.kill()
        print(Jobs(conn).get(queue, handle.job_id), second.communicate()[0])
        raise
    row = Jobs(conn).get(queue, handle.job_id)
    assert row.attempts == 2 and row.stalls == 1
    # Back in pending within the lease (1 s) + one reaper tick, then a 1 s run.
    assert time.monotonic() - killed_at < 1.0 + 1.0 + 1.5
    assert stop(second)[0] == 0


def test_command_rejects_bad_queue_names(worker_procs):
    proc = runechomq("bad queue")
    worker_procs.append(proc)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode != 0
    assert "queue name must be 1-100 characters" in out


@pytest.mark.parametrize("option, value, rule", [
    ("--concurrency", "20000", "1..10000"),
    ("--concurrency", "0", "1..10000"),
    ("--concurrency", "four", "1..10000"),
    ("--processes", "0", "1..1000"),
    ("--processes", "100000", "1..1000"),
    ("--max-jobs", "0", "1..9007199254740992"),
    ("--max-jobs", "1.5", "1..9007199254740992"),
    ("--lease-ms", "0", "1..9007199254740992"),
    ("--lease-ms", str(2**53 + 1), "1..9007199254740992"),
    ("--shutdown-grace-ms", "-1", "0..9007199254740992"),
])
def test_a_numeric_option_out_of_its_range_is_a_usage_error_naming_it(option, value, rule):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=rf"argument {option}: must be an int in "
                                           rf"{re.escape(rule)}, got '{re.escape(value)}'"):
        call_command("runechomq", option, value)


def test_concurrency_past_its_bound_exits_with_usage_not_a_traceback(worker_procs):
    proc = runechomq("default", "--concurrency", "20000")
    worker_procs.append(proc)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 2, out
    assert "usage:" in out
    assert "error: argument --concurrency: must be an int in 1..10000, got '20000'" in out
    assert "Traceback" not in out


def test_a_failures_text_is_capped_to_its_end():
    from echomq_django.runtime.outcome import MAX_ERROR_CHARS, _capped

    huge = "Traceback ...\n" + "x" * (3 * MAX_ERROR_CHARS) + "\nValueError: the end\n"
    kept = _capped(huge)
    assert len(kept) < MAX_ERROR_CHARS + 100
    assert kept.startswith("[") and "characters cut" in kept.splitlines()[0]
    assert kept.endswith("ValueError: the end\n")
    assert _capped("short") == "short"
