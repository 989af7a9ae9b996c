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
- **the enqueue script alone**: ``client.evalsha`` of ``jobs/enqueue`` with
  its keys and arguments made beforehand (fresh ids, the same payload): no
  Python of ours, so what the server's work leaves for the ratio at best;
- **enqueue_many**: the same jobs through ``noop.enqueue_many`` in one
  batch, for the jobs/s a bulk admission reaches.

Rounds interleave the loops; the figures are the medians of the rounds, with
the server's own time per script call (``INFO commandstats``). Prints each
figure and the ratios to the bare EVALSHA (issue 11 asks for at least 85 %
for enqueue). Well under a minute at the defaults.
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
        from echomq_django.protocol import scripts
        from echomq_django.protocol.ids import BrandedId
        from echomq_django.protocol.keyspace import WAKE_CAP, Keyspace

        client = get_connection()
        ks = Keyspace("bench")
        sha = client.script_load("return 1")
        keys = [ks.job("JOB" + "0" * 26), ks.pending, ks.wake]
        bare_args = ["JOB" + "0" * 26, '{"job":"x"}', 100, "", 0]
        n = args.jobs
        enqueue_script = scripts.source("jobs/enqueue")
        client.script_load(enqueue_script.text)
        server_us: dict[str, list[float]] = {"bare": [], "enqueue": [], "script": []}

        def evalsha_us() -> float:
            stats = client.info("commandstats").get("cmdstat_evalsha", {})
            return float(stats.get("usec_per_call", 0.0))

        def bare() -> float:
            client.config_resetstat()
            start = time.perf_counter()
            for _ in range(n):
                client.evalsha(sha, 3, *keys, *bare_args)
            rate = n / (time.perf_counter() - start)
            server_us["bare"].append(evalsha_us())
            return rate

        def enqueue() -> float:
            client.config_resetstat()
            start = time.perf_counter()
            for seq in range(n):
                jobs.noop.enqueue(n, seq, PAD)
            rate = n / (time.perf_counter() - start)
            server_us["enqueue"].append(evalsha_us())
            return rate

        payload = jobs.noop._payload((n, 0, PAD), {})

        def script_alone() -> float:
            calls = [(ks.job(job_id), ks.pending, ks.wake, job_id, payload, WAKE_CAP, "", 0)
                     for job_id in (BrandedId.generate("JOB") for _ in range(n))]
            client.config_resetstat()
            start = time.perf_counter()
            for call in calls:
                client.evalsha(enqueue_script.sha, 3, *call)
            rate = n / (time.perf_counter() - start)
            server_us["script"].append(evalsha_us())
            return rate

        def enqueue_many() -> float:
            calls = [(n, seq, PAD) for seq in range(n)]
            start = time.perf_counter()
            jobs.noop.enqueue_many(calls)
            return n / (time.perf_counter() - start)

        bare(), enqueue()  # warm-up: connection, script load, clock offset
        figures: dict[str, list[float]] = {"bare": [], "enqueue": [], "script": [], "many": []}
        for _ in range(args.rounds):
            figures["bare"].append(bare())
            figures["enqueue"].append(enqueue())
            figures["script"].append(script_alone())
            figures["many"].append(enqueue_many())
            client.execute_command("FLUSHALL", "SYNC")  # the benchmark's own server
        median = {name: statistics.median(values) for name, values in figures.items()}
        print(f"valkey {server.version}, {n} calls per loop, median of {args.rounds} rounds")
        for name, label in (("bare", "bare EVALSHA (3 keys, 5 args)"),
                            ("enqueue", "JobFunction.enqueue"),
                            ("script", "the enqueue script alone"),
                            ("many", f"JobFunction.enqueue_many ({n})")):
            note = (f", server {statistics.median(server_us[name]):.1f} us a call"
                      if server_us.get(name) else "")
            print(f"  {label:34s} {median[name]:9,.0f} /s  (rounds: "
                  f"{', '.join(f'{x:,.0f}' for x in figures[name])}{note})")
        print(f"  enqueue / bare EVALSHA = {median['enqueue'] / median['bare']:.0%}; "
              f"the script alone / bare EVALSHA = {median['script'] / median['bare']:.0%}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
