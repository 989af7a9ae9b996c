"""The metrics view at scale: a scrape's time at a million scheduled jobs.

Usage::

    .venv/bin/python benchmarks/metrics_scale.py [--schedule 1000000] [--pending 200000]
                                                 [--lanes 10000] [--runs 20]

Starts its OWN valkey-server (benchmarks/admin_scale.py's, on a free port in
a temporary directory) and seeds one queue as admin_scale does (scheduled
jobs spread over the next 24 h, pending jobs in the ungrouped lane, one job
in each of ``--lanes`` lanes, 10,000 dead letters, 500 leases, 50 recurring
schedules). Then scrapes ``/echomq/metrics`` through Django's test client
with the bearer token, ``--runs`` times after one warm-up (which loads the
script), and prints the median and worst wall time of a scrape (the view:
both round trips, the gauges script, the text format), the time the server
spent (INFO commandstats, scripts' inner commands included) and the commands
one scrape runs. The server is stopped and its directory removed at the end.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.admin_scale import QUEUE, command_calls, seed, start_server  # noqa: E402

TOKEN = "benchmark-token-0123456789"


def configure_django(url: str) -> None:
    import django
    from django.conf import settings

    settings.configure(
        DEBUG=False, SECRET_KEY="benchmark-only", ALLOWED_HOSTS=["testserver"], USE_TZ=True,
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "echomq_django"],
        MIDDLEWARE=[], ROOT_URLCONF="echomq_django.urls",
        ECHOMQ={"URL": url, "QUEUES": [QUEUE], "METRICS_TOKEN": TOKEN})
    django.setup()


def server_usec(client) -> float:
    stats = client.info("commandstats")
    return sum(v["usec"] for k, v in stats.items() if k != "cmdstat_info")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", type=int, default=1_000_000)
    parser.add_argument("--pending", type=int, default=200_000)
    parser.add_argument("--lanes", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=20)
    options = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="echomq-metrics-")
    url, proc = start_server(directory)
    try:
        import redis

        configure_django(url)
        from django.test import Client

        redis_client = redis.Redis.from_url(url)
        print(f"seeding {options.schedule:,} scheduled, {options.pending:,} pending, "
              f"{options.lanes:,} lanes ...", flush=True)
        seed(redis_client, options.schedule, options.pending, options.lanes)
        http = Client()
        headers = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
        assert http.get("/metrics", **headers).status_code == 200   # warm-up: loads the script
        walls, server = [], []
        for _ in range(options.runs):
            before_calls, before_usec = command_calls(redis_client), server_usec(redis_client)
            started = time.perf_counter()
            response = http.get("/metrics", **headers)
            walls.append((time.perf_counter() - started) * 1000)
            server.append((server_usec(redis_client) - before_usec) / 1000)
            after_calls = command_calls(redis_client)
            assert response.status_code == 200
        commands = sum(after_calls.get(k, 0) - before_calls.get(k, 0)
                       for k in after_calls if k != "info")
        body = response.content.decode()
        print(f"scrape of /metrics at {redis_client.zcard('emq:{%s}:schedule' % QUEUE):,} "
              f"scheduled jobs ({options.runs} runs): median {statistics.median(walls):.1f} ms, "
              f"worst {max(walls):.1f} ms wall; server {statistics.median(server):.2f} ms "
              f"median; {commands} commands per scrape (scripts' inner commands included)")
        for line in body.splitlines():
            if line.startswith(("echomq_queue_latency", "echomq_queue_schedule_lag")):
                print("  " + line)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
