"""``manage.py echomq_schedules list|run|remove``: the recurring registry by hand.

- ``list [--queue Q ...]`` (default: every queue of ``ECHOMQ["QUEUES"]``): one
  line per schedule with its cadence, next run in its zone and in UTC, and the
  last occurrence (server time of the last mint and its job id).
- ``run NAME --queue Q``: mint one occurrence now (the grid is not moved);
  prints the job id.
- ``remove NAME --queue Q``: remove the schedule (its minted jobs stay).

See :mod:`echomq_django.repeat` and docs/repeat.md.
"""

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from django.core.management.base import BaseCommand, CommandError

from echomq_django.conf import get_config
from echomq_django.connection import get_connection
from echomq_django.connection.resilience import SERVER_ERRORS
from echomq_django.exceptions import EchoMQError
from echomq_django.repeat import Repeat

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _when(ms, tz=None):
    if ms is None:
        return "-"
    moment = _EPOCH + timedelta(milliseconds=ms)
    if tz is not None:
        moment = moment.astimezone(ZoneInfo(tz))
    return moment.isoformat(timespec="seconds")


class Command(BaseCommand):
    help = "List recurring schedules, run one now, or remove one."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["list", "run", "remove"])
        parser.add_argument("name", nargs="?", help="schedule name (run, remove)")
        parser.add_argument("--queue", action="append", dest="queues", default=None,
                            help="queue (repeatable for list; required for run and remove)")

    def handle(self, *args, action, name=None, queues=None, **options):
        try:
            repeat = Repeat(get_connection())
            if action == "list":
                for queue in queues or get_config().queues:
                    self._list(repeat, queue)
                return
            if not name or not queues or len(queues) != 1:
                raise CommandError(f"{action} needs NAME and exactly one --queue")
            if action == "run":
                self.stdout.write(repeat.run_now(queues[0], name))
            elif repeat.remove(queues[0], name):
                self.stdout.write(f"removed {queues[0]}/{name}")
            else:
                raise CommandError(f"no schedule {name!r} in queue {queues[0]!r}")
        except (EchoMQError, LookupError, ValueError, TypeError) as exc:
            raise CommandError(str(exc)) from exc
        except SERVER_ERRORS as exc:  # away, or a node of it
            raise CommandError(f"cannot read the EchoMQ server: {exc}") from None

    def _list(self, repeat, queue):
        entries = repeat.list(queue)
        if not entries:
            self.stdout.write(f"{queue}: no schedules")
        for e in entries:
            try:
                cadence, tz = e.cadence.describe(), e.tz
            except ValueError as exc:  # a stored zone or cron this system rejects
                cadence, tz = f"unreadable ({exc})", None
            self.stdout.write(
                f"{queue}/{e.name}  {cadence}  missed={e.missed}\n"
                f"    next {_when(e.next_run_ms, tz)} ({_when(e.next_run_ms)})\n"
                f"    last {_when(e.last_run_ms, tz)} ({_when(e.last_run_ms)})"
                f" job {e.last_job_id or '-'}"
            )
