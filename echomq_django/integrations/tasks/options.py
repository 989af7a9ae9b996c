"""The options an :class:`~.task.EchoMQTask` adds to Django's Task, and how to
read them off any Task (a plain Django Task has the defaults). No imports of
this package: the task, the worker and the backend all read them here."""

from __future__ import annotations

from typing import Any

__all__ = ["TASK_OPTIONS", "options"]

#: The options an EchoMQTask adds to Django's Task, each with its default.
TASK_OPTIONS = {"max_attempts": None, "backoff": None, "timeout": None, "lease_ms": None,
                "group": None, "metadata": None, "every": None, "cron": None, "tz": None,
                "missed": "coalesce"}


def options(task: Any) -> dict:
    """The EchoMQ options of any Task (a plain Django Task has the defaults)."""
    return {name: getattr(task, name, default) for name, default in TASK_OPTIONS.items()}
