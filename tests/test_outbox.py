"""The persistence floor's enqueue side (issue 13, items 1-2;
docs/durability.md): enqueue on commit, and the durable outbox with its relay
in runechomq, on SQLite and on PostgreSQL (the machine's 127.0.0.1:5432;
skipped, saying so, where none answers). Real processes share a real
database and a real server."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import uuid

import pytest
import redis
from django.db import transaction

from echomq_django import Jobs
from echomq_django.models import OutboxEntry
from echomq_django.protocol.records import Outcome
from tests.conftest import stop_valkey_server
from tests.nodes import primaries
from tests.procs import ROOT, runechomq, stop, wait_for
from tests.testapp import jobs as testjobs

PG = {"host": "127.0.0.1", "port": 5432, "user": "postgres"}


def _pg_admin():
    import psycopg

    return psycopg.connect(dbname="postgres", autocommit=True, connect_timeout=2, **PG)


@pytest.fixture(params=["sqlite", "postgres"])
def shared_db(request, tmp_path):
    """A database every process of the test shares, migrated: its
    ECHOMQ_TEST_DB value (tests/settings.py) and a counter of outbox rows."""
    if request.param == "sqlite":
        path = str(tmp_path / "shared.sqlite3")
        value = path

        def outbox_rows():
            with sqlite3.connect(path) as db:
                return db.execute("SELECT COUNT(*) FROM echomq_django_outboxentry").fetchone()[0]
        drop = None
    else:
        try:
            admin = _pg_admin()
        except Exception as err:  # noqa: BLE001 - no server here: say so
            pytest.skip(f"PostgreSQL at 127.0.0.1:5432 not reachable ({err})")
        name = "echomq_test_" + uuid.uuid4().hex[:10]
        admin.execute(f'CREATE DATABASE "{name}"')
        value = f"postgres://postgres@127.0.0.1:5432/{name}"

        def outbox_rows():
            import psycopg

            with psycopg.connect(dbname=name, **PG) as db:
                return db.execute("SELECT COUNT(*) FROM echomq_django_outboxentry").fetchone()[0]

        def drop():
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.close()
    manage(value, None, "migrate", "--verbosity", "0")
    yield value, outbox_rows
    if drop is not None:
        drop()


def manage(db, url, *args, env=None, timeout=120):
    """Run ``python -m django <args>`` on the shared database; returns stdout."""
    environ = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings", PYTHONPATH=str(ROOT),
                   ECHOMQ_TEST_DB=db, **(env or {}))
    if url is not None:
        environ["ECHOMQ_TEST_SERVER_URL"] = url
    out = subprocess.run([sys.executable, "-m", "django", *args], cwd=ROOT, env=environ,
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def enqueue_tallies(db, url, queue, key, count):
    """``count`` tally jobs enqueued through the outbox by another process."""
    code = (f"from tests.testapp import jobs; fn = jobs.tally.using(queue={queue!r}, outbox=True)\n"
            f"hs = [fn.enqueue({key!r}) for _ in range({count})]\n"
            f"print(sorted({{str(h.outcome) for h in hs}}), len(hs))")
    return manage(db, url, "shell", "-c", code).strip().splitlines()[-1]


@pytest.mark.slow
def test_enqueues_while_the_server_is_down_all_run_once_when_it_is_back(
        shared_db, start_valkey, worker_procs, queue):
    db, outbox_rows = shared_db
    url, server = start_valkey()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    stop_valkey_server(server)                          # the server is away
    key = queue + ":runs"
    assert enqueue_tallies(db, url, queue, key, 1000).split() == ["['deferred']", "1000"]
    assert outbox_rows() == 1000                        # every enqueue succeeded, all kept
    url, server = start_valkey(port=port)               # back, empty
    client = redis.Redis.from_url(url, decode_responses=True)
    proc = runechomq(queue, "--concurrency", "8", url=url, env={"ECHOMQ_TEST_DB": db})
    worker_procs.append(proc)
    wait_for(lambda: client.scard(key) == 1000, timeout=60)
    wait_for(lambda: outbox_rows() == 0, timeout=30)   # kept until the job ended
    code, out = stop(proc)
    assert code == 0, out
    runs = testjobs.tally_runs(client, key)
    assert len(runs) == 1000 and set(runs.values()) == {1}   # each ran exactly once


@pytest.mark.slow
def test_two_relays_deliver_every_entry_once(shared_db, start_valkey, worker_procs, queue):
    db, outbox_rows = shared_db
    url, server = start_valkey()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    stop_valkey_server(server)
    key = queue + ":runs"
    enqueue_tallies(db, url, queue, key, 400)
    url, server = start_valkey(port=port)
    client = redis.Redis.from_url(url, decode_responses=True)
    env = {"ECHOMQ_TEST_DB": db}
    relays = [runechomq(queue, "--metronome-only", "-v", "2", url=url, env=env)
              for _ in range(2)]
    worker = runechomq(queue, "--without-metronome", "--concurrency", "8", url=url, env=env)
    worker_procs.extend([*relays, worker])
    wait_for(lambda: client.scard(key) == 400, timeout=90)
    wait_for(lambda: outbox_rows() == 0, timeout=30)
    outputs = [stop(p)[1] for p in (*relays, worker)]
    runs = testjobs.tally_runs(client, key)
    assert len(runs) == 400 and set(runs.values()) == {1}
    if db.startswith("postgres://"):
        # SKIP LOCKED: the relays took disjoint entries, none admitted twice.
        assert not any("on the bus already" in out for out in outputs), outputs


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_in_a_rolled_back_transaction_never_runs_and_a_committed_one_once(
        conn, redis_client, queue, worker_procs):
    key = queue + ":runs"
    fn = testjobs.tally.using(queue=queue)
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            dropped = fn.enqueue(key)
            assert dropped.outcome == Outcome.DEFERRED and dropped.job_id.startswith("JOB")
            raise RuntimeError("roll back")
    with transaction.atomic():
        kept = fn.enqueue(key)
        assert kept.outcome == Outcome.DEFERRED and Jobs(conn).get(queue, kept.job_id) is None
    assert Jobs(conn).get(queue, kept.job_id).state == "pending"     # sent at the commit
    assert Jobs(conn).get(queue, dropped.job_id) is None
    at_once = fn.enqueue(key)                         # outside a transaction: at once
    assert at_once.outcome == Outcome.ENQUEUED
    with transaction.atomic():                        # per call: at once
        now = fn.using(on_commit=False).enqueue(key)
        assert now.outcome == Outcome.ENQUEUED
    proc = runechomq(queue, "--burst")
    worker_procs.append(proc)
    assert stop(proc, sig=0, timeout=60)[0] == 0
    runs = testjobs.tally_runs(redis_client, key)
    assert runs == {kept.job_id: 1, at_once.job_id: 1, now.job_id: 1}


@pytest.mark.django_db(transaction=True)
def test_the_outbox_writes_in_the_callers_transaction(conn, queue):
    fn = testjobs.tally.using(queue=queue, outbox=True)
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            lost = fn.enqueue("k")
            assert OutboxEntry.objects.filter(job_id=lost.job_id).exists()
            raise RuntimeError("roll back")
    assert not OutboxEntry.objects.filter(job_id=lost.job_id).exists()
    assert Jobs(conn).get(queue, lost.job_id) is None
    with transaction.atomic():
        kept = fn.enqueue_many([("k",), ("k",)])
        assert OutboxEntry.objects.filter(queue=queue).count() == 2
        assert all(Jobs(conn).get(queue, h.job_id) is None for h in kept)
    # After the commit this process put them on the bus at once (the server
    # answers) and marked its rows admitted: they are kept until the jobs end.
    assert [Jobs(conn).get(queue, h.job_id).state for h in kept] == ["pending", "pending"]
    rows = OutboxEntry.objects.filter(queue=queue)
    assert rows.count() == 2 and all(r.admitted_at and r.epoch for r in rows)


@pytest.mark.slow
def test_an_outbox_job_survives_the_server_losing_its_data(shared_db, start_valkey,
                                                           worker_procs, queue):
    """Admitted, then the server loses everything before a worker runs: the
    relay sees the epoch gone and admits the jobs again; each runs once, and
    the rows go once the jobs have ended."""
    db, outbox_rows = shared_db
    url, _ = start_valkey()
    client = redis.Redis.from_url(url, decode_responses=True)
    key = queue + ":runs"
    enqueue_tallies(db, url, queue, key, 200)           # admitted at once (the server is up)
    assert client.zcard(f"emq:{{{queue}}}:pending") == 200 and outbox_rows() == 200
    client.flushall()                                   # the server loses its data
    proc = runechomq(queue, "--concurrency", "8", url=url, env={"ECHOMQ_TEST_DB": db})
    worker_procs.append(proc)
    wait_for(lambda: client.scard(key) == 200, timeout=60)
    wait_for(lambda: outbox_rows() == 0, timeout=30)
    code, out = stop(proc)
    assert code == 0, out
    runs = testjobs.tally_runs(client, key)
    assert len(runs) == 200 and set(runs.values()) == {1}
    assert "lost its data" in out


@pytest.mark.django_db(transaction=True)
def test_reconcile_keeps_running_jobs_forgets_ended_ones_and_readmits_lost_ones(
        conn, redis_client, queue):
    """One reconcile pass of the relay over four admitted entries: ended,
    waiting, deleted in the admin, and lost by the server (its last writes)."""
    from echomq_django.admin.actions import Actions
    from echomq_django.runtime.relay import Relay

    fn = testjobs.tally.using(queue=queue, outbox=True)
    ended, waiting, deleted, lost = (fn.enqueue("k") for _ in range(4))
    assert OutboxEntry.objects.filter(queue=queue, admitted_at__isnull=False).count() == 4
    jobs = Jobs(conn)
    claim = jobs.claim(queue, "w", 60_000)
    assert claim.job_id == ended.job_id
    jobs.ack(queue, claim.job_id, claim.token)
    assert Actions(conn).delete(queue, deleted.job_id) == "deleted"
    redis_client.delete(f"emq:{{{queue}}}:job:{lost.job_id}")   # as a lost write leaves it
    redis_client.zrem(f"emq:{{{queue}}}:pending", lost.job_id)
    relay = Relay(conn, aliases=["default"])
    assert relay.reconcile_once() == (1, 1)           # ended deleted; lost admitted again
    left = set(OutboxEntry.objects.filter(queue=queue).values_list("job_id", flat=True))
    assert left == {waiting.job_id, lost.job_id}      # the admin's delete took its entry
    assert jobs.get(queue, lost.job_id).state == "pending"
    assert jobs.get(queue, deleted.job_id) is None    # not brought back


@pytest.mark.django_db(transaction=True)
def test_an_outbox_enqueue_never_waits_on_a_server_that_does_not_answer(redis_client, queue):
    """CLIENT PAUSE: the server takes connections and answers nothing. The
    outbox enqueue mints its id without a round trip, and the send after the
    commit gives up after a quarter second, then leaves the rows to the relay
    for a second."""
    import time

    fn = testjobs.tally.using(queue=queue, outbox=True)
    fn.using(outbox=False).enqueue("warm")           # this process measured the clock once
    for node in primaries(redis_client):          # the queue's node, wherever it is
        node.execute_command("CLIENT", "PAUSE", 1500, "ALL")
    started = time.monotonic()
    handles = [fn.enqueue("k") for _ in range(5)]
    took = time.monotonic() - started
    assert took < 1.0, took                          # not 5 x a socket timeout
    assert {str(h.outcome) for h in handles} == {"deferred"}
    assert OutboxEntry.objects.filter(queue=queue).count() == 5
    time.sleep(1.6)                                  # let the pause end before the next test


def test_the_archive_writes_a_nul_on_any_database(shared_db):
    """A NUL in a job's arguments (PostgreSQL's text holds none): the record
    is written with U+FFFD in its place, and a record the database refuses
    anyway is set aside while the rest of its batch is written."""
    db, _ = shared_db
    code = (
        "from echomq_django.runtime.archive_records import bulk_insert\n"
        "from echomq_django.models import JobRecord\n"
        "import datetime as dt\n"
        "t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)\n"
        "base = dict(queue='q', lane='', function='f', kwargs={}, state='done', reason='',\n"
        "            attempts=1, errors=[], result=None, enqueued_at=t, started_at=t,\n"
        "            finished_at=t, worker='w')\n"
        "bulk_insert([dict(base, job_id='JOB1', args=['a\\x00b']),\n"
        "             dict(base, job_id='JOB2', args=['plain'], reason='r\\x00'),\n"
        "             dict(base, job_id='J' * 300, args=[])])\n"
        "print(sorted((r.job_id, r.args[0], r.reason) for r in JobRecord.objects.all()\n"
        "             if len(r.job_id) < 10), JobRecord.objects.count())\n")
    out = manage(db, None, "shell", "-c", code).strip().splitlines()[-1]
    if db.startswith("postgres://"):
        # The 300-character id is refused there (its column holds 200) and
        # set aside; the rest of its batch is written.
        assert out == "[('JOB1', 'a\ufffdb', ''), ('JOB2', 'plain', 'r\ufffd')] 2"
    else:
        assert out == "[('JOB1', 'a\\x00b', ''), ('JOB2', 'plain', 'r\\x00')] 3"


def test_using_names_a_database_or_is_refused():
    with pytest.raises(ValueError, match="DATABASES"):
        testjobs.tally.using(using="nope")
    with pytest.raises(TypeError, match="using"):
        testjobs.tally.using(using="")
    assert testjobs.tally.using(using="default").route.using == "default"
