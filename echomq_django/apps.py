"""The Django app config for echomq_django."""

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class EchoMQConfig(AppConfig):
    """Registers the ``echomq`` system checks, imports every app's ``jobs.py``
    and, when ``django.contrib.admin`` is installed, mounts the dashboard.

    Importing ``jobs.py`` runs its ``@job`` decorators, so consumers can find
    a job by its dotted path without each app importing its own jobs.
    """

    name = "echomq_django"
    verbose_name = "EchoMQ"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.apps import apps

        from . import checks  # noqa: F401  (registers the checks)

        if apps.is_installed("django.contrib.admin"):
            from .admin import site  # noqa: F401  (registers QueueAdmin)
        autodiscover_modules("jobs")
