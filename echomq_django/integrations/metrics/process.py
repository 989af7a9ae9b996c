"""One runechomq consumer process's job metrics, served by prometheus-client's
own HTTP server (``runechomq --metrics-port N [--metrics-addr A]``;
docs/observability.md, "Worker metrics").

- ``echomq_jobs_total{queue,function,outcome}``: jobs run to an outcome
  (done, retry, snooze, dead, cancelled, stale, unrecorded);
- ``echomq_job_duration_seconds{queue,function}``: their run time (the
  handler and its bookkeeping, as the Runner measures it), a histogram.

``function`` is the job's dotted path ("?" for a payload that is not an
envelope). The counters live in this process (no Redis call): each consumer
process serves its own, so with ``--processes P`` consumer k (1..P) listens
on port N + k - 1 and a replacement takes its slot's port. Counters start at
0 in each new process (Prometheus' ``rate()`` and ``increase()`` handle the
reset). prometheus-client's default process and platform collectors are
served too.
"""

from __future__ import annotations

import logging
import threading

from prometheus_client import REGISTRY, Counter, Histogram, start_http_server

__all__ = ["JobMetrics", "serve", "BUCKETS_S"]

log = logging.getLogger("echomq.metrics")

#: Histogram buckets (s): 5 ms to 5 min.
BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

_lock = threading.Lock()
_metrics: "JobMetrics | None" = None


class JobMetrics:
    """The counters and histograms of this process, registered once on
    prometheus-client's default registry."""

    def __init__(self, registry=REGISTRY) -> None:
        self.jobs = Counter("echomq_jobs", "Jobs run to an outcome by this process.",
                            ["queue", "function", "outcome"], registry=registry)
        self.duration = Histogram("echomq_job_duration_seconds",
                                  "Run time of the jobs this process ran (s).",
                                  ["queue", "function"], buckets=BUCKETS_S, registry=registry)

    def observe(self, queue: str, path: str, outcome: str, duration_s: float) -> None:
        """Count one job of ``path`` on ``queue`` ending ``outcome`` after
        ``duration_s`` seconds."""
        self.jobs.labels(queue, path, outcome).inc()
        self.duration.labels(queue, path).observe(duration_s)


def job_metrics() -> JobMetrics:
    """This process's JobMetrics, made on the first call."""
    global _metrics
    with _lock:
        if _metrics is None:
            _metrics = JobMetrics()
        return _metrics


def serve(port: int, addr: str = "0.0.0.0") -> JobMetrics:
    """Serve this process's metrics on ``addr:port`` (prometheus-client's
    threaded HTTP server, a daemon thread) and start counting the Runner's
    outcomes. Returns the JobMetrics. Raises OSError when the port is taken."""
    from ...runtime import observe

    metrics = job_metrics()
    start_http_server(port, addr=addr)
    observe.set_recorder(metrics)
    log.info("metrics: http://%s:%d/metrics", addr, port)
    return metrics
