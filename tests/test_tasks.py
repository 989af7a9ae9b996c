"""Django's Tasks API on EchoMQ (issue 12), written against Django's public
API only: the ``TASKS`` setting, ``@task`` (tests/testapp/tasks.py, which
also records every task signal its process sends), ``enqueue``,
``get_result``, ``refresh`` and the signals, with real runechomq processes
and a real server. Django 6's ``django.tasks``, or on Django 5.2 the
django-tasks backport."""

from __future__ import annotations

import datetime as dt
import os
import time

import pytest
import redis
from django.conf import settings
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

try:
    from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
except ImportError:  # Django 5.2 with the backport
    from django_tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch

from tests import nodes
from tests.procs import kill_all, killing_connections, runechomq, stop, wait_for
from tests.testapp import tasks

pytestmark = pytest.mark.slow

READY, RUNNING = TaskResultStatus.READY, TaskResultStatus.RUNNING
SUCCESSFUL, FAILED = TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED


@pytest.fixture(scope="module")
def served(valkey_url):
    """A queue a runechomq process (consumers and metronome) serves for the
    whole module; yields its name. Waits for the worker's readiness (its first
    task done), never for a guessed start-up time."""
    queue = "tasks-" + os.urandom(4).hex()
    proc = runechomq(queue, "--concurrency", "4")
    try:
        probe = tasks.add.using(queue_name=queue).enqueue(0, 0)
        wait_for(lambda: get(probe).is_finished, timeout=60)
        yield queue
        code, out = stop(proc)
        assert code == 0, out
    finally:
        if proc.poll() is None:
            kill_all(proc)


def get(result):
    return default_task_backend.get_result(result.id)


def finished(result, timeout=30):
    """Wait until ``result`` is SUCCESSFUL or FAILED; refresh and return it."""
    wait_for(lambda: get(result).is_finished, timeout=timeout)
    result.refresh()
    return result


def heard(redis_client, result, count=1):
    """The signals sent for ``result``: [(name, status, sender, pid)], once
    there are ``count`` (the worker sends task_finished after it has recorded
    the outcome, so a finished result may be read before its signal)."""
    key = tasks.signals_key(result.id)
    wait_for(lambda: redis_client.llen(key) >= count)
    return [tuple(line.split("|")) for line in redis_client.lrange(key, 0, -1)]


# -- the backend, configured the Django way -------------------------------------


def test_the_backend_says_what_it_supports_and_builds_without_io():
    backend = task_backends["default"]
    assert type(backend).__name__ == "EchoMQBackend"
    assert backend.supports_defer and backend.supports_priority
    assert backend.supports_get_result and backend.supports_async_task
    # Nothing listens at port 1: building the backend and reading its options
    # would fail if they touched the server.
    with override_settings(TASKS={"default": {
            "BACKEND": "echomq_django.tasks.EchoMQBackend", "OPTIONS": {"MAX_ATTEMPTS": 2}}},
            ECHOMQ={"URL": "redis://127.0.0.1:1/0"}):
        assert task_backends["default"].max_attempts == 2


def test_check_reports_bad_options_and_queue_names():
    with override_settings(TASKS={"default": {
            "BACKEND": "echomq_django.tasks.EchoMQBackend", "QUEUES": ["ok", "a b"],
            "OPTIONS": {"MAX_ATTEMPTS": 0, "COLOUR": "red"}}}):
        errors = task_backends["default"].check()
    assert sorted(e.id for e in errors) == ["echomq.E101", "echomq.E102", "echomq.E103"], errors
    assert any("MAX_ATTEMPTS" in e.msg for e in errors)
    assert any("COLOUR" in e.msg for e in errors)


@pytest.mark.django_db  # the model checks ask the database what it supports (JSONField)
def test_manage_py_check_reports_the_backend_options():
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    with override_settings(TASKS={"default": {
            "BACKEND": "echomq_django.tasks.EchoMQBackend", "OPTIONS": {"RETRIES": 3}}}):
        with pytest.raises(SystemCheckError, match="echomq.E101"):
            call_command("check")


# -- enqueue --------------------------------------------------------------------


def test_enqueue_validates_as_django_says(queue):
    def local():
        pass

    with pytest.raises(InvalidTask, match="module level"):
        task(local)
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=101)
    with pytest.raises(InvalidTask, match="aware"):
        tasks.add.using(run_after=dt.datetime(2030, 1, 1))
    with override_settings(TASKS={"default": {
            "BACKEND": "echomq_django.tasks.EchoMQBackend", "QUEUES": ["only"]}}):
        with pytest.raises(InvalidTask, match="Queue"):
            tasks.add.using(queue_name=queue).enqueue(1, 2)
    with pytest.raises(InvalidTask, match="queue"):
        tasks.add.using(queue_name="no spaces please")
    with pytest.raises(InvalidTask, match="run_after"):
        tasks.add.using(run_after=dt.timedelta(seconds=-1))


def test_non_json_arguments_raise_type_error_and_write_nothing(queue, redis_client):
    for args in [(object(), 1), (float("nan"), 1), ({1: "int key"}, 1), (1, 2, 3)]:
        with pytest.raises(TypeError):
            tasks.add.using(queue_name=queue).enqueue(*args)
    assert nodes.keys(redis_client, f"emq:{{{queue}}}:*") == []


def test_enqueue_returns_a_ready_result(queue, redis_client):
    result = tasks.add.using(queue_name=queue).enqueue(1, (2, 3))
    assert result.status == READY
    assert result.id.startswith(queue + ":")
    assert result.args == [1, [2, 3]] and result.kwargs == {}
    assert result.backend == "default"
    assert timezone.is_aware(result.enqueued_at)
    assert abs((timezone.now() - result.enqueued_at).total_seconds()) < 5
    assert result.started_at is None and result.finished_at is None
    assert result.worker_ids == [] and result.errors == []
    assert heard(redis_client, result) == [("enqueued", "READY", "EchoMQBackend",
                                            str(os.getpid()))]
    fetched = get(result)
    assert fetched.status == READY and fetched.args == [1, [2, 3]]
    assert fetched.task.func is tasks.add.func and fetched.task.queue_name == queue


def test_async_enqueue_and_get_result(queue):
    from asgiref.sync import async_to_sync

    async def go():
        result = await tasks.add.using(queue_name=queue).aenqueue(4, 5)
        fetched = await tasks.add.aget_result(result.id)
        await fetched.arefresh()
        return result, fetched

    result, fetched = async_to_sync(go)()
    assert fetched.id == result.id and fetched.status == READY and fetched.args == [4, 5]


def test_get_result_knows_only_the_id(queue):
    result = tasks.add.using(queue_name=queue).enqueue(1, 1)
    assert get(result).id == result.id
    for bad in ["", "nope", f"{queue}:JOB01NOTANID", f"{queue}:JOB01M8S2BNQP05QJR20QB9AMG2YX",
                "a:b:c", f"bad queue:{result.id.split(':')[1]}", 42, None]:
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(bad)
    with pytest.raises(TaskResultMismatch):
        tasks.fail.get_result(result.id)
    assert tasks.add.get_result(result.id).args == [1, 1]


def test_get_result_of_a_plain_job_is_not_a_task_result(queue):
    from tests.testapp import jobs as testjobs

    handle = testjobs.add.using(queue=queue).enqueue(1, 2)
    with pytest.raises(TaskResultDoesNotExist, match="not a task"):
        default_task_backend.get_result(f"{queue}:{handle.job_id}")


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_inside_a_transaction_is_sent_when_it_commits(queue):
    """ECHOMQ["ENQUEUE_ON_COMMIT"] (default True): inside transaction.atomic()
    a task is enqueued when the transaction commits, never if it rolls back;
    its TaskResult and id exist at once."""
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            dropped = tasks.add.using(queue_name=queue).enqueue(1, 2)
            assert dropped.status == READY and dropped.id.startswith(queue + ":")
            with pytest.raises(TaskResultDoesNotExist):
                get(dropped)                         # not on the bus before the commit
            raise RuntimeError("roll back")
    with pytest.raises(TaskResultDoesNotExist):
        get(dropped)                                 # and never after a rollback
    with transaction.atomic():
        kept = tasks.add.using(queue_name=queue).enqueue(3, 4)
        with pytest.raises(TaskResultDoesNotExist):
            get(kept)
    assert get(kept).status == READY and get(kept).args == [3, 4]
    with override_settings(ECHOMQ={**settings.ECHOMQ, "ENQUEUE_ON_COMMIT": False}):
        with transaction.atomic():
            at_once = tasks.add.using(queue_name=queue).enqueue(5, 6)
            assert get(at_once).status == READY      # Django's own default: at once


# -- runechomq runs tasks -------------------------------------------------------


def test_a_task_runs_to_successful_with_its_signals(served, redis_client, valkey_url):
    result = finished(tasks.add.using(queue_name=served).enqueue(2, 3))
    assert result.status == SUCCESSFUL and result.return_value == 5
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.started_at == result.last_attempted_at
    assert len(result.worker_ids) == 1 and result.attempts == 1
    me = str(os.getpid())
    events = heard(redis_client, result, 3)
    # Each process sends its own, in order: enqueued here, started and then
    # finished in the worker (which may start it before this process's
    # receiver has run).
    assert [e for e in events if e[3] == me] == [("enqueued", "READY", "EchoMQBackend", me)]
    worker = [e for e in events if e[3] != me]
    assert [(name, status, sender) for name, status, sender, _ in worker] == [
        ("started", "RUNNING", "EchoMQBackend"), ("finished", "SUCCESSFUL", "EchoMQBackend")]
    assert worker[0][3] == worker[1][3]
    # Results live RESULT_TTL_MS (24 h by default) after the end.
    ttl_ms = redis_client.pttl(f"emq:{{{served}}}:job:{result.id.split(':')[1]}")
    assert 86_400_000 - 60_000 < ttl_ms <= 86_400_000


def test_takes_context_and_async_tasks(served):
    ctx = tasks.whoami.using(queue_name=served).enqueue("hi")
    doubled = tasks.async_double.using(queue_name=served).enqueue(21)
    assert finished(ctx).return_value == {"attempt": 1, "id": ctx.id, "note": "hi",
                                          "status": "RUNNING"}
    assert finished(doubled).return_value == 42


def test_a_task_argument_named_context_is_the_callers(served):
    result = finished(tasks.echo_context.using(queue_name=served).enqueue(context={"a": 1}))
    assert result.return_value == {"a": 1}


def test_failures_are_failed_with_the_exception_and_its_traceback(served, redis_client):
    failed = tasks.fail.using(queue_name=served).enqueue("no luck")
    exited = tasks.exit_now.using(queue_name=served).enqueue()
    odd = tasks.non_json.using(queue_name=served).enqueue()
    for result in (failed, exited, odd):
        finished(result)
        assert result.status == FAILED, result
        assert result.finished_at is not None and len(result.errors) == 1
        assert result.attempts == 1
        with pytest.raises(ValueError):
            result.return_value
        assert [e[:2] for e in heard(redis_client, result, 3) if e[0] != "enqueued"] == [
            ("started", "RUNNING"), ("finished", "FAILED")]
    assert failed.errors[-1].exception_class is ValueError
    assert failed.errors[-1].traceback.endswith("ValueError: no luck\n")
    assert exited.errors[-1].exception_class is SystemExit
    assert odd.errors[-1].exception_class is TypeError


def test_a_running_task_is_running_with_its_times_and_worker(served, redis_client):
    key = served + ":run-" + os.urandom(3).hex()
    result = tasks.hold.using(queue_name=served).enqueue(key)
    wait_for(lambda: redis_client.lrange(key, 0, -1) == ["started"])
    running = get(result)
    assert running.status == RUNNING and not running.is_finished
    assert running.started_at is not None and running.last_attempted_at == running.started_at
    assert len(running.worker_ids) == 1 and running.finished_at is None
    redis_client.set(key + ":go", 1)
    assert finished(result).return_value == "released"


def test_priority_orders_the_queue(queue, redis_client, worker_procs):
    key = queue + ":order"
    for value, priority in [("low", -10), ("mid", 0), ("high", 100), ("mid2", 0)]:
        tasks.record.using(queue_name=queue, priority=priority).enqueue(key, value)
    proc = runechomq(queue, "--burst", "--concurrency", "1")
    worker_procs.append(proc)
    code, out = stop(proc, sig=0, timeout=60)
    assert code == 0, out
    assert redis_client.lrange(key, 0, -1) == ["high", "mid", "mid2", "low"]


def test_run_after_is_honoured_on_the_server_clock_never_early(served, server_time_ms):
    now = dt.datetime.fromtimestamp(server_time_ms() / 1000, tz=dt.timezone.utc)
    at = tasks.add.using(queue_name=served, run_after=now + dt.timedelta(seconds=1)).enqueue(1, 2)
    later = tasks.add.using(queue_name=served, run_after=dt.timedelta(milliseconds=800)).enqueue(
        3, 4)
    assert get(at).status == READY and get(later).status == READY
    finished(at)
    finished(later)
    assert at.return_value == 3 and later.return_value == 7
    assert at.started_at >= now + dt.timedelta(seconds=1)          # never early
    assert later.started_at >= later.enqueued_at + dt.timedelta(milliseconds=800)


# -- recovery: the test the reference backend fails -----------------------------


def test_a_task_whose_worker_is_sigkilled_runs_again_and_succeeds(queue, worker_procs,
                                                                  redis_client):
    key = queue + ":hold"
    result = tasks.hold.using(queue_name=queue).enqueue(key)
    first = runechomq(queue, "--lease-ms", "1000", "--concurrency", "1")
    worker_procs.append(first)
    wait_for(lambda: redis_client.lrange(key, 0, -1) == ["started"], timeout=30)
    assert get(result).status == RUNNING and len(get(result).worker_ids) == 1
    kill_all(first)                                   # SIGKILL, mid-task
    redis_client.set(key + ":go", 1)
    second = runechomq(queue, "--lease-ms", "1000", "--concurrency", "1")
    worker_procs.append(second)
    finished(result)
    assert stop(second)[0] == 0
    assert result.status == SUCCESSFUL and result.return_value == "released"
    assert len(result.worker_ids) == 2 and result.attempts == 2
    assert redis_client.lrange(key, 0, -1) == ["started", "started"]


# -- EchoMQ's extensions through task_class -------------------------------------


def test_max_attempts_and_a_backoff_policy_retry(served, redis_client):
    result = finished(tasks.flaky.using(queue_name=served).enqueue(served + ":flaky", 2))
    assert result.status == SUCCESSFUL and result.attempts == 3
    assert len(result.worker_ids) == 3
    assert [e.exception_class for e in result.errors] == [ConnectionError, ConnectionError]
    assert [e[:2] for e in heard(redis_client, result, 7) if e[0] == "finished"] == [
        ("finished", "READY"), ("finished", "READY"), ("finished", "SUCCESSFUL")]


def test_a_backoff_callable_answering_none_stops_retrying(served):
    result = finished(tasks.picky.using(queue_name=served).enqueue(served + ":picky"))
    assert result.status == FAILED and result.attempts == 2
    assert [e.exception_class for e in result.errors] == [ConnectionError, KeyError]


def test_a_timeout_fails_the_attempt_with_a_timeout_error(served):
    started = time.monotonic()
    result = finished(tasks.too_slow.using(queue_name=served).enqueue())
    assert time.monotonic() - started < 2.9        # failed at its 1 s limit, not at its return
    assert result.status == FAILED
    assert issubclass(result.errors[-1].exception_class, TimeoutError)


def test_metadata_is_given_read_written_and_kept(served):
    result = tasks.annotate.using(queue_name=served, metadata={"source": "call"}).enqueue("t-1")
    assert result.metadata == {"source": "call"}
    finished(result)
    assert result.return_value == ["attempt", "source", "trace"]
    assert result.metadata == {"source": "call", "trace": "t-1", "attempt": 1}
    plain = tasks.annotate.using(queue_name=served).enqueue("t-2")
    assert plain.metadata == {"source": "definition"}
    twice = finished(tasks.annotate_twice.using(queue_name=served).enqueue())
    assert twice.metadata == {"saved": "early", "after": "late"}


def test_group_puts_a_task_in_a_lane(queue, redis_client):
    result = tasks.add.using(queue_name=queue, group="chat-7").enqueue(1, 2)
    job_id = result.id.split(":")[1]
    assert redis_client.hget(f"emq:{{{queue}}}:job:{job_id}", "group") == "chat-7"
    assert redis_client.zscore(f"emq:{{{queue}}}:g:chat-7:pending", job_id) is not None


def test_bad_extension_options_are_invalid_task():
    with pytest.raises(InvalidTask, match="max_attempts"):
        task(max_attempts=0)(tasks.add.func)
    with pytest.raises(InvalidTask, match="timeout"):
        task(timeout="soon")(tasks.add.func)
    with pytest.raises(InvalidTask, match="group"):
        tasks.add.using(group="has space")
    with pytest.raises(InvalidTask, match="metadata"):
        tasks.add.using(metadata=["not", "a", "dict"])
    with pytest.raises(InvalidTask, match="cron"):
        task(cron="61 * * * *")(tasks.hourly_report.func)
    with pytest.raises(InvalidTask, match="no arguments"):
        task(every=60_000)(tasks.add.func)


def test_a_recurring_task_is_declared_like_a_recurring_job():
    from echomq_django.api import registry

    declared = {d["name"]: d for d in registry.schedules()}
    entry = declared["tests.testapp.tasks.hourly_report"]
    assert entry["every_ms"] == 3_600_000 and entry["template"]["task"] == 1


def test_a_recurring_task_occurrence_is_a_task_result(served, conn):
    """runechomq synced the recurring task at boot; an occurrence (run now)
    is a job whose TaskResult any process reads."""
    from echomq_django import Repeat

    path = "tests.testapp.tasks.hourly_report"
    assert Repeat(conn).get("default", path) is not None
    job_id = Repeat(conn).run_now("default", path)
    result = default_task_backend.get_result(f"default:{job_id}")
    assert result.task.func is tasks.hourly_report.func and result.status == READY
    assert result.args == [] and result.kwargs == {}


def test_echomq_task_decorator_takes_the_options_on_any_django():
    from echomq_django.tasks import EchoMQTask
    from echomq_django.tasks import task as echomq_task

    made = echomq_task(max_attempts=2, timeout=dt.timedelta(seconds=5))(tasks.add.func)
    assert isinstance(made, EchoMQTask)
    assert made.max_attempts == 2 and made.timeout_ms == 5_000
    with pytest.raises(TypeError, match="run_after"):
        echomq_task(run_after=dt.timedelta(seconds=1))(tasks.add.func)


# -- what a newcomer broke (issue 12's review) ----------------------------------


def test_a_backoff_that_answers_garbage_fails_the_task_with_its_own_error(served):
    result = finished(tasks.badly_backed_off.using(queue_name=served).enqueue(), timeout=10)
    assert result.status == FAILED and result.attempts == 1
    assert [e.exception_class for e in result.errors] == [ValueError]


def test_a_task_runs_with_the_options_of_the_backend_it_was_enqueued_through(served):
    result = finished(tasks.fail.using(queue_name=served, backend="retrying").enqueue("x"))
    assert result.backend == "retrying"
    assert result.status == FAILED and result.attempts == 3     # retrying's MAX_ATTEMPTS
    assert get(result).backend == "retrying"


def test_the_timeout_error_reads_like_a_traceback(served):
    result = finished(tasks.too_slow.using(queue_name=served).enqueue())
    assert result.errors[-1].traceback.endswith(
        "JobTimeoutError: the handler overran its time limit of 1000 ms\n")


def module_level_outside_any_app():
    return 1


def test_a_task_outside_the_installed_apps_is_invalid():
    # tests/ is not an installed app (tests.testapp is): no worker would find it.
    with pytest.raises(InvalidTask, match="installed app"):
        task(module_level_outside_any_app)


def test_bad_values_at_enqueue_are_invalid_task_or_type_error(queue, redis_client):
    for priority in (True, float("nan"), 1.5):
        with pytest.raises(InvalidTask, match="priority"):
            tasks.add.using(priority=priority)
    with pytest.raises(InvalidTask, match="run_after"):
        tasks.add.using(run_after=dt.timedelta(days=999_999_999))
    looped = []
    looped.append(looped)
    with pytest.raises(TypeError, match="contain themselves"):
        tasks.add.using(queue_name=queue).enqueue(looped, 1)
    with pytest.raises(InvalidTask, match="metadata"):
        tasks.add.using(metadata={1: 2})
    with pytest.raises(InvalidTask, match="recurring"):
        task(tz="Europe/Berlin")(tasks.add.func)
    assert nodes.keys(redis_client, f"emq:{{{queue}}}:*") == []


def test_enqueued_at_is_the_servers_admission_time(queue):
    result = tasks.add.using(queue_name=queue).enqueue(1, 2)
    assert get(result).enqueued_at == result.enqueued_at


def test_check_reports_queues_and_options_of_the_wrong_shape():
    for params, words in [({"QUEUES": "default"}, "must be a list"),
                          ({"QUEUES": [5, None]}, "queue"),
                          ({"OPTIONS": {"BACKOFF": []}}, "BACKOFF"),
                          ({"OPTIONS": "x"}, "must be a dict")]:
        with override_settings(TASKS={"default": {
                "BACKEND": "echomq_django.tasks.EchoMQBackend", **params}}):
            errors = task_backends["default"].check()
        assert errors and any(words in e.msg for e in errors), (params, errors)


def test_an_enqueue_whose_connection_drops_is_neither_lost_nor_doubled(queue, redis_client):
    """CLIENT KILL every 20 ms while tasks are enqueued: a lost reply is sent
    again, and the id makes the repeat a no-op."""
    returned, refused = [], 0
    with killing_connections(redis_client):
        for i in range(300):
            try:
                returned.append(tasks.add.using(queue_name=queue).enqueue(i, 0).id)
            except redis.ConnectionError:
                refused += 1      # after three tries: ambiguous (see the asserts)
    pending = set(redis_client.zrange(f"emq:{{{queue}}}:pending", 0, -1))
    told = {r.split(":")[1] for r in returned}
    # Every task the caller was told of is there (once: an id is one member);
    # one whose three tries all failed may have been written by the first.
    assert told <= pending and len(pending - told) <= refused
    # Three tries each: without them, 2-13 of 300 are refused here.
    assert len(returned) + refused == 300 and refused <= 1
