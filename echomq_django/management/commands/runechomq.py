"""``./manage.py runechomq [queue ...]``: consumers and the metronome in one command."""

import logging

from django.core.management.base import BaseCommand, CommandError

from echomq_django.conf import get_config
from echomq_django.exceptions import ConfigurationError
from echomq_django.rules import check_int, check_ms, check_queue_name
from echomq_django.runtime.supervisor import Options, Supervisor

LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}
log = logging.getLogger("echomq.worker")


def positive(value: str) -> int:
    """argparse type: an int >= 1 (rules.check_int's rule)."""
    return check_int("value", int(value), 1)


def non_negative(value: str) -> int:
    """argparse type: an int of ms >= 0 (rules.check_ms's rule)."""
    return check_ms("value", int(value))


class Command(BaseCommand):
    help = ("Run EchoMQ consumers and the metronome (promote, reap, recurrences) for the "
            "given queues (default: ECHOMQ['QUEUES']). Stop with SIGTERM or Ctrl-C.")

    def add_arguments(self, parser):
        parser.add_argument("queues", nargs="*", help="queues to serve, first served first")
        parser.add_argument("--concurrency", type=positive, default=4,
                            help="handler threads per consumer process (default 4)")
        parser.add_argument("--processes", type=positive, default=1,
                            help="forked consumer processes, each with --concurrency threads")
        parser.add_argument("--burst", action="store_true",
                            help="promote once, run what is ready, then exit 0")
        parser.add_argument("--max-jobs", type=positive, default=None,
                            help="exit after this many jobs (per consumer process)")
        parser.add_argument("--lease-ms", type=positive, default=None,
                            help="lease taken at claim (default ECHOMQ['LEASE_MS'])")
        parser.add_argument("--shutdown-grace-ms", type=non_negative, default=None,
                            help="on SIGTERM, how long running handlers may finish before their "
                                 "jobs are handed back to pending (default ECHOMQ['SHUTDOWN_GRACE_MS'])")
        role = parser.add_mutually_exclusive_group()
        role.add_argument("--without-metronome", action="store_true",
                          help="consumers only (another process runs the metronome)")
        role.add_argument("--metronome-only", action="store_true",
                          help="the metronome only: promote, reap, recurrences; no consumers")

    def handle(self, *args, **options):
        level = LEVELS.get(options["verbosity"], logging.INFO)
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("echomq").setLevel(level)
        configured = get_config().queues
        try:
            named = [check_queue_name(q) for q in options["queues"]]
        except ValueError as err:
            raise CommandError(str(err)) from None
        # A queue outside the settings is served (it may be meant), but a typo
        # would otherwise wait on an empty queue in silence.
        for queue in named:
            if queue not in configured:
                log.warning("queue %r is not in ECHOMQ['QUEUES'] (%s); serving it anyway",
                            queue, ", ".join(configured))
        queues = named or list(configured)
        supervisor = Supervisor(Options(
            queues=queues, concurrency=options["concurrency"], processes=options["processes"],
            burst=options["burst"], metronome=not options["without_metronome"],
            consumers=not options["metronome_only"], max_jobs=options["max_jobs"],
            lease_ms=options["lease_ms"], shutdown_grace_ms=options["shutdown_grace_ms"]))
        try:
            code = supervisor.run()
        except ConfigurationError as err:
            raise CommandError(str(err)) from None
        if code:
            raise CommandError("a consumer thread died of an error of ours (see the log); "
                               "exiting so the process can be restarted", returncode=code)
