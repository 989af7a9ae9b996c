"""A full server (maxmemory with noeviction) that stays full longer than a
lease (issue 9, item 6): the lease renewal (jobs/extend, ``#!lua
flags=allow-oom``) still runs, so reap never takes a job whose holder keeps
renewing; a handler's progress report (jobs/progress) and a task's metadata
(jobs/metadata) are allow-oom too, so they do not fail the job; every other write is refused as before
(docs/protocol.md, "Faults").

Each test fills a throwaway server of its own, never the session's.
"""

from __future__ import annotations

import time

import pytest
import redis

from echomq_django import Jobs
from echomq_django.exceptions import StaleTokenError
from echomq_django.protocol import scripts
from echomq_django.protocol.ids import BrandedId
from echomq_django.protocol.keyspace import Keyspace
from tests.conftest import start_valkey_server, stop_valkey_server
from tests.procs import runechomq, state_of, stop, wait_for


def fill(client, tag: str) -> int:
    """Cap the server's memory just above what it uses, with noeviction, and
    write until a write is refused with OOM; return how many keys it took.

    The refusal may come from the refused command's own 50 KB in the client's
    buffer, so the cap is then pinned at 90% of what the server uses: it stays
    full however its buffers come and go."""
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", used + 2_000_000)
    for i in range(10_000):
        try:
            client.set(f"{tag}:fill:{i}", "x" * 50_000)
        except redis.exceptions.OutOfMemoryError:
            client.config_set("maxmemory", int(client.info("memory")["used_memory"]) * 9 // 10)
            return i
    raise AssertionError("the server never filled up")


def test_the_shebang_is_the_first_line_and_only_extend_progress_and_metadata_have_one():
    flagged = {n: scripts.source(n).flags for n in scripts.script_names()
               if scripts.source(n).flags}
    assert flagged == {"jobs/extend": ("allow-oom",), "jobs/progress": ("allow-oom",),
                       "jobs/metadata": ("allow-oom",)}
    for name in flagged:
        assert scripts.source(name).text.startswith("#!lua flags=allow-oom\n")


def test_a_shebang_anywhere_but_the_first_line_is_refused(monkeypatch):
    files = {"x/bad.lua": "-- KEYS[1] pending\n-- @include late\nreturn 1\n",
             "includes/late.lua": "#!lua flags=allow-oom\nlocal y = 1\n"}
    monkeypatch.setattr(scripts, "_read", lambda relative: files[relative])
    scripts.source.cache_clear()
    try:
        with pytest.raises(ValueError, match="shebang must be the script's first line"):
            scripts.source("x/bad")
    finally:
        scripts.source.cache_clear()


def test_a_held_lease_is_renewed_while_the_server_is_full_and_reap_leaves_it(
        tmp_path, queue):
    url, proc = start_valkey_server(tmp_path)
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        jobs = Jobs(client)
        ks = Keyspace(queue)
        held = BrandedId.generate()
        jobs.enqueue(queue, held, "{}")
        claim = jobs.claim(queue, "holder", 300)
        assert fill(client, queue) > 0
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            jobs.enqueue(queue, BrandedId.generate(), "{}")      # writes are refused
        # Five leases' worth of full server: the holder renews every 100 ms
        # and the reaper, which runs under OOM too, finds nothing to take.
        until = time.monotonic() + 1.5
        while time.monotonic() < until:
            deadline = jobs.extend(queue, claim.job_id, claim.token, 300)
            assert jobs.reap(queue) == 0
            assert client.zscore(ks.active, held) == deadline
            time.sleep(0.1)
        row = jobs.get(queue, held)
        assert (row.state, row.token, row.stalls, row.attempts) == (
            "active", claim.token, 0, 1)
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            client.set(f"{queue}:probe", "x")                    # still full
        # A holder that stops renewing loses the lease, full server or not.
        time.sleep(0.35)
        assert jobs.reap(queue) == 1
        assert jobs.get(queue, held).state == "pending"
    finally:
        client.close()
        stop_valkey_server(proc)


def test_a_progress_report_is_stored_while_the_server_is_full(tmp_path, queue):
    """A handler's context.progress() on a full server. Before, jobs/progress
    was refused with OOM; the context repeats it for 5 s and then raised
    OutOfMemoryError into the handler, so a job that reports progress failed
    (retried, and dead after max_attempts) only because the server was full:
    a fault-injection drain under maxmemory lost 8 of 1,000 jobs that way."""
    url, proc = start_valkey_server(tmp_path)
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        jobs = Jobs(client)
        held = BrandedId.generate()
        jobs.enqueue(queue, held, "{}")
        claim = jobs.claim(queue, "holder", 60_000)
        assert fill(client, queue) > 0
        assert jobs.progress(queue, held, claim.token, 40, "reading") is False
        assert jobs.progress(queue, held, claim.token, 80, "writing") is False
        # A task's metadata (django.tasks) is saved the same way.
        assert jobs.save_metadata(queue, held, claim.token, {"cursor": 7}) is False
        row = jobs.get(queue, held)
        assert (row.state, row.progress, row.progress_message) == ("active", 80, "writing")
        assert row.extra["metadata"] == '{"cursor":7}'
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            client.set(f"{queue}:probe", "x")                    # still full
        # Still fenced: a token that does not hold the lease changes nothing.
        with pytest.raises(StaleTokenError):
            jobs.progress(queue, held, "not-the-token", 90)
        assert jobs.get(queue, held).progress == 80
    finally:
        client.close()
        stop_valkey_server(proc)


@pytest.mark.slow
def test_a_running_job_outlives_a_full_server_longer_than_its_lease(tmp_path, queue,
                                                                     worker_procs):
    url, proc = start_valkey_server(tmp_path)
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        jobs = Jobs(client)
        worker = runechomq(queue, "--concurrency", "2", "--lease-ms", "600", url=url)
        worker_procs.append(worker)
        key = f"{queue}:nap"
        job_id = BrandedId.generate()
        jobs.enqueue(queue, job_id, '{"job": "tests.testapp.jobs.sleep_then_mark", '
                                    f'"args": ["{key}", 3.0], "kwargs": {{}}}}')
        wait_for(lambda: client.get(key + ":started"))
        fill(client, queue)
        time.sleep(2.0)                          # full for more than three leases
        client.config_set("maxmemory", 0)
        wait_for(lambda: state_of(client, queue, job_id) == "done", timeout=30)
        code, out = stop(worker)
        assert code == 0, out
        row = jobs.get(queue, job_id)
        # Run once, never reaped: a reaped job would show a stall and a second attempt.
        assert (row.state, row.attempts, row.stalls, row.result_value) == ("done", 1, 0, "slept")
        assert client.zcard(Keyspace(queue).dead) == 0
        assert "Traceback" not in out, out[-4000:]
    finally:
        client.close()
        stop_valkey_server(proc)
