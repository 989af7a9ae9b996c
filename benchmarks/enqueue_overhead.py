"""What one ``JobFunction.enqueue`` costs against a bare EVALSHA round trip.

    python benchmarks/enqueue_overhead.py [--jobs 5000] [--rounds 3]

On its own valkey-server (harness.Server), from one redis-py client (the
project's ``get_connection()``), one call at a time, no pipelining:

- **bare EVALSHA**: ``client.evalsha(sha, 3, k1, k2, k3, a1, ..., a5)`` of the
  script ``return 1``, with as many keys and arguments as ``jobs/enqueue``
  takes: the floor of a round trip through redis-py (packing, pool, socket,
  parsing) with nothing of ours in it;
- **enqueue**: ``benchmarks.jobs.noop.enqueue(total, seq, PAD)``, the
  ordinary API (payload envelope and its checks, the signature check, a
  server-clock id, the enqueue script), the same arguments as
  throughput.py's (two ints and a 100-character string);
- **enqueue_many**: the same jobs through ``noop.enqueue_many`` in one
  batch, for the jobs/s a bulk admission reaches.

Rounds interleave the two single-call loops; the figures are the medians of
the rounds. Prints each figure and the ratio enqueue / bare EVALSHA (issue
11 asks for at least 85 %). Well under a minute at the defaults.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import PAD, Server  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    server = Server()
    try:
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.bench_settings"
        import django

        django.setup()
        from benchmarks import jobs
        from echomq_django.connection import get_connection
        from echomq_django.protocol.keyspace import Keyspace

        client = get_connection()
        ks = Keyspace("bench")
        sha = client.script_load("return 1")
        keys = [ks.job("JOB" + "0" * 26), ks.pending, ks.wake]
        bare_args = ["JOB" + "0" * 26, '{"job":"x"}', 100, "", 0]
        n = args.jobs

        def bare() -> float:
            start = time.perf_counter()
            for _ in range(n):
                client.evalsha(sha, 3, *keys, *bare_args)
            return n / (time.perf_counter() - start)

        def enqueue() -> float:
            start = time.perf_counter()
            for seq in range(n):
                jobs.noop.enqueue(n, seq, PAD)
            return n / (time.perf_counter() - start)

        def enqueue_many() -> float:
            calls = [(n, seq, PAD) for seq in range(n)]
            start = time.perf_counter()
            jobs.noop.enqueue_many(calls)
            return n / (time.perf_counter() - start)

        bare(), enqueue()  # warm-up: connection, script load, clock offset
        figures: dict[str, list[float]] = {"bare": [], "enqueue": [], "many": []}
        for _ in range(args.rounds):
            figures["bare"].append(bare())
            figures["enqueue"].append(enqueue())
            figures["many"].append(enqueue_many())
            client.execute_command("FLUSHALL", "SYNC")  # the benchmark's own server
        bare_s = statistics.median(figures["bare"])
        enq_s = statistics.median(figures["enqueue"])
        many_s = statistics.median(figures["many"])
        print(f"valkey {server.version}, {n} calls per loop, median of {args.rounds} rounds")
        print(f"  bare EVALSHA (3 keys, 5 args)   {bare_s:9,.0f} /s  "
              f"(rounds: {', '.join(f'{x:,.0f}' for x in figures['bare'])})")
        print(f"  JobFunction.enqueue             {enq_s:9,.0f} /s  "
              f"(rounds: {', '.join(f'{x:,.0f}' for x in figures['enqueue'])})")
        print(f"  JobFunction.enqueue_many ({n})  {many_s:9,.0f} jobs/s  "
              f"(rounds: {', '.join(f'{x:,.0f}' for x in figures['many'])})")
        print(f"  enqueue / bare EVALSHA = {enq_s / bare_s:.0%}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
