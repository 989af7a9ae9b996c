"""``django.tasks`` on EchoMQ: ``TASKS = {"default": {"BACKEND":
"echomq_django.tasks.EchoMQBackend"}}``. The code lives in
:mod:`echomq_django.integrations.tasks`; docs/tasks.md says how to use it.

(This module is also what Django-style autodiscovery of ``tasks`` modules
finds in the echomq_django app itself; it defines no task.)
"""

from .integrations.tasks import (
    EchoMQBackend,
    EchoMQTask,
    EchoMQTaskContext,
    EchoMQTaskResult,
    task,
)

__all__ = ["EchoMQBackend", "EchoMQTask", "EchoMQTaskContext", "EchoMQTaskResult", "task"]
