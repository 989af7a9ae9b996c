"""An idle runechomq costs the server at most 2 commands a second per queue,
the metronome (its per-minute latency sample too) and the announcement
included (docs/protocol.md, "Consumer").

Each runechomq runs against a server of its own (the ``start_valkey``
fixture), so ``INFO commandstats`` counts its commands alone, those its
scripts run included. The count starts once the process is idle: its
fetcher and every queue's metronome listener are blocked, it has announced
itself and every queue's metronome has stored its plan.
"""

from __future__ import annotations

import socket
import time

import pytest
import redis

from echomq_django import Jobs
from echomq_django.connection import block_timeout_s
from echomq_django.protocol import keyspace
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.protocol.presence import Presence
from echomq_django.runtime.consumer import IDLE_BLOCK_S
from echomq_django.runtime.lease_keeper import ANNOUNCE_TTL_MS, IDLE_ANNOUNCE_S
from echomq_django.runtime.metronome import LISTEN_BLOCK_S, MAX_SLEEP_S
from tests.procs import runechomq, stop, wait_for

#: The limit, per idle queue and second.
LIMIT_PER_QUEUE_S = 2.0
#: The live window (s): shorter than every idle period (the idle
#: announcement's 10 s, the metronome's 30 s), so it shows that nothing else
#: runs; what runs once per period is counted per event below, and the
#: 30-s reading of the whole is benchmarks/hotpath.py's "idle" section.
WINDOW_S = 3.0


def _calls(client) -> dict[str, int]:
    return {name[len("cmdstat_"):]: stat["calls"]
            for name, stat in client.info("commandstats").items()}


def _spent(client, action) -> dict[str, int]:
    """The commands ``action()`` costs the server (INFO's own call left out)."""
    before = _calls(client)
    action()
    spent = {name: calls - before.get(name, 0) for name, calls in _calls(client).items()}
    spent["info"] -= 1
    return {name: calls for name, calls in spent.items() if calls}


def _minute(client) -> int:
    seconds, _ = client.time()
    return int(seconds) // 60


def _idle(client, queues: list[str], pid: int) -> bool:
    blocked = int(client.info("clients")["blocked_clients"])
    announced = client.exists(keyspace.worker(f"{socket.gethostname()}:{pid}"))
    planned = all(client.exists(Keyspace(q).beat_at) for q in queues)
    # The first tick samples the latency right after it plans: wait for it.
    sampled = all(client.exists(Keyspace(q).latency) for q in queues)
    return blocked == len(queues) + 1 and announced and planned and sampled


@pytest.mark.slow
def test_an_idle_runechomq_costs_at_most_2_commands_a_second_per_queue(start_valkey,
                                                                       worker_procs):
    """Idle, a runechomq sends only its periodic few: per process an
    announcement every IDLE_ANNOUNCE_S and the fetcher's BLPOP again every
    block; per queue one horizon per MAX_SLEEP_S and the listener's BLPOP
    again every LISTEN_BLOCK_S. A live window on 1 and on 4 queues (each on a
    server of its own) shows nothing else runs, no claim and no beat; each
    periodic event's cost is measured on the server; their sum per second,
    per queue, is under the limit."""
    runs, urls = {}, {}
    for count in (1, 4):
        url, _ = start_valkey()
        urls[count] = url
        queues = [f"idle-{count}-{i}" for i in range(count)]
        proc = runechomq(*queues, url=url)
        worker_procs.append(proc)
        runs[count] = (redis.Redis.from_url(url, decode_responses=True), queues, proc)
    for client, queues, proc in runs.values():
        wait_for(lambda: _idle(client, queues, proc.pid), timeout=30)
    minute_before = {count: _minute(client) for count, (client, _, _) in runs.items()}
    before = {count: _calls(client) for count, (client, _, _) in runs.items()}
    time.sleep(WINDOW_S)
    for count, (client, queues, proc) in runs.items():
        spent = {name: calls - before[count].get(name, 0)
                 for name, calls in _calls(client).items()}
        spent["info"] -= 1
        spent = {name: calls for name, calls in spent.items() if calls}
        # Idle consumers never claim on a timer (claim reads the limits with
        # HMGET), and an idle metronome beats nothing (promote, reap and the
        # pump's due read a range by score); the window is too short for a
        # horizon; at most one announcement (EVALSHA and its five commands)
        # and the fetcher's BLPOP again; and when the window crossed a server
        # minute, each queue's latency sample (and the horizon read before it).
        sample = sum(_spent(client, lambda: Jobs(client).sample_latency(
            f"idle-sample-{count}")).values())
        horizon = sum(_spent(client, lambda: Jobs(client).horizon(
            queues[0], int(MAX_SLEEP_S * 1000), nudge=True)).values())
        crossed = _minute(client) != minute_before[count]
        assert "hmget" not in spent and "zrangebyscore" not in spent, (count, spent)
        assert sum(spent.values()) <= 6 + 1 + crossed * count * (sample + horizon), (count, spent)
        # The periodic events, each measured on this server.
        worker = f"{socket.gethostname()}:{proc.pid}"
        announce = sum(_spent(client, lambda: Presence(client).announce(
            worker, {"host": "x", "busy": 0}, queues, ttl_ms=ANNOUNCE_TTL_MS)).values())
        # The fetcher's block, on a client built as runechomq builds its own.
        block_s = block_timeout_s(redis.Redis.from_url(urls[count]), IDLE_BLOCK_S)
        per_process_s = announce / IDLE_ANNOUNCE_S + 1 / block_s
        per_queue_s = (horizon + 1) / MAX_SLEEP_S + 1 / LISTEN_BLOCK_S + sample / 60
        rate = (per_process_s + count * per_queue_s) / count
        assert rate <= LIMIT_PER_QUEUE_S, (count, rate, announce, horizon, block_s)
        code, out = stop(proc)
        assert code == 0, out


def test_a_renewed_announcement_is_six_commands_and_the_first_sweeps(start_valkey):
    from echomq_django.protocol.presence import Presence

    url, _ = start_valkey()
    client = redis.Redis.from_url(url, decode_responses=True)
    presence = Presence(client)
    seconds, _ = client.time()
    client.zadd(keyspace.WORKERS, {"gone:1": 1})           # crashed long ago
    client.zadd(keyspace.QUEUES, {"gone-q": 1})
    queues = [f"q{i}" for i in range(20)]
    presence.announce("box:1", {"host": "box", "busy": 0}, queues, ttl_ms=30_000)
    assert client.zrange(keyspace.WORKERS, 0, -1) == ["box:1"]   # the first swept them
    assert "gone-q" not in client.zrange(keyspace.QUEUES, 0, -1)
    client.zadd(keyspace.WORKERS, {"gone:2": 1})
    before = _calls(client)
    presence.announce("box:1", {"host": "box", "busy": 0}, queues, ttl_ms=30_000)
    spent = {name: calls - before.get(name, 0) for name, calls in _calls(client).items()}
    spent["info"] -= 1
    assert sum(spent.values()) == 6, spent   # EVALSHA, TIME, HSET, PEXPIRE, ZADD, ZADD
    assert client.zscore(keyspace.WORKERS, "gone:2") == 1      # a renewal does not sweep
    assert client.zscore(keyspace.QUEUES, "q19") >= int(seconds) * 1000
    presence.retire("box:1")
