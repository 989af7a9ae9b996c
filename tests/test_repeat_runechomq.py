"""Recurring schedules with a real runechomq: a schedule written while the
metronome idles mints on its slot, and a registry lost to a flush is re-synced
(docs/repeat.md, "register.lua" and "Lost registry")."""

from __future__ import annotations

import json

import pytest
import redis

from echomq_django.protocol.keyspace import Keyspace
from echomq_django.repeat import Repeat
from tests.procs import runechomq, state_of, stop, wait_for
from tests.testapp import jobs as testjobs

TEMPLATE = {"job": "tests.testapp.jobs.add", "args": [1, 2], "kwargs": {}}


def minted(client, queue: str, name: str) -> list[tuple[int, int]]:
    """(scheduled_for_ms, enqueued_at_ms) of the jobs minted for ``name`` and
    still pending, in slot order; both are server-clock ms."""
    ks = Keyspace(queue)
    rows = (client.hgetall(ks.job(job_id)) for job_id in client.zrange(ks.pending, 0, -1))
    return sorted((int(row["scheduled_for_ms"]), int(row["enqueued_at_ms"]))
                  for row in rows if row.get("repeat") == name)


def wait_until_idle(conn, redis_client, queue: str) -> None:
    """Return once runechomq's metronome for ``queue`` has nothing due (so it
    sleeps its longest, 30 s) and its listener has taken every beat marker.

    A job due at once marks the beat; it is promoted and the marker taken
    only by a running metronome. The second one is promoted by a beat its
    listener woke, after which nothing is due."""
    beat = Keyspace(queue).beat
    for _ in range(2):
        warm = testjobs.add.using(queue=queue).enqueue_in(0, 0, 0)
        wait_for(lambda: state_of(conn, queue, warm.job_id) == "pending"
                 and redis_client.llen(beat) == 0)


@pytest.mark.parametrize("how", ["register", "upsert"])
def test_a_schedule_written_while_runechomq_idles_mints_on_its_slot(
        conn, redis_client, queue, server_time_ms, worker_procs, how):
    rep = Repeat(conn)
    if how == "upsert":
        # A schedule due in 20 minutes: the metronome sleeps its longest.
        rep.register(queue, "soon", every_ms=3_600_000, template=TEMPLATE,
                     start_at_ms=server_time_ms() + 1_200_000)
    proc = runechomq(queue, "--metronome-only")
    worker_procs.append(proc)
    wait_until_idle(conn, redis_client, queue)

    write = rep.register if how == "register" else rep.upsert
    assert write(queue, "soon", every_ms=3_600_000, template=TEMPLATE,
                 start_at_ms=server_time_ms() + 1000) in ("registered", "updated")
    slot = rep.get(queue, "soon").next_run_ms
    wait_for(lambda: minted(redis_client, queue, "soon"), timeout=5)
    [(scheduled_for, enqueued_at)] = minted(redis_client, queue, "soon")
    assert scheduled_for == slot
    assert 0 <= enqueued_at - slot < 50, enqueued_at - slot
    code, out = stop(proc)
    assert code == 0, out


def test_a_flushed_registry_is_resynced_and_the_declared_schedule_mints_again(
        start_valkey, queue, worker_procs):
    # A throwaway server: FLUSHALL would take other tests' data with it.
    url, _ = start_valkey()
    client = redis.Redis.from_url(url, decode_responses=True)
    every_ms = 500
    schedules = {"tick": {"job": "tests.testapp.jobs.add", "args": [1, 2], "queue": queue,
                          "every_ms": every_ms}}
    proc = runechomq(queue, "--metronome-only", env={
        "ECHOMQ_TEST_SERVER_URL": url, "ECHOMQ_TEST_SCHEDULES": json.dumps(schedules)})
    worker_procs.append(proc)
    wait_for(lambda: minted(client, queue, "tick"))  # synced at boot and pumping

    client.flushall()  # a restart without persistence, as the metronome sees it
    seconds, micros = client.time()
    flushed_at = int(seconds) * 1000 + int(micros) // 1000
    wait_for(lambda: minted(client, queue, "tick"), timeout=10)
    [(slot, enqueued_at), *_] = minted(client, queue, "tick")
    # The slot after the metronome next woke (at the latest the one after).
    assert flushed_at < slot <= flushed_at + 2 * every_ms
    assert enqueued_at >= slot
    assert Repeat(client).get(queue, "tick").every_ms == every_ms
    assert client.exists(Keyspace(queue).synced)
    code, out = stop(proc)
    client.close()
    assert code == 0, out
    assert "re-syncing the declared schedules" in out
