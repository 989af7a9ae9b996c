"""``./manage.py runechomq [queue ...]``: consumers and the metronome in one command.

Every numeric option is checked by argparse against its range, so a bad one
is a usage error naming the option and the range (``runechomq: error:
argument --concurrency: must be an int in 1..10000, got '20000'``; a
CommandError under ``call_command``), never a traceback from deeper down.
"""

import argparse
import logging

from django.core.management.base import BaseCommand, CommandError

from echomq_django.conf import get_config
from echomq_django.exceptions import ConfigurationError
from echomq_django.rules import MAX_MS, check_int, check_queue_name
from echomq_django.runtime.consumer import MAX_CONCURRENCY
from echomq_django.runtime.supervisor import MAX_PROCESSES, Options, Supervisor

LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}
log = logging.getLogger("echomq.worker")


def int_in(low: int, high: int):
    """An argparse type: an int in ``low..high`` (rules.check_int's rule).
    argparse puts the option's name before the message."""

    def parse(text: str) -> int:
        try:
            return check_int("value", int(text), low, high)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(
                f"must be an int in {low}..{high}, got {text!r}") from None

    return parse


class Command(BaseCommand):
    help = ("Run EchoMQ consumers and the metronome (promote, reap, recurrences) for the "
            "given queues (default: ECHOMQ['QUEUES']). Stop with SIGTERM or Ctrl-C.")

    def add_arguments(self, parser):
        parser.add_argument("queues", nargs="*", help="queues to serve, first served first")
        parser.add_argument("--concurrency", type=int_in(1, MAX_CONCURRENCY), default=4,
                            help=f"handler threads per consumer process, 1..{MAX_CONCURRENCY} "
                                 "(default 4)")
        parser.add_argument("--processes", type=int_in(1, MAX_PROCESSES), default=1,
                            help="forked consumer processes, each with --concurrency threads, "
                                 f"1..{MAX_PROCESSES} (default 1)")
        parser.add_argument("--burst", action="store_true",
                            help="promote once, run what is ready, then exit 0")
        parser.add_argument("--max-jobs", type=int_in(1, MAX_MS), default=None,
                            help="exit after this many jobs (per consumer process), >= 1")
        parser.add_argument("--lease-ms", type=int_in(1, MAX_MS), default=None,
                            help="lease taken at claim, ms >= 1 (default ECHOMQ['LEASE_MS'])")
        parser.add_argument("--shutdown-grace-ms", type=int_in(0, MAX_MS), default=None,
                            help="on SIGTERM, how long running handlers may finish before their "
                                 "jobs are handed back to pending (default ECHOMQ['SHUTDOWN_GRACE_MS'])")
        parser.add_argument("--metrics-port", type=int_in(1, 65535), default=None,
                            help="serve each consumer process's Prometheus metrics on this port "
                                 "(with --processes P: ports N..N+P-1, one per process)")
        parser.add_argument("--metrics-addr", default="0.0.0.0",
                            help="the address the metrics port listens on (default 0.0.0.0)")
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
        port = options["metrics_port"]
        if port is not None and port + options["processes"] - 1 > 65535:
            raise CommandError(f"--metrics-port {port} with --processes {options['processes']} "
                               "runs past port 65535")
        if port is not None:
            _check_ports(options["metrics_addr"], port, options["processes"])
        supervisor = Supervisor(Options(
            queues=queues, concurrency=options["concurrency"], processes=options["processes"],
            burst=options["burst"], metronome=not options["without_metronome"],
            consumers=not options["metronome_only"], max_jobs=options["max_jobs"],
            lease_ms=options["lease_ms"], shutdown_grace_ms=options["shutdown_grace_ms"],
            metrics_port=port, metrics_addr=options["metrics_addr"]))
        try:
            code = supervisor.run()
        except ConfigurationError as err:
            raise CommandError(str(err)) from None
        if code:
            raise CommandError("a consumer thread died of an error of ours (see the log); "
                               "exiting so the process can be restarted", returncode=code)


def _check_ports(addr: str, first: int, count: int) -> None:
    """Bind every metrics port once before anything starts, so a taken port or
    a bad address is one usage error naming the option, not a consumer that
    fails and is restarted for ever."""
    import socket

    for port in range(first, first + count):
        try:
            infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as err:
            raise CommandError(f"--metrics-addr {addr!r} is not an address here ({err})",
                               returncode=2) from None
        family, kind, proto, _, sockaddr = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as err:
                raise CommandError(
                    f"--metrics-port: port {port} on {addr} cannot be used ({err.strerror}); "
                    f"with --processes {count}, ports {first}-{first + count - 1} must all be "
                    "free (pick them below 32768, outside the range the system hands out to "
                    "outgoing connections)", returncode=2) from None
