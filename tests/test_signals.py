"""The signals of docs/observability.md: each fires once per event, from the
process where it happened, with the documented arguments; a receiver that
raises is logged and breaks nothing."""

from __future__ import annotations

import logging

import pytest
from django.db import transaction

from echomq_django import Jobs, signals
from echomq_django.protocol.records import Outcome
from echomq_django.runtime.consumer import Consumer, Retention
from echomq_django.runtime.outcome import Runner
from tests.procs import wait_for
from tests.testapp import jobs as testjobs

CHOOSE = "tests.testapp.jobs.choose"


@pytest.fixture(autouse=True)
def _no_database(monkeypatch):
    # As tests/test_consumer.py: these handlers use no database.
    monkeypatch.setattr("echomq_django.runtime.outcome.close_old_connections", lambda: None)


class Heard:
    """Connects a recorder to each signal for one test; ``by(name)`` is the
    list of keyword arguments each send carried (sender under "sender")."""

    NAMES = ("job_enqueued", "job_started", "job_finished", "worker_started", "worker_stopping")

    def __init__(self) -> None:
        self.sent: dict[str, list[dict]] = {name: [] for name in self.NAMES}
        self._receivers = []
        for name in self.NAMES:
            def receiver(sender, signal, _name=name, **kwargs):
                self.sent[_name].append(dict(kwargs, sender=sender))
            getattr(signals, name).connect(receiver, weak=False)
            self._receivers.append((name, receiver))

    def by(self, name: str, **match) -> list[dict]:
        return [s for s in self.sent[name] if all(s.get(k) == v for k, v in match.items())]

    def close(self) -> None:
        for name, receiver in self._receivers:
            getattr(signals, name).disconnect(receiver)


@pytest.fixture
def heard():
    h = Heard()
    yield h
    h.close()


def _run(conn, queue, **options):
    consumer = Consumer(conn, [queue], lease_ms=60_000, burst=True,
                        retention=Retention(3_600_000, 3_600_000, 100), **options)
    consumer.start()
    wait_for(lambda: not consumer.alive(), timeout=30)
    consumer.shutdown(0)
    return consumer


def test_job_enqueued_once_per_admission_with_its_arguments(conn, queue, heard):
    fn = testjobs.choose.using(queue=queue)
    now = fn.enqueue("k", "done")
    later = fn.using(group="chat-1", priority=5).enqueue_in(60_000, "k", "done")
    batch = fn.enqueue_many([("k", "done"), {"args": ("k", "done"), "when": 4_000_000_000_000}])
    sent = heard.by("job_enqueued", queue=queue)
    assert [s["job_id"] for s in sent] == [now.job_id, later.job_id, *(h.job_id for h in batch)]
    assert sent[0] == {"sender": Jobs, "queue": queue, "job_id": now.job_id, "path": CHOOSE,
                       "outcome": "enqueued", "group": None, "priority": 0,
                       "delay_ms": None, "run_at_ms": None}
    assert (sent[1]["outcome"], sent[1]["group"], sent[1]["priority"], sent[1]["delay_ms"]) == (
        "scheduled", "chat-1", 5, 60_000)
    assert [s["outcome"] for s in sent[2:]] == ["enqueued", "scheduled"]
    assert sent[3]["run_at_ms"] == 4_000_000_000_000


@pytest.mark.django_db(transaction=True)
def test_a_deferred_enqueue_is_heard_at_the_commit_and_never_after_a_rollback(
        conn, queue, heard):
    fn = testjobs.choose.using(queue=queue)
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            fn.enqueue("k", "done")
            raise RuntimeError("roll back")
    with transaction.atomic():
        kept = fn.enqueue("k", "done")
        assert kept.outcome == Outcome.DEFERRED
        assert heard.by("job_enqueued", queue=queue) == []
    sent = heard.by("job_enqueued", queue=queue)
    assert [(s["job_id"], s["outcome"]) for s in sent] == [(kept.job_id, "enqueued")]


def test_started_and_finished_once_per_run_with_each_outcome(conn, redis_client, queue, heard):
    fn = testjobs.choose.using(queue=queue)
    key = queue + ":runs"
    done = fn.enqueue(key, "done")
    snooze = fn.enqueue(key, "snooze_return", 60_000)
    retry = fn.enqueue(key, "retry", 60_000)
    discard = fn.enqueue(key, "discard")
    consumer = _run(conn, queue, concurrency=2)
    ids = {done.job_id: "done", snooze.job_id: "snooze", retry.job_id: "retry",
           discard.job_id: "dead"}
    for job_id, outcome in ids.items():
        (started,) = heard.by("job_started", job_id=job_id)
        (finished,) = heard.by("job_finished", job_id=job_id)
        assert started == {"sender": Runner, "queue": queue, "job_id": job_id, "path": CHOOSE,
                           "attempt": 1, "group": None, "worker": consumer.name}
        assert finished["outcome"] == outcome and finished["attempt"] == 1
        assert finished["sender"] is Runner and finished["path"] == CHOOSE
        assert isinstance(finished["duration_ms"], float) and finished["duration_ms"] >= 0
    by_id = {s["job_id"]: s for s in heard.sent["job_finished"]}
    assert by_id[done.job_id]["result"] == {"outcome": "done"}
    assert by_id[done.job_id]["error"] is None and by_id[done.job_id]["traceback"] is None
    assert by_id[snooze.job_id]["delay_ms"] == 60_000
    assert by_id[retry.job_id]["delay_ms"] == 60_000
    assert by_id[retry.job_id]["error_class"] == "echomq_django.api.outcomes.Retry"
    dead = by_id[discard.job_id]
    assert dead["reason"] == "the user was deleted"
    assert dead["error"].startswith("echomq_django.api.outcomes.Discard")
    assert "Traceback (most recent call last)" in dead["traceback"]
    assert len(heard.sent["job_finished"]) == 4 and len(heard.sent["job_started"]) == 4


def test_worker_started_and_stopping_once_each(conn, queue, heard):
    testjobs.choose.using(queue=queue).enqueue(queue + ":runs", "done")
    consumer = _run(conn, queue, concurrency=3)
    (started,) = heard.sent["worker_started"]
    (stopping,) = heard.sent["worker_stopping"]
    assert started == {"sender": Consumer, "worker": consumer.name, "queues": [queue],
                       "concurrency": 3}
    assert stopping == dict(started, processed=1)


def test_a_receiver_that_raises_is_logged_and_breaks_nothing(conn, queue, heard, caplog):
    def broken(sender, **kwargs):
        raise RuntimeError("receiver bug")

    for name in ("job_enqueued", "job_started", "job_finished"):
        getattr(signals, name).connect(broken)
    try:
        with caplog.at_level(logging.ERROR, logger="echomq.signals"):
            handle = testjobs.choose.using(queue=queue).enqueue(queue + ":runs", "done")
            _run(conn, queue, concurrency=1)
    finally:
        for name in ("job_enqueued", "job_started", "job_finished"):
            getattr(signals, name).disconnect(broken)
    assert Jobs(conn).get(queue, handle.job_id).state == "done"
    assert len(heard.by("job_finished", job_id=handle.job_id)) == 1   # the others still heard
    errors = [r for r in caplog.records if r.name == "echomq.signals"]
    assert len(errors) == 3 and all("receiver bug" in r.exc_text for r in errors)
