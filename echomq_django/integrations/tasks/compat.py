"""The Tasks API this process has: Django's own ``django.tasks`` (Django 6.0+)
or, on Django 5.2, the ``django-tasks`` backport (``django_tasks``).

Everything the backend needs from either is named here once, so the rest of
this package reads the same on both. A project on Django 6 with the backport
installed too uses ``django.tasks`` (what ``settings.TASKS`` configures
there); :data:`TASK_CLASSES` holds every ``Task`` class importable, so a task
made by either is accepted.
"""

from __future__ import annotations

try:  # Django 6.0+
    from django.tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        TASK_MAX_PRIORITY,
        TASK_MIN_PRIORITY,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    API = "django.tasks"
except ImportError:  # Django 5.2 with the django-tasks backport
    try:
        from django_tasks import DEFAULT_TASK_QUEUE_NAME, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import (
            TASK_MAX_PRIORITY,
            TASK_MIN_PRIORITY,
            Task,
            TaskContext,
            TaskError,
            TaskResult,
            TaskResultStatus,
        )
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json

        API = "django_tasks"
    except ImportError as err:
        raise ImportError(
            "echomq_django.tasks needs Django's Tasks API: Django 6.0 or later, or on "
            "Django 5.2 the backport (pip install django-tasks)") from err


def _task_classes() -> tuple[type, ...]:
    classes = [Task]
    for module in ("django.tasks.base", "django_tasks.base"):
        try:
            other = __import__(module, fromlist=["Task"]).Task
        except ImportError:
            continue
        if other not in classes:
            classes.append(other)
    return tuple(classes)


#: Every Task class importable here (Django's and the backport's).
TASK_CLASSES = _task_classes()

__all__ = ["API", "BaseTaskBackend", "DEFAULT_TASK_QUEUE_NAME", "InvalidTask",
           "TASK_CLASSES", "TASK_MAX_PRIORITY", "TASK_MIN_PRIORITY", "Task", "TaskContext",
           "TaskError", "TaskResult", "TaskResultDoesNotExist", "TaskResultStatus",
           "normalize_json", "task_backends", "task_enqueued", "task_finished", "task_started"]
