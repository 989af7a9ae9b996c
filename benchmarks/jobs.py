"""The EchoMQ side of the benchmarks: two ``@job`` handlers on queue ``bench``.

Autodiscovered by runechomq because ``benchmarks`` is in INSTALLED_APPS of
bench_settings. The handlers use the project's own client (``get_connection``).
"""

from echomq_django import get_connection, job

from benchmarks import probe


@job(queue="bench")
def stamp(run_at_ms: int) -> None:
    """Record the server time this job started, against the run-at it was given."""
    probe.record_start(get_connection(), "echomq", run_at_ms)


@job(queue="bench")
def noop(total: int, seq: int, pad: str) -> None:
    """Count one finished job (one script call); nothing else."""
    probe.count_done(get_connection(), "echomq", total)


@job(queue="chaos", context=True)
def chaos_run(sleep_ms: int, context=None) -> None:
    """chaos.py's job: sleeps a little, then records this run (the job id
    joins ``chaos:ran``, a fresh run id joins ``chaos:runs:<job id>``; SADD
    is idempotent, so a command repeated after a killed connection does not
    count twice)."""
    import time
    import uuid

    time.sleep(sleep_ms / 1000)
    client = _resilient()
    client.sadd(f"chaos:runs:{context.job_id}", uuid.uuid4().hex)
    client.sadd("chaos:ran", context.job_id)


_RESILIENT = None


def _resilient():
    """A client of the benchmark's server that repeats a command whose
    connection chaos.py killed (the recording, not the queue, must survive)."""
    global _RESILIENT
    if _RESILIENT is None:
        import os

        import redis
        from redis.backoff import ExponentialWithJitterBackoff
        from redis.retry import Retry

        _RESILIENT = redis.Redis.from_url(
            os.environ["BENCH_REDIS_URL"],
            retry=Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.5), 50))
    return _RESILIENT


@job(queue="dial")
def dial_run(seq: int) -> None:
    """durability.py's job: appends ``seq`` to the file ``DIAL_RUNS`` names,
    outside the server, so a run is remembered whatever the server loses. A
    line this short is written whole by one O_APPEND write."""
    import os

    fd = os.open(os.environ["DIAL_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{seq}\n".encode())
    finally:
        os.close(fd)
