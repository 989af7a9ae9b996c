"""What a consumer process tells about the jobs it runs, off the server's path:
the ``job_started`` and ``job_finished`` signals (:mod:`echomq_django.signals`)
and, when ``runechomq --metrics-port`` turned them on, the process's
Prometheus counters (:mod:`echomq_django.integrations.metrics.process`).

Nothing here calls Redis. With no receiver and no metrics each call costs
two attribute checks, so the Runner calls them on every job.
"""

from __future__ import annotations

from .. import signals
from ..protocol.records import Claim

__all__ = ["started", "finished", "set_recorder", "worker"]

#: The process's job metrics (``observe(queue, path, outcome, duration_s)``),
#: or None while no --metrics-port asked for them.
_recorder = None


def set_recorder(recorder) -> None:
    """Send every finished job's outcome and run time to ``recorder`` (an
    object with ``observe(queue, path, outcome, duration_s)``); None stops."""
    global _recorder
    _recorder = recorder


def started(sender, claim: Claim, path: str, worker: str) -> None:
    """``job_started`` for ``claim`` (its handler is about to run)."""
    if signals.job_started.receivers:
        signals.send(signals.job_started, sender, queue=claim.queue, job_id=claim.job_id,
                     path=path, attempt=claim.attempts, group=claim.group or None, worker=worker)


def finished(sender, claim: Claim, path: str, outcome: str, duration_s: float, *,
             reason: str = "", error: str = "", error_class: str = "", delay_ms: int = 0,
             result=None) -> None:
    """Count ``outcome`` of ``claim`` (its run took ``duration_s`` seconds)
    and send ``job_finished``; ``error`` is the traceback text ('' for none)."""
    recorder = _recorder
    if recorder is not None:
        recorder.observe(claim.queue, path, outcome, duration_s)
    if signals.job_finished.receivers:
        signals.send(signals.job_finished, sender, queue=claim.queue, job_id=claim.job_id,
                     path=path, attempt=claim.attempts, outcome=outcome,
                     duration_ms=duration_s * 1000,
                     delay_ms=delay_ms if outcome in ("retry", "snooze") else None,
                     reason=reason or None, error=_last_line(error) or None,
                     error_class=error_class or None, traceback=error or None,
                     result=result if outcome == "done" else None)


def _last_line(error: str) -> str:
    lines = [line for line in error.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def worker(consumer, *, stopping: bool) -> None:
    """``worker_started`` (its threads run) or ``worker_stopping`` (it begins
    to shut down, with ``processed``) for ``consumer``."""
    signal = signals.worker_stopping if stopping else signals.worker_started
    if not signal.receivers:
        return
    extra = {"processed": consumer.processed} if stopping else {}
    signals.send(signal, type(consumer), worker=consumer.name, queues=list(consumer.queues),
                 concurrency=consumer.concurrency, **extra)
