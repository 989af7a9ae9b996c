"""A queue rate held across processes and skewed clocks, at full scale.

    python benchmarks/limits.py [--seconds 180] [--per-ms 60000] [--count 10]
                                [--processes 4] [--concurrency 4] [--jobs 100] [--skew]

On its own valkey-server (harness.Server): sets the queue's rate to
``--count`` per ``--per-ms``, enqueues ``--jobs`` ready jobs, starts
``--processes`` runechomq processes of ``--concurrency`` threads (with
``--skew``, two of them under Debian's ``faketime``, 300 s ahead and 300 s
behind), lets them run ``--seconds`` and prints every claim instant (the
rows' ``started_at_ms``, on the server clock), the most claims in any window
of ``--per-ms``, and the total. The promise it checks: at most twice the
count in any window (a full bucket, then a bucket's worth of refill), and at
least the bucket plus the refill over the run minus two (the limiter never
stalls). Exit code 0 when it held. The test suite runs the same scenario 40x
faster (tests/test_lanes.py); this is the issue's own scale.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import BIN, Child, Server  # noqa: E402
from example_project.notifications.measure import most_in_window  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--per-ms", type=int, default=60_000)
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--skew", action="store_true",
                        help="run two of the processes 300 s ahead and behind (faketime)")
    args = parser.parse_args()
    if args.skew and not shutil.which("faketime"):
        print("skipped: --skew needs Debian's faketime (apt-get install faketime)")
        return 0

    import django
    import redis

    server = Server()
    logs = tempfile.mkdtemp(prefix="echomq-limits-")
    try:
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.bench_settings"
        os.environ["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        django.setup()
        from echomq_django import BrandedId, Jobs

        client = redis.Redis.from_url(server.url, decode_responses=True)
        jobs = Jobs(client)
        jobs.set_limits("limits", rate=(args.count, args.per_ms))
        payload = json.dumps({"job": "benchmarks.jobs.noop", "args": [0, 0, ""], "kwargs": {}})
        ids = [BrandedId.generate() for _ in range(args.jobs)]
        for job_id in ids:
            jobs.enqueue("limits", job_id, payload)
        workers = []
        for index in range(args.processes):
            wrap = []
            if args.skew and index < 2:
                wrap = ["faketime", "-f", "+300s" if index == 0 else "-300s"]
            workers.append(Child([*wrap, str(BIN / "python"), "-m", "django", "runechomq",
                                  "limits", "--concurrency", str(args.concurrency)],
                                 logs, f"worker-{index}"))
        time.sleep(args.seconds)
        for worker in workers:
            worker.stop()
        starts = []
        for job_id in ids:
            row = jobs.get("limits", job_id)
            if row and row.started_at_ms:
                starts.append(row.started_at_ms)
        first = min(starts) if starts else 0
        in_run = [s for s in starts if s < first + args.seconds * 1000]
        most = most_in_window(starts, args.per_ms)
        floor = args.count + int(args.seconds * 1000 / args.per_ms * args.count) - 2
        print(f"rate {args.count} per {args.per_ms} ms on valkey {server.version}: "
              f"{args.processes} processes x {args.concurrency} threads"
              + (" (two with clocks 300 s ahead and behind)" if args.skew else "")
              + f", {args.jobs} jobs ready, {args.seconds:.0f} s")
        print(f"  claims: {len(in_run)} (at least {floor} expected); most in any "
              f"{args.per_ms} ms window: {most} (at most {2 * args.count} allowed)")
        print("  claim instants (s after the first): "
              + ", ".join(f"{(s - first) / 1000:.1f}" for s in sorted(in_run)))
        held = most <= 2 * args.count and len(in_run) >= floor
        print("  " + ("held" if held else "BROKEN") + f"; worker logs in {logs}")
        return 0 if held else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
