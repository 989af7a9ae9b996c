"""The Huey side of the benchmarks: a RedisHuey with its defaults and the two handlers.

The handlers use Huey's own storage connection. ``BENCH_REDIS_URL`` names the
benchmark's server.
"""

import os

from huey import RedisHuey

from benchmarks import probe

huey = RedisHuey("bench", url=os.environ["BENCH_REDIS_URL"])


@huey.task()
def stamp(run_at_ms: int) -> None:
    """Record the server time this job started, against the run-at it was given."""
    probe.record_start(huey.storage.conn, "huey", run_at_ms)


@huey.task()
def noop(total: int, seq: int, pad: str) -> None:
    """Count one finished job (one script call); nothing else."""
    probe.count_done(huey.storage.conn, "huey", total)
