"""``manage.py echomq_server status|start|stop``: the embedded Valkey server.

For development and demos (``ECHOMQ = {"URL": "embedded"}``); works on
``ECHOMQ["EMBEDDED_DIR"]`` unless ``--dir`` is given. See
:mod:`echomq_django.connection.embedded`.
"""

from django.core.management.base import BaseCommand, CommandError

from echomq_django.connection import embedded
from echomq_django.conf import get_config
from echomq_django.exceptions import EchoMQError


class Command(BaseCommand):
    help = "Show, start or stop the embedded Valkey server (development only)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["status", "start", "stop"])
        parser.add_argument("--dir", help="data directory (default: ECHOMQ['EMBEDDED_DIR'])")

    def handle(self, *args, action, dir=None, **options):
        data_dir = dir or get_config().embedded_dir
        try:
            if action == "start":
                self.stdout.write(f"running at {embedded.ensure_started(data_dir)} ({data_dir})")
            elif action == "stop":
                stopped = embedded.stop(data_dir)
                self.stdout.write("stopped" if stopped else f"not running ({data_dir})")
            else:
                info = embedded.status(data_dir)
                if info is None:
                    self.stdout.write(f"no server recorded in {data_dir}")
                else:
                    state = "alive" if info["alive"] else "not running"
                    self.stdout.write(
                        f"{state}: pid {info['pid']} at {info['url']} "
                        f"(valkey {info['version'] or '?'}, {info['data_dir']})"
                    )
        except EchoMQError as exc:
            raise CommandError(str(exc)) from exc
