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
import redis

from echomq_django.protocol.keyspace import Keyspace
from echomq_django.repeat import Repeat

CTX = multiprocessing.get_context("spawn")


# -- child processes (module level so spawn can import them) --------------------


def _pump_loop(url: str, queue: str, stop, seed: int) -> None:
    client = redis.Redis.from_url(url, decode_responses=True)
    rep = Repeat(client)
    rnd = random.Random(seed)
    while not stop.is_set():
        rep.pump(queue)
        time.sleep(rnd.uniform(0.02, 0.05))


def _register(url: str, queue: str, barrier, results) -> None:
    client = redis.Redis.from_url(url, decode_responses=True)
    rep = Repeat(client)
    barrier.wait()
    results.put(rep.register(queue, "same", every_ms=1000, tz="UTC",
                             template={"job": "app.jobs.tick"}))


# -- helpers ----------------------------------------------------------------------


class Pumpers:
    """Start n pump loops; stop, pause and resume them by pid."""

    def __init__(self, url: str, queue: str, n: int) -> None:
        self.stop = CTX.Event()
        self.procs = [CTX.Process(target=_pump_loop, args=(url, queue, self.stop, seed),
                                  daemon=True) for seed in range(n)]

    def __enter__(self):
        for proc in self.procs:
            proc.start()
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


def occurrences(client, queue: str, name: str) -> list[tuple[int, int]]:
    """(scheduled_for, missed) of every job minted for ``name``, in slot order."""
    ks = Keyspace(queue)
    out = []
    for job_id in client.zrange(ks.pending, 0, -1):
        row = client.hgetall(ks.job(job_id))
        if row.get("repeat") != name:
            continue
        payload = json.loads(row["payload"])
        assert payload["scheduled_for"] == int(row["scheduled_for_ms"])
        out.append((payload["scheduled_for"], payload["missed"]))
    return sorted(out)


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


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
    assert redis_client.keys(f"emq:{{{queue}}}:repeat:*") == [ks.repeat_record("same")]


@pytest.mark.slow
def test_four_metronomes_for_twenty_seconds_mint_exactly_one_job_per_slot(
        valkey_url, redis_client, queue):
    with Pumpers(valkey_url, queue, 4):
        # Register once the pumpers run: a pumper that takes over a second to
        # start would rightly mint a catch-up (missed=1) for the first slot.
        time.sleep(2.0)
        Repeat(redis_client).register(queue, "tick", every_ms=1000, tz="UTC", template={})
        time.sleep(20)
    got = occurrences(redis_client, queue, "tick")
    slots = [slot for slot, _ in got]
    assert len(slots) >= 18
    assert len(set(slots)) == len(slots)
    assert all(b - a == 1000 for a, b in zip(slots, slots[1:])), slots
    assert [missed for _, missed in got] == [0] * len(got)


@pytest.mark.slow
def test_every_process_stopped_for_3_5_s_one_catch_up_then_back_on_the_grid(
        valkey_url, redis_client, queue, server_time_ms):
    rep = Repeat(redis_client)
    rep.register(queue, "co", every_ms=1000, tz="UTC", template={})
    rep.register(queue, "sk", every_ms=1000, tz="UTC", template={}, missed="skip")
    with Pumpers(valkey_url, queue, 2) as pumpers:
        wait_for(lambda: len(occurrences(redis_client, queue, "co")) >= 2)
        # Stop in the second half of a period (slot S minted, S+1000 not yet
        # due): S+1000 .. S+4000 fall due while everything is stopped.
        wait_for(lambda: 600 <= server_time_ms() % 1000 < 700)
        pumpers.pause()
        stopped_at = server_time_ms()
        time.sleep(3.5)
        pumpers.resume()
        time.sleep(2.3)
    s = stopped_at // 1000 * 1000

    co = occurrences(redis_client, queue, "co")
    before = [slot for slot, _ in co if slot <= s]
    after = [(slot, missed) for slot, missed in co if slot > s]
    assert before[-1] == s
    assert after[0] == (s + 4000, 3)           # one catch-up job standing for 4 slots
    assert after[1:3] == [(s + 5000, 0), (s + 6000, 0)]  # then the grid again
    assert [b - a for (a, _), (b, _) in zip(after, after[1:])] == [1000] * (len(after) - 1)

    sk = occurrences(redis_client, queue, "sk")
    assert [slot for slot, _ in sk if s < slot < s + 5000] == []  # skip mints none
    assert [slot for slot, _ in sk if slot >= s + 5000][:2] == [s + 5000, s + 6000]
    assert rep.get(queue, "sk").skipped == 4


@pytest.mark.slow
def test_a_sigstopped_metronome_that_resumes_mints_nothing_extra(
        valkey_url, redis_client, queue):
    Repeat(redis_client).register(queue, "tick", every_ms=1000, tz="UTC", template={})
    with Pumpers(valkey_url, queue, 3) as pumpers:
        time.sleep(1.5)
        victim = pumpers.procs[0]
        for _ in range(3):  # pause at a few different points of its loop
            pumpers.pause(victim)
            time.sleep(1.2)
            pumpers.resume(victim)
            time.sleep(0.3)
        time.sleep(1.0)
    got = occurrences(redis_client, queue, "tick")
    slots = [slot for slot, _ in got]
    assert len(slots) >= 5
    assert len(set(slots)) == len(slots)
    assert all(b - a == 1000 for a, b in zip(slots, slots[1:])), slots
    assert all(missed == 0 for _, missed in got)
