"""The recurring registry with several processes on a real server (docs/repeat.md).

Each "metronome" here is a spawned process that loops calling
``Repeat(client).pump(queue)`` every 20-50 ms, which is all the metronome does
for recurrences. Exactly one job per occurrence must come out however many
pump, pause (SIGSTOP) or stop.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time

import pytest

from echomq_django.protocol.keyspace import Keyspace
from echomq_django.protocol.records import decode_row
from echomq_django.repeat import Repeat
from tests.nodes import client_for, keys

CTX = multiprocessing.get_context("spawn")


# -- child processes (module level so spawn can import them) --------------------


def _pump_loop(url: str, queue: str, stop, ready, seed: int) -> None:
    client = client_for(url, decode_responses=True)
    rep = Repeat(client)
    rnd = random.Random(seed)
    rep.pump(queue)
    ready.set()  # imported, connected and pumping: the test may go on
    while not stop.is_set():
        rep.pump(queue)
        time.sleep(rnd.uniform(0.02, 0.05))


def _register(url: str, queue: str, barrier, results) -> None:
    client = client_for(url, decode_responses=True)
    rep = Repeat(client)
    barrier.wait()
    results.put(rep.register(queue, "same", every_ms=1000, tz="UTC",
                             template={"job": "app.jobs.tick"}))


# -- helpers ----------------------------------------------------------------------


class Pumpers:
    """Start n pump loops; stop, pause and resume them by pid."""

    def __init__(self, url: str, queue: str, n: int) -> None:
        self.stop = CTX.Event()
        self.ready = [CTX.Event() for _ in range(n)]
        self.procs = [CTX.Process(target=_pump_loop, args=(url, queue, self.stop, ready, seed),
                                  daemon=True) for seed, ready in enumerate(self.ready)]

    def __enter__(self):
        """Start the pumpers and return once every one has pumped once (a
        spawned process needs a while to import; none is assumed)."""
        for proc in self.procs:
            proc.start()
        for ready, proc in zip(self.ready, self.procs):
            while not ready.wait(0.1):
                assert proc.is_alive(), f"pumper {proc.pid} died with {proc.exitcode}"
        return self

    def pause(self, *procs) -> None:
        for proc in procs or self.procs:
            os.kill(proc.pid, signal.SIGSTOP)

    def resume(self, *procs) -> None:
        for proc in procs or self.procs:
            os.kill(proc.pid, signal.SIGCONT)

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for proc in self.procs:
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGCONT)
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)
        assert all(proc.exitcode == 0 for proc in self.procs), [p.exitcode for p in self.procs]


def occurrences(client, queue: str, name: str) -> list[tuple[int, int, int]]:
    """(scheduled_for, missed, enqueued_at_ms) of every job minted for ``name``,
    in slot order; enqueued_at_ms is the server's clock when it was minted."""
    ks = Keyspace(queue)
    out = []
    for job_id in client.zrange(ks.pending, 0, -1):
        row = decode_row(client.hgetall(ks.job(job_id)))  # the payload's chunks joined
        if row.get("repeat") != name:
            continue
        payload = json.loads(row["payload"])
        assert payload["scheduled_for"] == int(row["scheduled_for_ms"])
        out.append((payload["scheduled_for"], payload["missed"], int(row["enqueued_at_ms"])))
    return sorted(out)


def assert_each_slot_once(got, every_ms: int) -> None:
    """Every slot from the first to the last is stood for by exactly one job:
    slots are distinct and on the grid, and a gap is exactly the slots a
    catch-up job says it coalesces (``missed``); nothing is minted early."""
    slots = [slot for slot, _, _ in got]
    assert len(set(slots)) == len(slots), slots
    assert all(slot % every_ms == 0 for slot in slots), slots
    for (a, _, _), (b, missed, _) in zip(got, got[1:]):
        assert b - a == (missed + 1) * every_ms, (a, b, missed)
    assert all(minted >= slot for slot, _, minted in got), got


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def sleep_until_server(server_time_ms, target_ms: int) -> None:
    """Sleep until the server's clock reads ``target_ms``."""
    while (left := target_ms - server_time_ms()) > 0:
        time.sleep(min(left, 50) / 1000)


# -- tests ------------------------------------------------------------------------


def test_three_processes_registering_the_same_name_at_once(valkey_url, redis_client, queue):
    barrier, results = CTX.Barrier(3), CTX.Queue()
    procs = [CTX.Process(target=_register, args=(valkey_url, queue, barrier, results))
             for _ in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
    outcomes = sorted(results.get(timeout=5) for _ in procs)
    assert outcomes == ["exists", "exists", "registered"]
    ks = Keyspace(queue)
    assert redis_client.zrange(ks.repeat, 0, -1) == ["same"]
    assert redis_client.hget(ks.repeat_record("same"), "version") == "1"
    assert keys(redis_client, f"emq:{{{queue}}}:repeat:*") == [ks.repeat_record("same")]


@pytest.mark.slow
def test_four_metronomes_mint_exactly_one_job_per_slot(
        valkey_url, redis_client, queue, server_time_ms):
    every_ms, slots = 200, 20
    with Pumpers(valkey_url, queue, 4):
        # Registered once every pumper runs (a pumper still starting up would
        # rightly mint a catch-up for the first slot).
        Repeat(redis_client).register(queue, "tick", every_ms=every_ms, tz="UTC", template={})
        first = Repeat(redis_client).get(queue, "tick").next_run_ms
        last = first + (slots - 1) * every_ms
        sleep_until_server(server_time_ms, last)
        wait_for(lambda: occurrences(redis_client, queue, "tick")[-1][0] >= last)
    got = occurrences(redis_client, queue, "tick")
    # Every slot due was stood for by exactly one job. Four pumpers pumping
    # every 20-50 ms mint on time: a catch-up would mean all four were a
    # whole period late, which the coverage check still accounts for.
    assert got[0][0] == first and got[-1][0] == last
    assert sum(1 + missed for _, missed, _ in got) == slots
    assert_each_slot_once(got, every_ms)


@pytest.mark.slow
def test_every_process_stopped_one_catch_up_then_back_on_the_grid(
        valkey_url, redis_client, queue, server_time_ms):
    every_ms = 500
    rep = Repeat(redis_client)
    with Pumpers(valkey_url, queue, 2) as pumpers:
        # Registered once the pumpers run (see the four-metronome test).
        rep.register(queue, "co", every_ms=every_ms, tz="UTC", template={})
        rep.register(queue, "sk", every_ms=every_ms, tz="UTC", template={}, missed="skip")
        wait_for(lambda: len(occurrences(redis_client, queue, "co")) >= 2
                 and len(occurrences(redis_client, queue, "sk")) >= 2)
        pumpers.pause()
        # What was minted before the pause, read once nothing pumps any more.
        last_co = occurrences(redis_client, queue, "co")[-1][0]
        last_sk = occurrences(redis_client, queue, "sk")[-1][0]
        skipped_before = rep.get(queue, "sk").skipped
        # Stopped across at least four more slots of each, on the server clock.
        sleep_until_server(server_time_ms, max(last_co, last_sk) + 4 * every_ms + every_ms // 2)
        pumpers.resume()
        wait_for(lambda: len([1 for slot, _, _ in occurrences(redis_client, queue, "co")
                              if slot > last_co]) >= 3)
        wait_for(lambda: len([1 for slot, _, _ in occurrences(redis_client, queue, "sk")
                              if slot > last_sk]) >= 2)

    co = occurrences(redis_client, queue, "co")
    assert_each_slot_once(co, every_ms)
    catch_up_slot, missed, minted_at = [o for o in co if o[0] > last_co][0]
    # One catch-up job standing for every slot due when it was minted, the
    # latest of them its slot (both read from the server's clock)...
    assert catch_up_slot == minted_at // every_ms * every_ms
    assert missed == (catch_up_slot - last_co) // every_ms - 1 >= 3
    # ... then the grid again, one job per slot.
    after = [slot for slot, _, _ in co if slot > catch_up_slot]
    assert after[:2] == [catch_up_slot + every_ms, catch_up_slot + 2 * every_ms]

    sk = occurrences(redis_client, queue, "sk")
    slots = [slot for slot, _, _ in sk]
    assert len(set(slots)) == len(slots) and all(slot % every_ms == 0 for slot in slots)
    resumed = [o for o in sk if o[0] > last_sk]
    # skip mints none of the slots missed while stopped: the next job is on
    # the first slot after the pumper came back, and the record counts the
    # dropped ones.
    first_after, missed_after, minted_at = resumed[0]
    assert missed_after == 0
    assert first_after - every_ms < minted_at, "a slot due at resume was minted, not skipped"
    skipped = (first_after - last_sk) // every_ms - 1
    assert skipped >= 4 and rep.get(queue, "sk").skipped - skipped_before == skipped
    assert resumed[1][0] == first_after + every_ms


@pytest.mark.slow
def test_a_sigstopped_metronome_that_resumes_mints_nothing_extra(
        valkey_url, redis_client, queue, server_time_ms):
    every_ms = 250
    Repeat(redis_client).register(queue, "tick", every_ms=every_ms, tz="UTC", template={})
    with Pumpers(valkey_url, queue, 3) as pumpers:
        victim = pumpers.procs[0]
        for pause_ms in (300, 550, 800):  # paused at different points of its loop
            pumpers.pause(victim)
            sleep_until_server(server_time_ms, server_time_ms() + pause_ms)
            pumpers.resume(victim)
            sleep_until_server(server_time_ms, server_time_ms() + 150)
        due = server_time_ms() // every_ms * every_ms
        wait_for(lambda: occurrences(redis_client, queue, "tick")[-1][0] >= due)
    got = occurrences(redis_client, queue, "tick")
    assert len(got) >= 6
    # Every slot up to the last one due was stood for by exactly one job.
    assert_each_slot_once(got, every_ms)
