"""Django's Tasks API on EchoMQ (issue 12), written against Django's public
API only: the ``TASKS`` setting, ``@task`` (tests/testapp/tasks.py),
``enqueue``, ``get_result``, ``refresh`` and the signals, with a real
runechomq (in this process, so the worker's signals are heard here, or as a
subprocess) and a real server. Django 6's ``django.tasks``, or on Django 5.2
the django-tasks backport."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

try:
    from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:  # Django 5.2 with the backport
    from django_tasks import TaskResultStatus, default_task_backend, task, task_backends
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started

from echomq_django.runtime.consumer import Consumer
from echomq_django.runtime.outcome import Retention
from tests.procs import kill_all, runechomq, stop, wait_for
from tests.testapp import tasks


@pytest.fixture(autouse=True)
def _no_database(monkeypatch):
    # The runner resets Django's database connections around each handler;
    # these tasks use no database (as in tests/test_consumer.py).
    monkeypatch.setattr("echomq_django.runtime.outcome.close_old_connections", lambda: None)


def drain(conn, queue, concurrency=2):
    """Run every ready task of ``queue`` in this process (runechomq --burst)."""
    consumer = Consumer(conn, [queue], concurrency=concurrency, lease_ms=30_000, burst=True,
                        retention=Retention(3_600_000, 3_600_000, 100))
    consumer.start()
    wait_for(lambda: not consumer.alive(), timeout=30)
    consumer.shutdown(0)


class Heard:
    """Every task signal sent while it listens, as (signal name, status, id)."""

    def __init__(self):
        self.events = []

    def __enter__(self):
        for name, sig in (("enqueued", task_enqueued), ("started", task_started),
                          ("finished", task_finished)):
            receiver = self._receiver(name)
            setattr(self, name, receiver)
            sig.connect(receiver, weak=False)
        return self

    def _receiver(self, name):
        def receive(sender, task_result, **kwargs):
            self.events.append((name, task_result.status, task_result.id, sender))
        return receive

    def __exit__(self, *exc):
        task_enqueued.disconnect(self.enqueued)
        task_started.disconnect(self.started)
        task_finished.disconnect(self.finished)


# -- the backend, configured the Django way -------------------------------------


def test_the_backend_says_what_it_supports_and_builds_without_io():
    backend = task_backends["default"]
    assert type(backend).__module__.startswith("echomq_django.")
    assert backend.supports_defer and backend.supports_priority
    assert backend.supports_get_result and backend.supports_async_task
    with override_settings(TASKS={"default": {
            "BACKEND": "echomq_django.tasks.EchoMQBackend",
            "OPTIONS": {"MAX_ATTEMPTS": 2}},
            "ECHOMQ": {"URL": "redis://127.0.0.1:1/0"}}):
        assert task_backends["default"].max_attempts == 2   # nothing was sent


def test_check_reports_bad_options_and_queue_names():
    with override_settings(TASKS={"default": {
            "BACKEND": "echomq_django.tasks.EchoMQBackend", "QUEUES": ["ok", "a b"],
            "OPTIONS": {"MAX_ATTEMPTS": 0, "COLOUR": "red"}}}):
        errors = task_backends["default"].check()
    ids = sorted(e.id for e in errors)
    assert ids == ["echomq.E101", "echomq.E102", "echomq.E103"], errors
    assert any("MAX_ATTEMPTS" in e.msg for e in errors)
    assert any("COLOUR" in e.msg for e in errors)


# -- enqueue: validation --------------------------------------------------------


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


def test_non_json_arguments_raise_type_error_and_write_nothing(queue, redis_client):
    with pytest.raises(TypeError):
        tasks.add.using(queue_name=queue).enqueue(object(), 1)
    with pytest.raises(TypeError):
        tasks.add.using(queue_name=queue).enqueue(float("nan"), 1)
    with pytest.raises(TypeError, match="add"):
        tasks.add.using(queue_name=queue).enqueue(1, 2, 3)       # does not fit add(a, b)
    assert redis_client.keys(f"emq:{{{queue}}}:*") == []


def test_enqueue_returns_a_ready_result(queue):
    with Heard() as heard:
        result = tasks.add.using(queue_name=queue).enqueue(1, (2, 3))
    assert result.status == TaskResultStatus.READY
    assert result.id.startswith(queue + ":")
    assert result.args == [1, [2, 3]] and result.kwargs == {}
    assert result.backend == "default"
    assert timezone.is_aware(result.enqueued_at)
    assert abs((timezone.now() - result.enqueued_at).total_seconds()) < 5
    assert result.started_at is None and result.finished_at is None
    assert result.worker_ids == [] and result.errors == []
    assert [(name, status) for name, status, _, _ in heard.events] == [
        ("enqueued", TaskResultStatus.READY)]
    fetched = default_task_backend.get_result(result.id)
    assert fetched.status == TaskResultStatus.READY and fetched.args == [1, [2, 3]]
    assert fetched.task.func is tasks.add.func and fetched.task.queue_name == queue


# -- runechomq runs tasks -------------------------------------------------------


def test_a_task_runs_to_successful_with_its_signals(conn, queue):
    with Heard() as heard:
        result = tasks.add.using(queue_name=queue).enqueue(2, 3)
        drain(conn, queue)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.started_at <= result.last_attempted_at <= result.finished_at
    assert len(result.worker_ids) == 1 and result.attempts == 1
    assert [(name, str(status)) for name, status, rid, _ in heard.events if rid == result.id] == [
        ("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]
    assert {sender for *_, sender in heard.events} == {type(task_backends["default"])}


def test_takes_context_and_async_tasks(conn, queue):
    ctx = tasks.whoami.using(queue_name=queue).enqueue("hi")
    doubled = tasks.async_double.using(queue_name=queue).enqueue(21)
    drain(conn, queue)
    ctx.refresh()
    doubled.refresh()
    assert ctx.return_value == {"attempt": 1, "id": ctx.id, "note": "hi", "status": "RUNNING"}
    assert doubled.status == TaskResultStatus.SUCCESSFUL and doubled.return_value == 42


def test_failures_are_failed_with_the_exception_and_its_traceback(conn, queue):
    with Heard() as heard:
        failed = tasks.fail.using(queue_name=queue).enqueue("no luck")
        exited = tasks.exit_now.using(queue_name=queue).enqueue()
        odd = tasks.non_json.using(queue_name=queue).enqueue()
        drain(conn, queue)
    for result in (failed, exited, odd):
        result.refresh()
        assert result.status == TaskResultStatus.FAILED, result
        assert result.finished_at is not None and len(result.errors) == 1
        with pytest.raises(ValueError):
            result.return_value
    assert failed.errors[-1].exception_class is ValueError
    assert failed.errors[-1].traceback.endswith("ValueError: no luck\n")
    assert exited.errors[-1].exception_class is SystemExit
    assert odd.errors[-1].exception_class is TypeError
    finished = {rid: str(status) for name, status, rid, _ in heard.events if name == "finished"}
    assert finished == {failed.id: "FAILED", exited.id: "FAILED", odd.id: "FAILED"}


def test_get_result_knows_only_the_id(queue):
    result = tasks.add.using(queue_name=queue).enqueue(1, 1)
    assert default_task_backend.get_result(result.id).id == result.id
    for bad in ["", "nope", f"{queue}:JOB01NOTANID", f"{queue}:JOB01M8S2BNQP05QJR20QB9AMG2YX",
                "a:b:c", 42, None]:
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


def test_async_enqueue_and_get_result(queue):
    from asgiref.sync import async_to_sync

    async def go():
        result = await tasks.add.using(queue_name=queue).aenqueue(4, 5)
        fetched = await tasks.add.aget_result(result.id)
        await fetched.arefresh()
        return result, fetched

    result, fetched = async_to_sync(go)()
    assert fetched.id == result.id and fetched.status == TaskResultStatus.READY


# -- priority and run_after -----------------------------------------------------


def test_priority_orders_the_queue(conn, queue, redis_client):
    key = queue + ":order"
    for value, priority in [("low", -10), ("mid", 0), ("high", 100), ("mid2", 0)]:
        tasks.record.using(queue_name=queue, priority=priority).enqueue(key, value)
    drain(conn, queue, concurrency=1)
    assert redis_client.lrange(key, 0, -1) == ["high", "mid", "mid2", "low"]


@pytest.mark.slow
def test_run_after_is_honoured_on_the_server_clock_never_early(queue, worker_procs,
                                                              server_time_ms):
    now = dt.datetime.fromtimestamp(server_time_ms() / 1000, tz=dt.timezone.utc)
    at = tasks.add.using(queue_name=queue, run_after=now + dt.timedelta(seconds=1)).enqueue(1, 2)
    later = tasks.add.using(queue_name=queue, run_after=dt.timedelta(milliseconds=800)).enqueue(
        3, 4)
    assert default_task_backend.get_result(at.id).status == TaskResultStatus.READY
    proc = runechomq(queue, "--concurrency", "2")
    worker_procs.append(proc)
    for result in (at, later):
        wait_for(lambda r=result: default_task_backend.get_result(r.id).is_finished, timeout=20)
    assert stop(proc)[0] == 0
    at.refresh()
    later.refresh()
    assert at.return_value == 3 and later.return_value == 7
    assert at.started_at >= now + dt.timedelta(seconds=1)          # never early
    assert later.started_at >= later.enqueued_at + dt.timedelta(milliseconds=800)


# -- transactions ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_inside_a_transaction_is_sent_at_once(queue):
    """Django enqueues at once (no enqueue-on-commit yet): a rolled-back
    transaction still leaves the task enqueued."""
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            result = tasks.add.using(queue_name=queue).enqueue(1, 2)
            assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY
            raise RuntimeError("roll back")
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY


# -- recovery: the test the reference backend fails -----------------------------


@pytest.mark.slow
def test_a_task_whose_worker_is_sigkilled_runs_again_and_succeeds(queue, worker_procs,
                                                                  redis_client):
    key = queue + ":hold"
    result = tasks.hold.using(queue_name=queue).enqueue(key)
    first = runechomq(queue, "--lease-ms", "1000", "--concurrency", "1")
    worker_procs.append(first)
    wait_for(lambda: redis_client.lrange(key, 0, -1) == ["started"], timeout=20)
    running = default_task_backend.get_result(result.id)
    assert running.status == TaskResultStatus.RUNNING and len(running.worker_ids) == 1
    kill_all(first)                                   # SIGKILL, mid-task
    redis_client.set(key + ":go", 1)
    second = runechomq(queue, "--lease-ms", "1000", "--concurrency", "1")
    worker_procs.append(second)
    wait_for(lambda: default_task_backend.get_result(result.id).is_finished, timeout=20)
    assert stop(second)[0] == 0
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == "released"
    assert len(result.worker_ids) == 2 and result.attempts == 2
    assert redis_client.lrange(key, 0, -1) == ["started", "started"]


# -- EchoMQ's extensions through task_class -------------------------------------


def test_max_attempts_and_a_backoff_policy_retry(conn, queue):
    key = queue + ":flaky"
    with Heard() as heard:
        result = tasks.flaky.using(queue_name=queue).enqueue(key, 2)
        for _ in range(3):
            drain(conn, queue)
            _promote_due(conn, queue)       # the retry waits 10 ms on the schedule
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.attempts == 3
    assert [e.exception_class for e in result.errors] == [ConnectionError, ConnectionError]
    finished = [str(status) for name, status, rid, _ in heard.events
                if name == "finished" and rid == result.id]
    assert finished == ["READY", "READY", "SUCCESSFUL"]


def _promote_due(conn, queue):
    """Promote what is due, waiting out the short backoffs these tasks use."""
    from echomq_django import Jobs

    schedule = f"emq:{{{queue}}}:schedule"
    wait_for(lambda: Jobs(conn).promote(queue) >= 0 and conn.zcard(schedule) == 0, timeout=5)


def test_a_backoff_callable_answering_none_stops_retrying(conn, queue):
    result = tasks.picky.using(queue_name=queue).enqueue(queue + ":picky")
    drain(conn, queue)
    _promote_due(conn, queue)
    drain(conn, queue)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.attempts == 2
    assert [e.exception_class for e in result.errors] == [ConnectionError, KeyError]


@pytest.mark.slow
def test_a_timeout_fails_the_attempt_with_a_timeout_error(queue, worker_procs):
    result = tasks.too_slow.using(queue_name=queue).enqueue()
    proc = runechomq(queue, "--concurrency", "1")
    worker_procs.append(proc)
    wait_for(lambda: default_task_backend.get_result(result.id).is_finished, timeout=20)
    stop(proc)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert issubclass(result.errors[-1].exception_class, TimeoutError)


def test_metadata_is_given_read_written_and_kept(conn, queue):
    result = tasks.annotate.using(queue_name=queue, metadata={"source": "call"}).enqueue("t-1")
    assert result.metadata == {"source": "call"}
    drain(conn, queue)
    result.refresh()
    assert result.return_value == ["attempt", "source", "trace"]
    assert result.metadata == {"source": "call", "trace": "t-1", "attempt": 1}
    plain = tasks.annotate.using(queue_name=queue).enqueue("t-2")
    assert plain.metadata == {"source": "definition"}


def test_group_puts_a_task_in_a_lane(queue, redis_client):
    result = tasks.add.using(queue_name=queue, group="chat-7").enqueue(1, 2)
    job_id = result.id.split(":")[1]
    assert redis_client.hget(f"emq:{{{queue}}}:job:{job_id}", "group") == "chat-7"
    assert redis_client.zscore(f"emq:{{{queue}}}:g:chat-7:pending", job_id) is not None


def test_bad_extension_options_are_invalid_task():
    with pytest.raises(InvalidTask, match="max_attempts"):
        task(max_attempts=0)(tasks.add.func)
    with pytest.raises(InvalidTask, match="group"):
        tasks.add.using(group="has space")
    with pytest.raises(InvalidTask, match="metadata"):
        tasks.add.using(metadata=["not", "a", "dict"])
    with pytest.raises(InvalidTask, match="cron"):
        task(cron="61 * * * *")(tasks.hourly_report.func)


def test_a_recurring_task_is_declared_like_a_recurring_job():
    from echomq_django.api import registry

    declared = {d["name"]: d for d in registry.schedules()}
    entry = declared["tests.testapp.tasks.hourly_report"]
    assert entry["every_ms"] == 3_600_000 and entry["template"]["task"] == 1


def test_a_task_argument_named_context_is_the_callers(conn, queue):
    result = tasks.echo_context.using(queue_name=queue).enqueue(context={"a": 1})
    drain(conn, queue)
    result.refresh()
    assert result.return_value == {"a": 1}


def test_metadata_saved_mid_run_and_changed_after_keeps_both(conn, queue):
    result = tasks.annotate_twice.using(queue_name=queue).enqueue()
    drain(conn, queue)
    result.refresh()
    assert result.metadata == {"saved": "early", "after": "late"}


def test_manage_py_check_reports_the_backend_options():
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    with override_settings(TASKS={"default": {
            "BACKEND": "echomq_django.tasks.EchoMQBackend", "OPTIONS": {"RETRIES": 3}}}):
        with pytest.raises(SystemCheckError, match="echomq.E101"):
            call_command("check")
