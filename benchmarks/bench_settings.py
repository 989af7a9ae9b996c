"""Django settings for the benchmarks' runechomq: the app, the jobs and the server.

``BENCH_REDIS_URL`` is set by the benchmark script to the valkey-server it
started; ``benchmarks`` is an installed app so its ``jobs.py`` is autodiscovered.
"""

import os

SECRET_KEY = "benchmark-only-not-a-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["echomq_django", "benchmarks"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Every other ECHOMQ key keeps its default (README, "Configuration").
ECHOMQ = {"URL": os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:1/0"), "QUEUES": ["bench"]}
if os.environ.get("BENCH_MAX_STALLS"):  # chaos.py --max-stalls
    ECHOMQ["MAX_STALLS"] = int(os.environ["BENCH_MAX_STALLS"])
# archive.py: BENCH_DB names an SQLite file (migrated by the script) and
# BENCH_ARCHIVE=1 turns ECHOMQ["ARCHIVE"] on.
if os.environ.get("BENCH_DB"):
    DATABASES["default"]["NAME"] = os.environ["BENCH_DB"]
    DATABASES["default"]["OPTIONS"] = {"timeout": 20}
if os.environ.get("BENCH_ARCHIVE"):
    ECHOMQ["ARCHIVE"] = True
