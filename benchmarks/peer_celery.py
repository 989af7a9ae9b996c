"""The Celery side of the benchmarks: the Redis broker, no result backend, defaults otherwise.

Celery exposes no Redis client to a task, so the handlers use one client per
pool process (``probe.own_client``). ``BENCH_REDIS_URL`` names the server.
"""

import os

from celery import Celery

from benchmarks import probe

app = Celery("bench", broker=os.environ["BENCH_REDIS_URL"])
app.conf.broker_connection_retry_on_startup = True  # silences a deprecation warning only


@app.task
def stamp(run_at_ms: int) -> None:
    """Record the server time this job started, against the run-at it was given."""
    probe.record_start(probe.own_client(), "celery", run_at_ms)


@app.task
def noop(total: int, seq: int, pad: str) -> None:
    """Count one finished job (one script call); nothing else."""
    probe.count_done(probe.own_client(), "celery", total)
