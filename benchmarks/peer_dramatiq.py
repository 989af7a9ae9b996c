"""The Dramatiq side of the benchmarks: a RedisBroker with its defaults and the two handlers.

The handlers use the broker's own redis-py client (``broker.client``).
``BENCH_REDIS_URL`` names the benchmark's server.
"""

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from benchmarks import probe

broker = RedisBroker(url=os.environ["BENCH_REDIS_URL"])
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench")
def stamp(run_at_ms: int) -> None:
    """Record the server time this job started, against the run-at it was given."""
    probe.record_start(broker.client, "dramatiq", run_at_ms)


@dramatiq.actor(queue_name="bench")
def noop(total: int, seq: int, pad: str) -> None:
    """Count one finished job (one script call); nothing else."""
    probe.count_done(broker.client, "dramatiq", total)
