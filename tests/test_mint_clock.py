"""The mint clock is the server's: a producer whose clock is a minute off
neither jumps ahead nor falls behind (docs/protocol.md, "Ordering")."""

import os
import subprocess
import sys
import time
import uuid

import pytest

from echomq_django import BrandedId, Jobs
from echomq_django.protocol import clock as clock_mod
from echomq_django.protocol.clock import ServerClock, mint_now_ms
from tests.procs import ROOT
from tests.testapp.jobs import add

FAKETIME = "/usr/bin/faketime"
MINUTE_NS = 60 * 10**9


def skew_the_wall_clock(monkeypatch, skew_ns):
    """From now on this process's ``time.time_ns()`` is off by ``skew_ns``;
    the monotonic clock is left alone (as an NTP step would)."""
    real = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real() + skew_ns)


# -- the offset ------------------------------------------------------------------


@pytest.mark.parametrize("skew_ns", [MINUTE_NS, -MINUTE_NS])
def test_a_clock_a_minute_off_mints_ids_on_the_server_clock(
        conn, server_time_ms, monkeypatch, skew_ns):
    skew_the_wall_clock(monkeypatch, skew_ns)
    monkeypatch.setattr(BrandedId, "_last", {})  # no earlier test's mint holds it
    clock = ServerClock()
    for _ in range(3):
        before = server_time_ms()
        job_id = BrandedId.generate("JOB", clock.now_ms(conn))
        after = server_time_ms()
        assert before - 3 <= BrandedId.timestamp_ms(job_id) <= after + 3
        time.sleep(0.01)
    assert clock.round_trip_ns < 50_000_000
    # The same through the per-client clock EchoMQ's minters use.
    before = server_time_ms()
    assert before - 3 <= mint_now_ms(conn) <= server_time_ms() + 3


def test_the_offset_is_measured_once_then_lazily_after_refresh_s(conn, server_time_ms):
    calls = []

    class Counting:
        def time(self):
            calls.append(1)
            return conn.time()

    counting = Counting()
    clock = ServerClock(refresh_s=0.2, samples=3)
    for _ in range(20):
        clock.now_ms(counting)
    assert len(calls) == 3  # one measurement of three round trips
    time.sleep(0.25)
    before = server_time_ms()
    assert before - 3 <= clock.now_ms(counting) <= server_time_ms() + 3
    assert len(calls) == 6


def test_the_shortest_round_trip_wins(monkeypatch):
    # A fake server whose TIME is exactly this host's clock + 5 s, reached
    # through round trips of 40, 2 and 30 ms (the server reads TIME at the
    # midpoint): only the 2 ms one gives the offset to within 1 ms.
    trips_ms = iter([40, 2, 30])
    fake_mono = [10**12]

    monkeypatch.setattr(time, "monotonic_ns", lambda: fake_mono[0])
    monkeypatch.setattr(time, "time_ns", lambda: fake_mono[0] + 7 * 10**17)

    class Server:
        def time(self):
            trip_ns = next(trips_ms) * 10**6
            # Skew the reading: it happens at the first quarter, not the midpoint.
            fake_mono[0] += trip_ns // 4
            server_us = (time.time_ns() + 5 * 10**9) // 1000
            fake_mono[0] += trip_ns - trip_ns // 4
            return divmod(server_us, 1_000_000)

    clock = ServerClock(samples=3)
    offset = clock.measure(Server())
    assert clock.round_trip_ns == 2 * 10**6
    assert abs(offset - 5 * 10**9) <= 10**6


def test_a_wall_clock_step_is_caught_before_the_next_mint(conn, server_time_ms, monkeypatch):
    clock = ServerClock()  # refresh_s: a minute, so only the step can trigger it
    clock.now_ms(conn)
    skew_the_wall_clock(monkeypatch, MINUTE_NS)
    before = server_time_ms()
    assert before - 3 <= clock.now_ms(conn) <= server_time_ms() + 3


def test_mint_now_ms_keeps_one_clock_per_client_and_a_forked_child_measures_afresh(conn):
    mint_now_ms(conn)
    kept = clock_mod._clocks[conn]
    mint_now_ms(conn)
    assert clock_mod._clocks[conn] is kept
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write_fd, str(len(clock_mod._clocks)).encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    os.waitpid(pid, 0)
    with os.fdopen(read_fd) as fh:
        assert fh.read() == "0"


# -- end to end: a producer under faketime ---------------------------------------

# The skewed producer: before each enqueue it waits for a go on a list, then
# answers with the job id it got and its own clock, so the order in which the
# server admitted the jobs is known.
PRODUCER = """
import sys, time, django
django.setup()
from echomq_django.connection import get_connection
from tests.testapp.jobs import add
queue, go, done, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
conn = get_connection()
for i in range(n):
    if conn.blpop(go, timeout=8) is None:
        sys.exit("no go")
    handle = add.using(queue=queue).enqueue(i, 1)
    conn.rpush(done, f"{handle.job_id} {time.time_ns() // 1_000_000}")
"""


@pytest.mark.skipif(not os.access(FAKETIME, os.X_OK), reason="needs Debian's faketime")
@pytest.mark.parametrize("skew", ["+60s", "-60s"])
def test_a_producer_a_minute_off_is_served_in_admission_order(
        conn, redis_client, queue, server_time_ms, skew, monkeypatch):
    # Earlier tests in this process minted JOB ids on a host clock they had
    # set minutes ahead, which holds this process's next JOB ids at that time
    # (protocol.md, "Ordering"): start from fresh generator state.
    monkeypatch.setattr(BrandedId, "_last", {})
    n = 4
    go, done = (f"t-mint-{name}-{uuid.uuid4().hex[:8]}" for name in ("go", "done"))
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings", PYTHONPATH=str(ROOT),
               FAKETIME_DONT_FAKE_MONOTONIC="1")
    proc = subprocess.Popen([FAKETIME, "-f", skew, sys.executable, "-c", PRODUCER,
                             queue, go, done, str(n)],
                            cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        admitted = {}  # job id -> who minted it, in the order of admission
        for i in range(n):
            admitted[add.using(queue=queue).enqueue(i, 0).job_id] = f"here {i}"
            # Each admission in a later server millisecond than the one
            # before: within one millisecond two processes' ids are ordered
            # by their random counters.
            time.sleep(0.01)
            redis_client.rpush(go, "1")
            reply = redis_client.blpop(done, timeout=8)
            assert reply is not None, "the skewed producer did not answer"
            job_id, its_clock_ms = reply[1].split()
            admitted[job_id] = f"{skew} {i}"
            time.sleep(0.01)
        assert proc.wait(8) == 0, proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        redis_client.delete(go, done)
    # The producer's clock really was a minute off.
    assert abs(int(its_clock_ms) - server_time_ms() - int(skew[:-1]) * 1000) < 5_000
    jobs = Jobs(conn)
    claimed = []
    while (claim := jobs.claim(queue, "t-consumer", 60_000)) is not None:
        claimed.append(admitted[claim.job_id])
    assert claimed == list(admitted.values())
