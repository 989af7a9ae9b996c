"""``./manage.py echomq_stats [--queue Q ...] [--watch N]``: every queue's counts,
latency, lanes and the live workers as a terminal table (docs/observability.md,
"echomq_stats").

Reads only, two round trips per refresh whatever the size of the sets
(:func:`echomq_django.admin.reads.gauges.gauges`): at most 100 queues and 100
live processes.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from echomq_django.admin.reads.gauges import Gauges, gauges
from echomq_django.conf import get_config
from echomq_django.connection import get_connection
from echomq_django.connection.resilience import SERVER_ERRORS
from echomq_django.rules import check_queue_name


def _seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.1f} min"


def render(read: Gauges) -> Group:
    """The queues table and the workers table of one read."""
    queues = Table(title="EchoMQ queues", title_justify="left")
    for name in ("queue", "pending", "scheduled", "active", "dead", "repeat", "latency",
                 "schedule lag", "lanes", "at cap", "rate-limited"):
        queues.add_column(name, justify="left" if name == "queue" else "right", no_wrap=True)
    for q in read.queues:
        latency = _seconds(q.latency_s) + ("*" if q.lanes_read < q.lanes else "")
        queues.add_row(q.queue, f"{q.pending:,}", f"{q.schedule:,}", f"{q.active:,}",
                       f"{q.dead:,}", f"{q.repeat:,}", latency, _seconds(q.schedule_lag_s),
                       f"{q.lanes:,}", f"{q.capped:,}", f"{q.waiting:,}")
    workers = Table(title=f"live workers: {read.live_workers}", title_justify="left")
    for name in ("worker", "host", "pid", "queues", "busy", "up"):
        workers.add_column(name, justify="right" if name in ("busy", "up") else "left",
                           no_wrap=True)
    for w in read.workers:
        up = _seconds((read.now_ms - w.started_at_ms) / 1000) if w.started_at_ms else "?"
        busy = f"{w.busy or 0}/{w.concurrency}" if w.concurrency else "?"
        workers.add_row(w.worker_id, w.host, str(w.pid), ",".join(w.queues), busy, up)
    return Group(queues, workers)


class Command(BaseCommand):
    help = ("Show every EchoMQ queue's counts, latency and lanes and the live workers "
            "(reads only). --watch N refreshes every N seconds until Ctrl-C.")

    def add_arguments(self, parser):
        parser.add_argument("--queue", action="append", default=None,
                            help="show this queue (repeatable; default: ECHOMQ['QUEUES'] and "
                                 "the queues live workers serve)")
        parser.add_argument("--watch", type=float, default=None, metavar="SECONDS",
                            help="refresh every SECONDS (>= 0.5) until Ctrl-C")

    def handle(self, *args, **options):
        try:
            only = ([check_queue_name(q) for q in options["queue"]]
                    if options["queue"] else None)
        except (TypeError, ValueError) as err:
            raise CommandError(str(err)) from None
        watch = options["watch"]
        if watch is not None and not (0.5 <= watch <= 86_400):
            raise CommandError("--watch must be a number of seconds in 0.5..86400, got "
                               f"{watch!r}")
        configured = get_config().queues
        # A terminal's own width; piped or captured output is not cut short.
        tty = Console().is_terminal
        console = Console(file=self.stdout, width=None if tty else 200)

        def read():
            try:
                # (A cluster's client connects as it is built.)
                return render(gauges(get_connection(), configured, only=only, workers=True))
            except SERVER_ERRORS as err:
                raise CommandError(f"cannot read the EchoMQ server: {err}") from None

        if watch is None:
            console.print(read())
            return
        def read_or_say() -> Any:
            # Watching rides out an outage: it says so and keeps trying.
            try:
                return read()
            except CommandError as err:
                return f"{err} (at {time.strftime('%H:%M:%S')}; trying again)"

        try:
            with Live(read_or_say(), console=console, auto_refresh=False) as live:
                while True:
                    time.sleep(watch)
                    live.update(read_or_say(), refresh=True)
        except KeyboardInterrupt:
            pass
