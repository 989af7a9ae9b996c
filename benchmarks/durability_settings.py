"""Settings of durability.py's processes (the enqueuer, runechomq): the
benchmarks' settings with a SQLite file every process shares (``DIAL_DB``),
queue ``dial`` and ``ECHOMQ["OUTBOX"]`` from ``DIAL_OUTBOX`` (JSON)."""

import json
import os

from benchmarks.bench_settings import *  # noqa: F401,F403
from benchmarks.bench_settings import ECHOMQ as _BASE

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                         "NAME": os.environ.get("DIAL_DB", ":memory:"),
                         "OPTIONS": {"timeout": 20}}}
ECHOMQ = {**_BASE, "QUEUES": ["dial"],
          "OUTBOX": json.loads(os.environ.get("DIAL_OUTBOX", "false"))}
