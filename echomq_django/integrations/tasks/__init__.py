"""Django's Tasks API on EchoMQ: the backend, its Task class and results.

Imported as :mod:`echomq_django.tasks` (``TASKS = {"default": {"BACKEND":
"echomq_django.tasks.EchoMQBackend"}}``); needs Django 6.0+ (``django.tasks``)
or, on Django 5.2, the ``django-tasks`` backport. See docs/tasks.md.

- :mod:`.compat`: the one place that picks ``django.tasks`` or ``django_tasks``;
- :mod:`.options`: the options an ``EchoMQTask`` adds, read off any Task;
- :mod:`.task`: ``EchoMQTask`` (Django's Task with EchoMQ's options) and ``task``;
- :mod:`.backend`: ``EchoMQBackend`` (enqueue, get_result, checks);
- :mod:`.results`: a job row as a ``TaskResult``, result ids;
- :mod:`.worker`: how runechomq runs a Task (``TaskJob``).
"""

from .backend import EchoMQBackend
from .results import EchoMQTaskContext, EchoMQTaskResult
from .task import EchoMQTask, task

__all__ = ["EchoMQBackend", "EchoMQTask", "EchoMQTaskContext", "EchoMQTaskResult", "task"]
