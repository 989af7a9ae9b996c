"""The metronome: against a throwaway server that goes away and comes back
(the session's shared server is never stopped), and under runechomq: a
drain at concurrency 1 never wakes it, and no delayed job starts early."""

from __future__ import annotations

import logging
import re
import threading
import time

import redis

from echomq_django import Jobs
from echomq_django.connection.resilience import Outage
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.runtime.metronome import Metronome
from tests.conftest import start_valkey_server, stop_valkey_server
from tests.procs import runechomq, state_of, wait_for
from tests.testapp import jobs as testjobs

BACK = re.compile(r"the test server is available again after ([0-9.]+) s")


class _Observed(Metronome):
    """A Metronome that says when its ticker has chosen a sleep."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sleeping = threading.Event()

    def plan(self, queue: str, nudge: bool = False):
        plan = super().plan(queue, nudge)
        self.sleeping.set()
        return plan


def test_the_listener_reports_the_end_of_an_outage_when_it_ends(tmp_path, queue, caplog):
    url, proc = start_valkey_server(tmp_path)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    probe = redis.Redis.from_url(url)
    conn = redis.Redis.from_url(url)
    beat = _Observed(conn, [queue], stop_event=threading.Event(),
                     outage=Outage("the test server"))
    caplog.set_level(logging.WARNING, logger="echomq.connection")
    try:
        beat.start()
        # Ready: the ticker beat once and, with nothing due, sleeps its
        # longest (30 s); the listener blocks on the beat list.
        wait_for(lambda: beat.sleeping.is_set()
                 and int(probe.info("clients")["blocked_clients"]) >= 1)
        proc.kill()
        proc.wait()
        down_at = time.monotonic()
        # The listener alone sees the outage (the ticker sleeps through it).
        wait_for(lambda: "the test server is unavailable" in caplog.text, timeout=10)
        _, proc = start_valkey_server(tmp_path, port=port)
        up_at = time.monotonic()
        # The listener reports the end within its backoff (at most 2 s), not
        # when the ticker next wakes, 30 s after it fell asleep.
        found = wait_for(lambda: BACK.search(caplog.text), timeout=10)
        reported_s = float(found.group(1))
        assert reported_s <= up_at - down_at + 3, caplog.text
        assert caplog.text.count("is unavailable") == 1
        assert caplog.text.count("is available again") == 1
    finally:
        beat.stop()
        beat.join(5)
        probe.close()
        conn.close()
        stop_valkey_server(proc)


def test_jobs_run_one_after_another_never_wake_the_metronome(conn, queue, redis_client,
                                                             server_time_ms, worker_procs):
    """At concurrency 1 each claim's lease is the only one, so it used to be
    the earliest deadline and wake the metronome for a whole beat per job.
    Now a claim marks the beat only before the metronome's plan: the plan
    its idle horizon stored (now + 30 s) outlives the drain untouched."""
    ks = Keyspace(queue)
    proc = runechomq(queue, "--concurrency", "1")
    worker_procs.append(proc)
    # The metronome's first plan first: a job claimed before it exists marks
    # the beat (there is no plan to compare with), and the plan moves.
    wait_for(lambda: redis_client.exists(ks.beat_at))
    warm = testjobs.add.using(queue=queue).enqueue(0, 0)
    wait_for(lambda: state_of(conn, queue, warm.job_id) == "done")
    plan = redis_client.get(ks.beat_at)
    handles = [testjobs.add.using(queue=queue).enqueue(i, i) for i in range(30)]
    wait_for(lambda: all(state_of(conn, queue, h.job_id) == "done" for h in handles))
    assert server_time_ms() < int(plan), "the drain outlasted the plan: nothing to tell"
    assert redis_client.get(ks.beat_at) == plan      # no horizon was read meanwhile
    assert redis_client.llen(ks.beat) == 0
    assert all(Jobs(conn).get(queue, h.job_id).attempts == 1 for h in handles)


def test_delayed_jobs_never_start_before_their_run_at(conn, queue, redis_client,
                                                      server_time_ms, worker_procs):
    """The metronome sleeps from the horizon's microseconds less half a round
    trip, so its promote lands at the planned millisecond: on the server
    clock no job is claimed before its run-at, instants a millisecond apart
    included. (The lateness bound here only catches a lost wake; the strict
    figures are benchmarks/delayed_latency.py's.)"""
    proc = runechomq(queue)
    worker_procs.append(proc)
    warm = testjobs.add.using(queue=queue).enqueue(0, 0)
    wait_for(lambda: state_of(conn, queue, warm.job_id) == "done")
    base = server_time_ms() + 500
    offsets = [0, 1, 2, 3, 50, 51, 200, 201, 202, 400]
    fn = testjobs.add.using(queue=queue)
    handles = [fn.enqueue_at(base + offset, offset, 0) for offset in offsets]
    wait_for(lambda: all(state_of(conn, queue, h.job_id) == "done" for h in handles))
    for handle in handles:
        row = Jobs(conn).get(queue, handle.job_id)
        assert row.started_at_ms >= row.run_at_ms, (row.run_at_ms, row.started_at_ms)
        assert row.started_at_ms - row.run_at_ms < 2_000
