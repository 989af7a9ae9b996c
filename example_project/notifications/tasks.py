"""One task defined the Django way (``django.tasks``; the django-tasks
backport on Django 5.2), run by the same runechomq as the ``@job`` functions
in jobs.py: settings.TASKS names ``echomq_django.tasks.EchoMQBackend``. The
workshop enqueues it and reads its ``TaskResult`` back by id."""

try:
    from django.tasks import task
except ImportError:  # Django 5.2
    from django_tasks import task

from .jobs import QUEUE


@task(queue_name=QUEUE, takes_context=True)
def round_recap(context, room: str, round_id: str) -> dict:
    """Sum up a round for its room (attempt counts from 1)."""
    return {"room": room, "round": round_id, "attempt": context.attempt}
