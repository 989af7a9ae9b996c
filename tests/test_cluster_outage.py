"""Every node of a cluster down at once, then back: runechomq records the
outcomes of the jobs that ended meanwhile once the cluster answers again, so
none runs twice (docs/protocol.md, "Faults").

While no node answers, redis-py raises ``RedisClusterException`` ("Redis
Cluster cannot be connected"), which is not a ``redis.RedisError``; the
outcome must be repeated like any lost connection until the lease runs out.
A throwaway three-primary cluster of its own, each node with an append-only
file fsynced on every write, so SIGKILL loses nothing the test needs.
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

AOF = ["--appendonly", "yes", "--appendfsync", "always"]


def _aof_on(port) -> bool:
    info = redis.Redis(port=port, decode_responses=True).info("persistence")
    return info["aof_enabled"] == 1 and not info["aof_rewrite_in_progress"] \
        and not info["aof_rewrite_scheduled"]


@pytest.mark.slow
def test_outcomes_ride_out_every_node_down_and_no_job_runs_twice(tmp_path, queue, worker_procs):
    url, procs = start_valkey_cluster(tmp_path / "cluster")
    client = build_client(url, decode_responses=True)
    try:
        for proc in procs:
            node = redis.Redis(port=node_port(proc))
            node.config_set("appendfsync", "always")
            node.config_set("appendonly", "yes")
            node.close()
        for proc in procs:
            wait_for(lambda p=proc: _aof_on(node_port(p)), timeout=20)
        ks = Keyspace(queue)
        log = tmp_path / "runechomq.log"
        # A lease well past the outage, short enough that a job whose outcome
        # was dropped is reaped and run again soon.
        worker = runechomq(queue, "--concurrency", "4", "--lease-ms", "8000", url=url,
                           log_path=log)
        worker_procs.append(worker)
        with override_settings(ECHOMQ={"URL": url}):
            handles = [testjobs.nap.using(queue=queue).enqueue(1500) for _ in range(8)]
        wait_for(lambda: client.zcard(ks.active) == 4, timeout=30)
        for proc in procs:  # every node at once, while 4 jobs run
            proc.kill()
        for proc in procs:
            proc.wait()
        time.sleep(2.0)  # the 4 running jobs end while no node answers
        procs[:] = [subprocess.Popen([*proc.args, *AOF], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    for proc in procs]
        for proc in procs:
            wait_for(lambda p=proc: cluster_ok(node_port(p)), timeout=30)
        rows = lambda: [client.hgetall(ks.job(h.job_id)) for h in handles]  # noqa: E731
        # A dropped outcome leaves its job leased until the reaper runs it
        # again (attempt 2); with every job done and nothing leased, no run
        # is still to come.
        wait_for(lambda: all(row.get("state") == "done" for row in rows())
                 and client.zcard(ks.active) == 0, timeout=40)
        code, out = stop(worker)
        assert code == 0, out[-3000:]
        attempts = {h.job_id: row.get("attempts") for h, row in zip(handles, rows())}
        assert set(attempts.values()) == {"1"}, (attempts, out[-3000:])
        assert [row.get("state") for row in rows()] == ["done"] * 8
        assert client.zcard(ks.dead) == 0
        assert "Traceback" not in out, out[-3000:]
    finally:
        client.close()
        for proc in procs:
            stop_valkey_server(proc)
