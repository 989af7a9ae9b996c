"""An idle runechomq costs the server at most 2 commands a second per queue,
the metronome and the announcement included (docs/protocol.md, "Consumer").

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

from echomq_django.protocol import keyspace
from echomq_django.protocol.keyspace import Keyspace
from tests.procs import runechomq, stop, wait_for

#: The limit, per idle queue and second.
LIMIT_PER_QUEUE_S = 2.0
#: How long the count runs (s): the metronome's longest sleep, so the window
#: holds one horizon per queue and three announcements, as any other would.
WINDOW_S = 30.0


def _calls(client) -> dict[str, int]:
    return {name[len("cmdstat_"):]: stat["calls"]
            for name, stat in client.info("commandstats").items()}


def _idle(client, queues: list[str], pid: int) -> bool:
    blocked = int(client.info("clients")["blocked_clients"])
    announced = client.exists(keyspace.worker(f"{socket.gethostname()}:{pid}"))
    planned = all(client.exists(Keyspace(q).beat_at) for q in queues)
    return blocked == len(queues) + 1 and announced and planned


@pytest.mark.slow
def test_an_idle_runechomq_costs_at_most_2_commands_a_second_per_queue(start_valkey,
                                                                       worker_procs):
    runs = {}
    for count in (1, 4):
        url, _ = start_valkey()
        queues = [f"idle-{count}-{i}" for i in range(count)]
        proc = runechomq(*queues, url=url)
        worker_procs.append(proc)
        runs[count] = (redis.Redis.from_url(url, decode_responses=True), queues, proc)
    for client, queues, proc in runs.values():
        wait_for(lambda: _idle(client, queues, proc.pid), timeout=30)
    before = {count: _calls(client) for count, (client, _, _) in runs.items()}
    started = time.monotonic()
    time.sleep(WINDOW_S)
    after = {count: _calls(client) for count, (client, _, _) in runs.items()}
    elapsed = time.monotonic() - started
    for count, (client, _, proc) in runs.items():
        spent = {name: calls - before[count].get(name, 0)
                 for name, calls in after[count].items()}
        spent["info"] -= 1  # the count's own second INFO
        spent = {name: calls for name, calls in spent.items() if calls}
        per_queue_s = sum(spent.values()) / elapsed / count
        assert per_queue_s <= LIMIT_PER_QUEUE_S, (count, per_queue_s, spent)
        # Idle consumers never claim on a timer (claim reads the limits with
        # HMGET), and an idle metronome only reads its horizon (promote, reap
        # and the pump's due read a range by score).
        assert "hmget" not in spent and "zrangebyscore" not in spent, (count, spent)
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
