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
- **the writes alone**: :data:`WRITES_ALONE`, the server commands an enqueue
  of an ungrouped job sends (the duplicate check, the clock, the row, the
  pending set, the lane's two counters, the wake marker) with no argument
  checks, no helpers and the payload in one field, called like the script
  alone: the floor any enqueue that keeps the protocol's books stands on;
- **enqueue_many**: the same jobs through ``noop.enqueue_many`` in one
  batch, for the jobs/s a bulk admission reaches.

Within a round the four one-call-at-a-time loops take turns in blocks of 50
calls, so a slow spell of the machine falls on all of them alike; each
ratio to the bare EVALSHA is taken within a round, and the figures are the
medians of the rounds, with the server's own time per script call (``INFO
commandstats``, from 500 more calls of each). Prints each figure and the
ratios (issue 11 asks for at least 85 % for enqueue). About 40 s at the
defaults.
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

#: The commands of an ungrouped ``jobs/enqueue`` and nothing else (not
#: shipped: it checks nothing, so a garbage argument would be written).
WRITES_ALONE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'state', 'pending', 'enqueued_at_ms',
  math.floor(t[1] * 1000 + t[2] / 1000), 'payload', ARGV[2])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
local base = string.sub(KEYS[2], 1, #KEYS[2] - #'pending')
redis.call('INCR', base .. 'lanes_total')
redis.call('ZINCRBY', base .. 'lanes', 1, '')
if redis.call('LPUSH', KEYS[3], '1') > tonumber(ARGV[3]) then
  redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[3]) - 1)
end
return 1
"""


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
        writes_sha = client.script_load(WRITES_ALONE)
        server_us: dict[str, list[float]] = {"bare": [], "enqueue": [], "script": [],
                                             "writes": []}

        def evalsha_us() -> float:
            stats = client.info("commandstats").get("cmdstat_evalsha", {})
            return float(stats.get("usec_per_call", 0.0))

        payload = jobs.noop._payload((n, 0, PAD), {})

        # Each loop is a callable that makes `count` calls of its kind; the
        # arguments of a prepared script are made before the clock starts.
        def bare(count: int) -> float:
            start = time.perf_counter()
            for _ in range(count):
                client.evalsha(sha, 3, *keys, *bare_args)
            return time.perf_counter() - start

        def enqueue(count: int) -> float:
            start = time.perf_counter()
            for seq in range(count):
                jobs.noop.enqueue(n, seq, PAD)
            return time.perf_counter() - start

        def prepared(script_sha: str):
            def loop(count: int) -> float:
                calls = [(ks.job(job_id), ks.pending, ks.wake, job_id, payload, WAKE_CAP, "", 0)
                         for job_id in (BrandedId.generate("JOB") for _ in range(count))]
                start = time.perf_counter()
                for call in calls:
                    client.evalsha(script_sha, 3, *call)
                return time.perf_counter() - start
            return loop

        loops = {"bare": bare, "enqueue": enqueue, "script": prepared(enqueue_script.sha),
                 "writes": prepared(writes_sha)}

        def enqueue_many() -> float:
            calls = [(n, seq, PAD) for seq in range(n)]
            start = time.perf_counter()
            jobs.noop.enqueue_many(calls)
            return n / (time.perf_counter() - start)

        bare(500), enqueue(500)  # warm-up: connection, script load, clock offset
        figures: dict[str, list[float]] = {name: [] for name in (*loops, "many")}
        block = 50
        for _ in range(args.rounds):
            # The loops take turns in blocks of 50 calls, so a slow spell of
            # this noisy machine falls on all of them alike.
            elapsed = dict.fromkeys(loops, 0.0)
            for _ in range(n // block):
                for name, loop in loops.items():
                    elapsed[name] += loop(block)
            for name in loops:
                figures[name].append(n // block * block / elapsed[name])
            for name, loop in loops.items():  # the server's own time a call
                client.config_resetstat()
                loop(500)
                server_us[name].append(evalsha_us())
            figures["many"].append(enqueue_many())
            client.execute_command("FLUSHALL", "SYNC")  # the benchmark's own server
        median = {name: statistics.median(values) for name, values in figures.items()}
        ratio = {name: statistics.median(x / b for x, b in zip(figures[name], figures["bare"]))
                 for name in loops}
        print(f"valkey {server.version}, {n} calls per loop (in turns of {block}), "
              f"median of {args.rounds} rounds")
        for name, label in (("bare", "bare EVALSHA (3 keys, 5 args)"),
                            ("enqueue", "JobFunction.enqueue"),
                            ("script", "the enqueue script alone"),
                            ("writes", "the writes alone (no checks)"),
                            ("many", f"JobFunction.enqueue_many ({n})")):
            note = (f", server {statistics.median(server_us[name]):.1f} us a call, "
                    f"{ratio[name]:.0%} of bare" if name in loops else "")
            print(f"  {label:34s} {median[name]:9,.0f} /s  (rounds: "
                  f"{', '.join(f'{x:,.0f}' for x in figures[name])}{note})")
        print(f"  of a bare EVALSHA (median of the rounds' ratios): enqueue "
              f"{ratio['enqueue']:.0%}, the script alone {ratio['script']:.0%}, "
              f"the writes alone {ratio['writes']:.0%}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
