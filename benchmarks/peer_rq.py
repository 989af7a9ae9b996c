"""The RQ side of the benchmarks: the same two handlers, on RQ's job connection."""

from rq import get_current_job

from benchmarks import probe


def stamp(run_at_ms: int) -> None:
    """Record the server time this job started, against the run-at it was given."""
    probe.record_start(get_current_job().connection, "rq", run_at_ms)


def noop(total: int, seq: int, pad: str) -> None:
    """Count one finished job (one script call); nothing else."""
    probe.count_done(get_current_job().connection, "rq", total)
