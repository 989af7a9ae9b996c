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
