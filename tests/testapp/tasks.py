"""Tasks defined the Django way (``django.tasks``, or the django-tasks
backport on Django 5.2), run by EchoMQ (tests/test_tasks.py). Like the jobs
in jobs.py, they record what happened in Redis, so a test in another process
can read it."""

import asyncio
import os
import sys
import time

from tests.nodes import job_client

try:
    from django.tasks import task
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django 5.2: the backport
    from django_tasks import task
    from django_tasks.signals import task_enqueued, task_finished, task_started


def _client():
    # Repeats a command whose connection was dropped (a test kills them).
    return job_client()


def signals_key(result_id: str) -> str:
    """Where every process records the task signals it sent for a result."""
    return f"test:signals:{result_id}"


def _recorder(name):
    def record_signal(sender, task_result, **kwargs):
        # In whichever process sent it: the test's (enqueued) or runechomq's.
        _client().rpush(signals_key(task_result.id), "|".join(
            [name, str(task_result.status), sender.__name__, str(os.getpid())]))
    return record_signal


for _name, _signal in (("enqueued", task_enqueued), ("started", task_started),
                       ("finished", task_finished)):
    _signal.connect(_recorder(_name), weak=False, dispatch_uid=f"tests-record-{_name}")


@task
def add(a, b):
    return a + b


@task(takes_context=True)
def whoami(context, note):
    return {"attempt": context.attempt, "id": context.task_result.id, "note": note,
            "status": str(context.task_result.status)}


@task
async def async_double(x):
    await asyncio.sleep(0)
    return x * 2


@task
def fail(message):
    raise ValueError(message)


@task
def exit_now():
    sys.exit(3)


@task
def non_json():
    return object()


@task
def record(key, value):
    """Append value to the Redis list key (the order tasks ran in)."""
    _client().rpush(key, value)


@task
def hold(key, seconds=30.0):
    """Mark key 'started', then wait up to ``seconds`` for key+':go'."""
    client = _client()
    client.rpush(key, "started")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if client.exists(key + ":go"):
            return "released"
        time.sleep(0.02)
    return "timed out"


@task(max_attempts=3, backoff=("fixed", 10))
def flaky(key, failures):
    """Fail the first ``failures`` attempts (counted in Redis), then succeed."""
    if _client().incr(key) <= failures:
        raise ConnectionError(f"attempt failed ({key})")
    return "ok"


def _give_up_on_lookup_error(exception, task_result):
    if isinstance(exception, LookupError):
        return None
    return 0.01


@task(max_attempts=5, backoff=_give_up_on_lookup_error)
def picky(key):
    if _client().incr(key) == 1:
        raise ConnectionError("first")
    raise KeyError("then a lookup error: no more retries")


@task(timeout=1)
def too_slow():
    time.sleep(3)
    return "late"


@task(takes_context=True, metadata={"source": "definition"})
def annotate(context, trace):
    context.metadata["trace"] = trace
    context.metadata["attempt"] = context.attempt
    return sorted(context.metadata)


@task(every=3_600_000)
def hourly_report():
    return "reported"


@task
def echo_context(context):
    """A task whose own argument is named context (takes_context is False)."""
    return context


@task(takes_context=True)
def annotate_twice(context):
    context.metadata["saved"] = "early"
    context.save_metadata()
    context.metadata["after"] = "late"
    return "ok"


def _garbage_backoff(exception, task_result):
    return "5"          # not seconds: the retry rule cannot be read


@task(max_attempts=3, backoff=_garbage_backoff)
def badly_backed_off():
    raise ValueError("the task's own error")
