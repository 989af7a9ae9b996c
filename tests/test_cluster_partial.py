"""One cluster node down: runechomq goes on serving the queues of the others
(runtime/claim_round.py; scripts loaded only where they run), and its log
does not flap.

A throwaway three-primary cluster of its own (``cluster-require-full-coverage
no``, so the other primaries answer for their slots while one is down), so
the test runs whatever the session's server is.
"""

from __future__ import annotations

import subprocess
import time

import pytest
import redis
from django.test import override_settings

from echomq_django.connection.urls import build_client
from echomq_django.protocol.keyspace import Keyspace
from tests.conftest import cluster_ok, node_port, start_valkey_cluster, stop_valkey_server
from tests.procs import runechomq, stop, wait_for
from tests.testapp import jobs as testjobs


@pytest.mark.slow
def test_a_dead_node_does_not_stall_the_queues_of_the_others(tmp_path, queue, worker_procs):
    url, procs = start_valkey_cluster(tmp_path / "cluster")
    client = build_client(url, decode_responses=True)
    try:
        for proc in procs:
            redis.Redis(port=node_port(proc)).config_set("cluster-require-full-coverage", "no")
        names = [f"{queue}-{n}" for n in range(200)]
        port_of = {q: client.get_node_from_key(Keyspace(q).base).port for q in names}
        # The dead node's queue comes first: the consumer asks it first.
        dead_port = node_port(procs[0])
        dead = next(q for q in names if port_of[q] == dead_port)
        alive = next(q for q in names if port_of[q] != dead_port)
        key = f"{{{alive}}}:runs"                  # the tallies live in the live queue's slot
        log = tmp_path / "runechomq.log"
        worker = runechomq(dead, alive, "--concurrency", "4", url=url, log_path=log)
        worker_procs.append(worker)
        with override_settings(ECHOMQ={"URL": url}):
            warm = testjobs.tally.using(queue=alive).enqueue(key)
            wait_for(lambda: client.sismember(key, warm.job_id), timeout=30)
            dead_proc = procs[0]
            dead_proc.kill()
            dead_proc.wait()
            handles = [testjobs.tally.using(queue=alive).enqueue(key) for _ in range(20)]
            started = time.monotonic()
            try:
                wait_for(lambda: client.scard(key) == 21, timeout=8)
            except AssertionError:
                raise AssertionError(f"{client.scard(key) - 1} of 20 ran in 8 s with a node "
                                     f"down; runechomq's log:\n{log.read_text()[-3000:]}") from None
            took = time.monotonic() - started
            procs[0] = subprocess.Popen(dead_proc.args, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_for(lambda: cluster_ok(dead_port), timeout=30)
            # Back: the dead node's queue is served again.
            late = testjobs.tally.using(queue=dead).enqueue(key)
            wait_for(lambda: client.sismember(key, late.job_id), timeout=30)
        code, out = stop(worker)
        assert code == 0, out[-3000:]
        runs = testjobs.tally_runs(client, key)
        assert sorted(runs) == sorted([warm.job_id, late.job_id, *(h.job_id for h in handles)])
        assert [j for j, n in runs.items() if n != 1] == []
        # No flapping: at most one outage logged (whether a partial outage
        # is logged at all depends on whether failures ran on for 0.5 s with
        # no success between), and at most one end.
        assert out.count("is unavailable (") <= 1, out[-3000:]
        assert out.count("is available again") <= out.count("is unavailable ("), out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        print(f"20 jobs of the live node ran in {took:.2f} s with a node down")
    finally:
        client.close()
        for proc in procs:
            stop_valkey_server(proc)
