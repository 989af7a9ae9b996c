"""The archiver in one process (issue 13, item 3; docs/archive.md): events
on the real server become JobRecord rows in the test database, acknowledged
only after the insert; a redelivery writes nothing twice; a row already gone
is skipped; a database failure leaves the batch pending; retention by age
and count. The runechomq processes' end-to-end run is tests/test_archive_runechomq.py."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection

from echomq_django import BrandedId, Jobs, Queues
from echomq_django.api import payload
from echomq_django.durability import Archive
from echomq_django.models import JobRecord
from echomq_django.protocol.keyspace import ARCHIVE_GROUP, Keyspace
from echomq_django.protocol.records import Finish
from echomq_django.runtime.archive_records import message_of
from echomq_django.runtime.archiver import Archiver

pytestmark = pytest.mark.django_db(transaction=True)

ARCHIVE = Archive(ttl_ms=86_400_000, max=1_000_000, stream_max=10_000)
TRACE = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad {n}\n'


def _envelope(*args, **kwargs):
    return payload.encode("tests.testapp.jobs.add", args, kwargs, 1 << 20)


def _pending(redis_client, queue):
    return redis_client.xpending(Keyspace(queue).archive, ARCHIVE_GROUP)["pending"]


def _fail_twice_then(jobs, queue, job_id, last):
    """Two failed attempts (each with its class and traceback), then ``last``."""
    for n in (1, 2):
        claim = jobs.claim(queue, f"host:{n}", 60_000)
        assert claim.job_id == job_id
        jobs.finish_many(queue, [Finish("retry", job_id, claim.token, delay_ms=0,
                                        error=TRACE.format(n=n),
                                        error_class="builtins.ValueError")])
        jobs.promote(queue)
    claim = jobs.claim(queue, "host:3", 60_000)
    if last == "dead":
        jobs.finish_many(queue, [Finish("dead", job_id, claim.token, reason="failed",
                                        error=TRACE.format(n=3),
                                        error_class="builtins.KeyError")])
    else:
        jobs.ack(queue, job_id, claim.token, {"sum": 3})


def test_ended_jobs_become_records_with_every_attempt_s_error(conn, redis_client, queue):
    jobs = Jobs(conn)
    Queues(conn).set_archive(queue, 1000)
    archiver = Archiver(conn, [queue], ARCHIVE, consumer="t")
    archiver.pass_once()   # creates the group; nothing yet
    done, dead, cancelled = (BrandedId.generate() for _ in range(3))
    jobs.enqueue(queue, done, _envelope(1, 2, tag="ü"), group="chat-7")
    _fail_twice_then(jobs, queue, done, "done")
    jobs.enqueue(queue, dead, _envelope(5))
    _fail_twice_then(jobs, queue, dead, "dead")
    jobs.enqueue(queue, cancelled, '{"raw": true}')
    jobs.cancel(queue, cancelled)
    assert archiver.pass_once() == 3
    assert _pending(redis_client, queue) == 0
    records = {r.job_id: r for r in JobRecord.objects.filter(queue=queue)}
    assert set(records) == {done, dead, cancelled}
    d = records[done]
    assert (d.state, d.lane, d.function, d.args, d.kwargs, d.attempts, d.result, d.worker) == (
        "done", "chat-7", "tests.testapp.jobs.add", [1, 2], {"tag": "ü"}, 3, {"sum": 3},
        "host:3")
    assert d.errors == [{"attempt": n, "class": "builtins.ValueError",
                         "message": f"ValueError: bad {n}", "traceback": TRACE.format(n=n)}
                        for n in (1, 2)]
    row = jobs.get(queue, done)
    assert d.finished_at == dt.datetime.fromtimestamp(row.finished_at_ms / 1000, dt.timezone.utc)
    assert d.started_at == dt.datetime.fromtimestamp(row.first_started_at_ms / 1000,
                                                     dt.timezone.utc)
    assert d.enqueued_at <= d.started_at <= d.finished_at
    x = records[dead]
    assert (x.state, x.reason, x.attempts, x.lane) == ("dead", "failed", 3, "")
    assert [(e["attempt"], e["class"], e["message"]) for e in x.errors] == [
        (1, "builtins.ValueError", "ValueError: bad 1"),
        (2, "builtins.ValueError", "ValueError: bad 2"),
        (3, "builtins.KeyError", "ValueError: bad 3")]
    c = records[cancelled]
    assert (c.state, c.function, c.args, c.attempts, c.errors, c.started_at) == (
        "cancelled", "", [{"raw": True}], 0, [], None)


def test_a_redelivered_event_writes_nothing_twice_and_a_gone_row_is_skipped(
        conn, redis_client, queue):
    jobs = Jobs(conn)
    Queues(conn).set_archive(queue, 1000)
    archiver = Archiver(conn, [queue], ARCHIVE, consumer="a", claim_idle_ms=0)
    archiver.pass_once()
    kept, gone = BrandedId.generate(), BrandedId.generate()
    for job_id in (kept, gone):
        jobs.enqueue(queue, job_id, _envelope())
        jobs.cancel(queue, job_id)
    redis_client.delete(Keyspace(queue).job(gone))
    # A crashed archiver read both events and died before its XACK.
    crashed = redis_client.xreadgroup(ARCHIVE_GROUP, "crashed", {Keyspace(queue).archive: ">"})
    assert len(crashed[0][1]) == 2
    JobRecord.objects.create(queue=queue, job_id=kept, state="cancelled")  # it did insert
    archiver._next_claim = {k: 0.0 for k in archiver._next_claim}
    assert archiver.pass_once() == 2       # taken over with XAUTOCLAIM
    assert _pending(redis_client, queue) == 0
    assert list(JobRecord.objects.filter(queue=queue).values_list("job_id", "function")) == [
        (kept, "tests.testapp.jobs.add")]


def test_a_database_failure_leaves_the_batch_pending_until_it_is_written(
        conn, redis_client, queue):
    jobs = Jobs(conn)
    Queues(conn).set_archive(queue, 1000)
    archiver = Archiver(conn, [queue], ARCHIVE, consumer="db")
    archiver.pass_once()
    ids = [BrandedId.generate() for _ in range(3)]
    for job_id in ids:
        jobs.enqueue(queue, job_id, _envelope())
        jobs.cancel(queue, job_id)
    table = JobRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{table}" RENAME TO "{table}_away"')
    try:
        with pytest.raises(Exception) as info:
            archiver.pass_once()
        assert "no such table" in str(info.value)
        assert _pending(redis_client, queue) == 3
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'ALTER TABLE "{table}_away" RENAME TO "{table}"')
    archiver._own = set(archiver.keys)      # what run() does after a failed batch
    assert archiver.pass_once() == 3
    assert _pending(redis_client, queue) == 0
    assert set(JobRecord.objects.filter(queue=queue).values_list("job_id", flat=True)) == set(ids)


def test_retention_deletes_by_age_then_the_oldest_beyond_max(conn, queue, server_time_ms):
    now = dt.datetime.fromtimestamp(server_time_ms() / 1000, dt.timezone.utc)
    ages_h = [100, 50, 30, 3, 2, 1]
    JobRecord.objects.bulk_create([
        JobRecord(queue=queue, job_id=f"JOB{i}", state="done",
                  finished_at=now - dt.timedelta(hours=h)) for i, h in enumerate(ages_h)])
    archiver = Archiver(conn, [queue], Archive(ttl_ms=48 * 3_600_000, max=3, stream_max=10))
    assert archiver.retention() == 3       # 100 h and 50 h by age, then 30 h beyond max
    assert sorted(JobRecord.objects.values_list("job_id", flat=True)) == ["JOB3", "JOB4",
                                                                         "JOB5"]
    assert archiver.retention() == 0


def test_message_is_the_traceback_s_last_line():
    assert message_of(TRACE.format(n=9)) == "ValueError: bad 9"
    assert message_of("") == "" and message_of("\n  \n") == ""


def test_an_archiver_needs_a_queue(conn):
    with pytest.raises(ValueError, match="at least one queue"):
        Archiver(conn, [], ARCHIVE)
