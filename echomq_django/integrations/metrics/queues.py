"""The queues' gauges as a Prometheus collector, read from the server at each
scrape (docs/observability.md, "Queue metrics").

``QueueCollector(conn, configured).collect()`` yields one family per gauge,
each with a sample per queue (label ``queue``), plus ``echomq_workers``: two
round trips whatever the size of the sets
(:func:`echomq_django.admin.reads.gauges.gauges`).
"""

from __future__ import annotations

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ...admin.reads.gauges import QueueGauges, gauges

__all__ = ["QueueCollector", "FAMILIES"]

#: name -> (help, how to read it off a QueueGauges). Units in the names.
FAMILIES = {
    "echomq_queue_pending_jobs": ("Jobs waiting in every lane of the queue.",
                                  lambda g: g.pending),
    "echomq_queue_scheduled_jobs": ("Jobs scheduled for later (delays, retries, snoozes).",
                                    lambda g: g.schedule),
    "echomq_queue_active_jobs": ("Jobs leased and running.", lambda g: g.active),
    "echomq_queue_dead_jobs": ("Jobs in the dead-letter set.", lambda g: g.dead),
    "echomq_queue_repeat_schedules": ("Recurring schedules in the registry.",
                                      lambda g: g.repeat),
    "echomq_queue_lanes": ("Lanes with work waiting.", lambda g: g.lanes),
    "echomq_queue_lanes_at_cap": ("Lanes held back at their concurrency cap.",
                                  lambda g: g.capped),
    "echomq_queue_lanes_rate_limited": ("Lanes waiting for their next rate-limit token.",
                                        lambda g: g.waiting),
    "echomq_queue_latency_seconds": (
        "How long the longest-waiting job at the front of a lane's priority level has been "
        "ready (0 with nothing pending).", lambda g: g.latency_s),
    "echomq_queue_schedule_lag_seconds": (
        "How far past due the earliest scheduled job is (0 when none is due).",
        lambda g: g.schedule_lag_s),
}


class QueueCollector(Collector):
    """Reads every queue's gauges at scrape time.

    Args:
        conn: a redis-py client.
        configured: the queues always reported (``ECHOMQ["QUEUES"]``); queues
            a live process serves are added (at most 100 in all).
    """

    def __init__(self, conn, configured) -> None:
        self.conn = conn
        self.configured = list(configured)

    def collect(self):
        read = gauges(self.conn, self.configured)
        for name, (help_text, value) in FAMILIES.items():
            family = GaugeMetricFamily(name, help_text, labels=["queue"])
            for queue in read.queues:
                family.add_metric([queue.queue], value(queue))
            yield family
        yield GaugeMetricFamily("echomq_workers", "Live runechomq consumer processes.",
                                value=read.live_workers)

    def describe(self):
        return []


def sample(queue: QueueGauges) -> dict[str, float]:
    """Every family's value for one queue (for tests and echomq_stats)."""
    return {name: value(queue) for name, (_, value) in FAMILIES.items()}
