"""The Django app config for echomq_django."""

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class EchoMQConfig(AppConfig):
    """Registers the ``echomq`` system checks, imports every app's ``jobs.py``
    and, when ``django.contrib.admin`` is installed, mounts the dashboard.

    Importing ``jobs.py`` runs its ``@job`` decorators, so consumers can find
    a job by its dotted path without each app importing its own jobs. When
    ``settings.TASKS`` names the EchoMQ backend, every app's ``tasks.py`` is
    imported too (so recurring tasks are declared at boot and a worker finds
    each Task), and not otherwise: ``tasks.py`` is other queues' convention.
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
        if uses_task_backend():
            from . import tasks  # noqa: F401  (the backend's worker side)

            autodiscover_modules("tasks")


def uses_task_backend() -> bool:
    """True when ``settings.TASKS`` names ``echomq_django.tasks.EchoMQBackend``."""
    from django.conf import settings

    backends = getattr(settings, "TASKS", None) or {}
    return isinstance(backends, dict) and any(
        isinstance(spec, dict) and str(spec.get("BACKEND", "")).startswith("echomq_django.")
        for spec in backends.values())
