"""What a claim costs the server as the number of ready lanes grows.

    python benchmarks/lanes.py [--lanes 1,10,100,1000,10000] [--claims 2000]

On its own valkey-server (harness.Server): for each lane count L, fills L
lanes (groups) with enough jobs that every claim finds a ready lane, resets
the server's command statistics, runs ``--claims`` single-job claims
(``Jobs.claim``, the claim script) and reads the server's own time per call
(``INFO commandstats``, ``usec_per_call`` of EVALSHA: the script's work,
without the network). Also with a lane concurrency cap and a lane rate set
(the limits each claim reads). Prints a table and the ratio of the largest
lane count to the smallest: the ring of ready lanes keeps a claim's cost flat
(O(log L)), where a scan of the lanes would grow with L.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import Server  # noqa: E402


def fill(client, queue: str, lanes: int, per_lane: int) -> None:
    from echomq_django.protocol import scripts
    from echomq_django.protocol.ids import BrandedId
    from echomq_django.protocol.keyspace import WAKE_CAP, Keyspace

    ks = Keyspace(queue)
    payload = json.dumps({"job": "benchmarks.jobs.noop", "args": [0, 0, ""], "kwargs": {}})
    pipe = client.pipeline(transaction=False)
    for index in range(lanes * per_lane):
        job_id = BrandedId.generate()
        scripts._script(client, "jobs/enqueue")(
            keys=[ks.job(job_id), ks.pending, ks.wake],
            args=[job_id, payload, WAKE_CAP, f"lane-{index % lanes}", 0], client=pipe)
        if len(pipe) >= 1000:
            pipe.execute()
    pipe.execute()


def evalsha_usec(client) -> float:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return float(stats.get("usec_per_call", 0.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", default="1,10,100,1000,10000")
    parser.add_argument("--claims", type=int, default=2000)
    args = parser.parse_args()
    lane_counts = [int(x) for x in args.lanes.split(",")]

    import os

    import django
    import redis

    server = Server()
    try:
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.bench_settings"
        django.setup()
        from echomq_django import Jobs

        client = redis.Redis.from_url(server.url)
        jobs = Jobs(client)
        print(f"claim cost on valkey {server.version}, {args.claims} claims per row "
              "(server time per claim script, usec)")
        print(f"{'ready lanes':>12} {'no limits':>10} {'cap+rate':>10}")
        rows = []
        for lanes in lane_counts:
            figures = []
            for limited in (False, True):
                queue = f"lanes-{lanes}-{int(limited)}"
                per_lane = max(2, -(-args.claims * 2 // lanes))
                fill(client, queue, lanes, per_lane)
                if limited:
                    jobs.set_limits(queue, lane_concurrency=10**6, lane_rate=(10**6, 1000))
                client.config_resetstat()
                for _ in range(args.claims):
                    assert jobs.claim(queue, "bench", 600_000) is not None
                figures.append(evalsha_usec(client))
                client.flushdb()
            rows.append((lanes, *figures))
            print(f"{lanes:>12} {figures[0]:>10.1f} {figures[1]:>10.1f}")
        low, high = rows[0], rows[-1]
        print(f"ratio {high[0]} lanes / {low[0]} lane: no limits {high[1] / low[1]:.2f}x, "
              f"cap+rate {high[2] / low[2]:.2f}x")
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
