"""EchoMQ on a Redis (Valkey) cluster (issue 15): every queue lives in the slot
of its ``{hash tag}``, so queues spread over the primaries, and one runechomq
serves queues on every node (docs/protocol.md, "Cluster").

These tests need the session's server to be a cluster: run the suite with
ECHOMQ_TEST_CLUSTER=1 (tests/conftest.py). On one server they skip.
"""

from __future__ import annotations

import time

import pytest
from redis.crc import key_slot

from echomq_django import Jobs
from echomq_django.protocol.keyspace import Keyspace
from tests.nodes import primaries
from tests.procs import runechomq, stop, wait_for
from tests.testapp import jobs as testjobs

#: What redis-py and the server say when one command names keys of several slots.
CROSS_SLOT = ("CROSSSLOT", "same key slot")


@pytest.fixture(autouse=True)
def cluster_only(valkey_url):
    if "+cluster://" not in valkey_url:
        pytest.skip("needs the suite on a cluster: ECHOMQ_TEST_CLUSTER=1 ./dev test")


def _owners(redis_client, queues) -> dict[str, str]:
    """queue -> "host:port" of the primary owning its slot, as the cluster's
    own CLUSTER SLOTS map says (asked of a node, not computed by redis-py)."""
    ranges = [(int(start), int(end), f"{primary[0]}:{primary[1]}")
              for start, end, primary, *_ in primaries(redis_client)[0].cluster("SLOTS")]
    owners = {}
    for queue in queues:
        slot = int(primaries(redis_client)[0].cluster("KEYSLOT", Keyspace(queue).pending))
        assert slot == key_slot(Keyspace(queue).pending.encode())
        [owner] = [node for start, end, node in ranges if start <= slot <= end]
        owners[queue] = owner
    return owners


def _queues_on_every_node(redis_client, prefix: str, per_node: int = 1) -> list[str]:
    """``per_node`` queue names ``<prefix>-q-NNN`` owned by each primary."""
    names = [f"{prefix}-q-{n:03d}" for n in range(100)]
    owners = _owners(redis_client, names)
    picked = []
    for node in sorted(set(owners.values())):
        picked += [q for q in names if owners[q] == node][:per_node]
    return picked


@pytest.mark.slow
def test_100_queues_spread_over_every_primary_and_one_runechomq_runs_each_job_once(
        conn, redis_client, queue, worker_procs, tmp_path):
    queues = [f"{queue}-q-{n:03d}" for n in range(100)]
    nodes = primaries(redis_client)
    assert len(nodes) == 3
    key = f"{queue}:runs"
    handles = {q: [testjobs.tally.using(queue=q).enqueue(key) for _ in range(3)]
               for q in queues}
    # Where the queues' keys are: each queue's pending set on exactly one
    # primary (KEYS on each), the one the cluster's slot map names; every
    # primary holds some.
    owners = _owners(redis_client, queues)
    held = {q: [] for q in queues}
    for node in nodes:
        where = f"{node.get_connection_kwargs()['host']}:{node.get_connection_kwargs()['port']}"
        for pending in node.keys(f"emq:{{{queue}-q-*}}:pending"):
            held[pending[len("emq:{"):-len("}:pending")]].append(where)
    assert held == {q: [owners[q]] for q in queues}
    assert len(set(owners.values())) == 3, sorted(set(owners.values()))

    log = tmp_path / "runechomq.log"
    proc = runechomq(*queues, "--concurrency", "8", log_path=log)
    worker_procs.append(proc)
    jobs = Jobs(conn)
    every = [(q, h.job_id) for q, hs in handles.items() for h in hs]
    try:
        wait_for(lambda: redis_client.scard(key) == len(every), timeout=60)
        wait_for(lambda: all(jobs.get(q, j).state == "done" for q, j in every), timeout=30)
    except AssertionError:
        raise AssertionError(f"{redis_client.scard(key)} of {len(every)} jobs ran; "
                             f"runechomq's log:\n{log.read_text()[-4000:]}") from None
    code, out = stop(proc)
    assert code == 0, out[-4000:]
    runs = testjobs.tally_runs(redis_client, key)
    assert sorted(runs) == sorted(j for _, j in every)          # none lost
    assert [j for j, n in runs.items() if n != 1] == []         # none ran twice
    assert [w for w in CROSS_SLOT if w in out] == [], out[-4000:]
    assert "Traceback" not in out, out[-4000:]


@pytest.mark.slow
def test_an_idle_runechomq_on_queues_of_every_node_wakes_at_once_for_any_of_them(
        conn, redis_client, queue, worker_procs, tmp_path):
    """One queue per primary, one consumer for all three, idle: work that
    comes to any of them starts within a second of its admission (server
    clock), not when a blocking wait on another node's queues times out
    (IDLE_BLOCK_S, 30 s)."""
    queues = _queues_on_every_node(redis_client, queue)
    assert len(queues) == 3
    key = f"{queue}:runs"
    log = tmp_path / "runechomq.log"
    proc = runechomq(*queues, "--concurrency", "2", log_path=log)
    worker_procs.append(proc)
    jobs = Jobs(conn)
    # Ready: it has run a job of each queue.
    warm = [(q, testjobs.tally.using(queue=q).enqueue(key).job_id) for q in queues]
    wait_for(lambda: all(jobs.get(q, j).state == "done" for q, j in warm), timeout=30)
    # Each queue in turn, twice (the last queue served is not always the one
    # the wait began on), after the consumer has been idle for a second: long
    # enough to be in its blocking wait, far shorter than that wait's 30 s.
    waits = {}
    for q in queues * 2:
        time.sleep(1.0)
        handle = testjobs.tally.using(queue=q).enqueue(key)
        wait_for(lambda: jobs.get(q, handle.job_id).state == "done", timeout=40)
        row = jobs.get(q, handle.job_id)
        waits.setdefault(q, []).append(row.started_at_ms - row.enqueued_at_ms)
    code, out = stop(proc)
    assert code == 0, out[-4000:]
    assert {q: max(w) for q, w in waits.items() if max(w) >= 1000} == {}, waits
    assert [w for w in CROSS_SLOT if w in out] == [], out[-4000:]
