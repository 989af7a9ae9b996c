"""Minimal Django settings for the echomq-django test suite."""

import importlib.util
import json
import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent

SECRET_KEY = "echomq-django-tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
# A test that shares a database between processes (the outbox relay, the
# archiver in a runechomq subprocess) names it in ECHOMQ_TEST_DB, migrated by
# the test first: a SQLite file path, or postgres://user@host:port/name.
if os.environ.get("ECHOMQ_TEST_DB", "").startswith("postgres://"):
    from urllib.parse import urlsplit

    _pg = urlsplit(os.environ["ECHOMQ_TEST_DB"])
    DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql",
                             "NAME": _pg.path.lstrip("/"), "HOST": _pg.hostname,
                             "PORT": _pg.port or 5432, "USER": _pg.username or "postgres"}}
elif os.environ.get("ECHOMQ_TEST_DB"):
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                             "NAME": os.environ["ECHOMQ_TEST_DB"],
                             "OPTIONS": {"timeout": 20}}}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "echomq_django",
]
# tests/testapp (jobs used by the tests) is added by another part of the suite;
# include it only once it exists.
if importlib.util.find_spec("tests.testapp") is not None:
    INSTALLED_APPS.append("tests.testapp")

# Django's Tasks API on EchoMQ (issue 12): django.tasks on Django 6, the
# django-tasks backport on Django 5.2 (a dev dependency there). QUEUES=[]
# lets a test enqueue on a queue of its own.
if importlib.util.find_spec("django.tasks") is None:
    INSTALLED_APPS.append("django_tasks")
TASKS = {"default": {"BACKEND": "echomq_django.tasks.EchoMQBackend", "QUEUES": []},
         # A second alias with options of its own (tests/test_tasks.py).
         "retrying": {"BACKEND": "echomq_django.tasks.EchoMQBackend", "QUEUES": [],
                      "OPTIONS": {"MAX_ATTEMPTS": 3, "BACKOFF": ("fixed", 10)}}}

if importlib.util.find_spec("tests.urls") is not None:
    ROOT_URLCONF = "tests.urls"

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

STATIC_URL = "/static/"

# PBKDF2 costs about 0.2 s of CPU per password, and the admin tests create a
# staff user each; no test is about the hash's strength, and logging in through
# the admin's form still checks the password ("Speeding up the tests" in
# Django's testing docs).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# tests/conftest.py starts a Valkey server (or uses ECHOMQ_TEST_URL), sets
# this setting to its URL for the pytest session and exports it as
# ECHOMQ_TEST_SERVER_URL, which subprocesses (runechomq) read here. Without it
# the URL points at a port where nothing listens, so a stray process fails
# loudly instead of touching a real server.
ECHOMQ = {"URL": os.environ.get("ECHOMQ_TEST_SERVER_URL", "redis://127.0.0.1:1/0")}
# A subprocess test may declare recurring schedules: ECHOMQ_TEST_SCHEDULES is
# the JSON of ECHOMQ["SCHEDULES"] (tests/procs.py's runechomq(env=...)).
if os.environ.get("ECHOMQ_TEST_SCHEDULES"):
    ECHOMQ["SCHEDULES"] = json.loads(os.environ["ECHOMQ_TEST_SCHEDULES"])
# ... and the outbox: ECHOMQ_TEST_OUTBOX is the JSON of ECHOMQ["OUTBOX"].
if os.environ.get("ECHOMQ_TEST_OUTBOX"):
    ECHOMQ["OUTBOX"] = json.loads(os.environ["ECHOMQ_TEST_OUTBOX"])
# ... and queue limits: ECHOMQ_TEST_QUEUE_LIMITS is the JSON of ECHOMQ["QUEUE_LIMITS"].
if os.environ.get("ECHOMQ_TEST_QUEUE_LIMITS"):
    ECHOMQ["QUEUE_LIMITS"] = json.loads(os.environ["ECHOMQ_TEST_QUEUE_LIMITS"])
# ... and the archive: ECHOMQ_TEST_ARCHIVE is the JSON of ECHOMQ["ARCHIVE"].
if os.environ.get("ECHOMQ_TEST_ARCHIVE"):
    ECHOMQ["ARCHIVE"] = json.loads(os.environ["ECHOMQ_TEST_ARCHIVE"])
