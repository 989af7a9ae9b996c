"""The Tasks API this process has: Django's own ``django.tasks`` (Django 6.0+)
or, on Django 5.2, the ``django-tasks`` backport (``django_tasks``).

Everything the backend needs from either is named here once, so the rest of
this package reads the same on both. A project on Django 6 with the backport
installed too uses ``django.tasks`` (what ``settings.TASKS`` configures
there); :data:`TASK_CLASSES` holds every ``Task`` class importable, so a task
made by either is accepted.
"""

from __future__ import annotations

from importlib import import_module

#: The API packages in order of preference, each with the name its "invalid
#: task" exception has there.
_APIS = (("django.tasks", "InvalidTask", "django.utils.json"),
         ("django_tasks", "InvalidTaskError", "django_tasks.utils"))


def _load() -> tuple[str, dict]:
    for root, invalid, json_module in _APIS:
        try:
            top = import_module(root)
        except ImportError:
            continue
        base, exceptions = import_module(f"{root}.base"), import_module(f"{root}.exceptions")
        signals = import_module(f"{root}.signals")
        names = {name: getattr(base, name) for name in (
            "TASK_MAX_PRIORITY", "TASK_MIN_PRIORITY", "Task", "TaskContext", "TaskError",
            "TaskResult", "TaskResultStatus")}
        names.update(
            DEFAULT_TASK_QUEUE_NAME=top.DEFAULT_TASK_QUEUE_NAME, task_backends=top.task_backends,
            BaseTaskBackend=import_module(f"{root}.backends.base").BaseTaskBackend,
            InvalidTask=getattr(exceptions, invalid),
            TaskResultDoesNotExist=exceptions.TaskResultDoesNotExist,
            task_enqueued=signals.task_enqueued, task_finished=signals.task_finished,
            task_started=signals.task_started,
            normalize_json=import_module(json_module).normalize_json)
        return root, names
    raise ImportError("echomq_django.tasks needs Django's Tasks API: Django 6.0 or later, or "
                      "on Django 5.2 the backport (pip install django-tasks)")


API, _names = _load()
globals().update(_names)


def _task_classes() -> tuple[type, ...]:
    classes = [_names["Task"]]
    for root, _, _ in _APIS:
        try:
            other = import_module(f"{root}.base").Task
        except ImportError:
            continue
        if other not in classes:
            classes.append(other)
    return tuple(classes)


#: Every Task class importable here (Django's and the backport's).
TASK_CLASSES = _task_classes()

__all__ = ["API", "TASK_CLASSES", *_names]
