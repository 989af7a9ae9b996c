"""The mint clock is the server's: a producer whose clock is a minute off
neither jumps ahead nor falls behind (docs/protocol.md, "Ordering")."""

import os
import time

import pytest

from echomq_django import BrandedId
from echomq_django.protocol import clock as clock_mod
from echomq_django.protocol.clock import ServerClock, mint_now_ms

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
    monkeypatch.setattr(BrandedId, "_last_ms", -1)  # no earlier test's mint holds it
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
