"""The archive end to end (issue 13, "done when"): with ``ECHOMQ["ARCHIVE"]``
on, 10,000 jobs run by real runechomq processes (done, failed to dead after
three attempts, cancelled) give exactly 10,000 JobRecord rows with the right
states and every attempt's error, although the archiver (the metronome-only
process) is SIGKILLed midway and started again.

The processes share an SQLite file (``ECHOMQ_TEST_DB``, tests/settings.py),
migrated first; the test reads it with sqlite3.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from echomq_django import Jobs, Queues
from echomq_django.protocol.keyspace import ARCHIVE_GROUP, Keyspace
from tests.procs import ROOT, kill_all, runechomq, stop, wait_for
from tests.testapp import jobs as testjobs

pytestmark = pytest.mark.slow

N_DONE, N_DEAD, N_CANCELLED = 6_000, 2_000, 2_000
STREAM_MAX = 100_000


def _env(db):
    return {"ECHOMQ_TEST_DB": str(db),
            "ECHOMQ_TEST_ARCHIVE": json.dumps({"STREAM_MAX": STREAM_MAX})}


def _migrate(db):
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="tests.settings", PYTHONPATH=str(ROOT),
               **_env(db))
    subprocess.run([sys.executable, "-m", "django", "migrate", "--verbosity", "0"], cwd=ROOT,
                   env=env, check=True, timeout=120)


def _query(db, sql, *params):
    with sqlite3.connect(db, timeout=20) as con:
        return con.execute(sql, params).fetchall()


def _count(db):
    return _query(db, "SELECT COUNT(*) FROM echomq_django_jobrecord")[0][0]


def test_ten_thousand_jobs_are_archived_once_each_across_a_sigkilled_archiver(
        conn, redis_client, queue, tmp_path, worker_procs):
    db = tmp_path / "archive.sqlite3"
    _migrate(db)
    metronome = runechomq(queue, "--metronome-only", env=_env(db),
                          log_path=tmp_path / "metronome.log")
    worker_procs.append(metronome)
    wait_for(lambda: Queues(conn).archive_max(queue) == STREAM_MAX, timeout=30)
    jobs = Jobs(conn)
    done = testjobs.add.using(queue=queue).enqueue_many([(i, i) for i in range(N_DONE)])
    dead = testjobs.fail_every_attempt.using(queue=queue).enqueue_many(
        [(i,) for i in range(N_DEAD)])
    cancelled = testjobs.add.using(queue=queue).enqueue_many(
        [{"args": (i, 0), "delay": 3_600_000} for i in range(N_CANCELLED)])
    for handle in cancelled:
        assert jobs.cancel(queue, handle.job_id) == "cancelled"
    consumers = runechomq(queue, "--without-metronome", "--concurrency", "8", env=_env(db),
                          log_path=tmp_path / "consumers.log")
    worker_procs.append(consumers)

    # Midway: the archiver has written some records and not all.
    wait_for(lambda: _count(db) >= 1_000, timeout=60, step=0.05)
    kill_all(metronome)
    at_kill = _count(db)
    held = redis_client.xpending(Keyspace(queue).archive, ARCHIVE_GROUP)["pending"]
    assert at_kill < N_DONE + N_DEAD + N_CANCELLED
    metronome = runechomq(queue, "--metronome-only", env=_env(db),
                          log_path=tmp_path / "metronome.log")
    worker_procs.append(metronome)
    total = N_DONE + N_DEAD + N_CANCELLED
    try:
        wait_for(lambda: _count(db) >= total, timeout=90, step=0.1)
    except AssertionError:
        ks = Keyspace(queue)
        sets = {name: redis_client.zcard(getattr(ks, name))
                for name in ("pending", "schedule", "active", "dead")}
        raise AssertionError(f"{_count(db)} records of {total} (killed at {at_kill}, {held} "
                             f"held); sets {sets}, stream {redis_client.xlen(ks.archive)}, "
                             f"{redis_client.xinfo_groups(ks.archive)}, "
                             f"{redis_client.xinfo_consumers(ks.archive, ARCHIVE_GROUP)}:\n{kill_all(metronome)}\n{kill_all(consumers)}") from None
    # Nothing left to archive: every event acknowledged, none held.
    wait_for(lambda: redis_client.xpending(Keyspace(queue).archive,
                                           ARCHIVE_GROUP)["pending"] == 0, timeout=10)
    for proc in (consumers, metronome):
        code, out = stop(proc)
        assert code == 0, out

    assert _count(db) == total
    states = dict(_query(db, "SELECT state, COUNT(*) FROM echomq_django_jobrecord "
                             "WHERE queue = ? GROUP BY state", queue))
    assert states == {"done": N_DONE, "dead": N_DEAD, "cancelled": N_CANCELLED}
    by_id = {job_id: (state, json.loads(args), json.loads(errors), attempts, result, fn)
             for job_id, state, args, errors, attempts, result, fn in _query(
                 db, "SELECT job_id, state, args, errors, attempts, result, function "
                     "FROM echomq_django_jobrecord WHERE queue = ?", queue)}
    for i, handle in enumerate(done):
        state, args, errors, attempts, result, fn = by_id[handle.job_id]
        assert (state, args, errors, attempts, json.loads(result), fn) == (
            "done", [i, i], [], 1, 2 * i, "tests.testapp.jobs.add")
    for i, handle in enumerate(dead):
        state, args, errors, attempts, _, fn = by_id[handle.job_id]
        assert (state, args, attempts, fn) == ("dead", [i], 3,
                                               "tests.testapp.jobs.fail_every_attempt")
        assert [(e["attempt"], e["class"], e["message"]) for e in errors] == [
            (n, "builtins.ValueError", f"ValueError: job {i} attempt {n}") for n in (1, 2, 3)]
        assert all("Traceback" in e["traceback"] for e in errors)
    for handle in cancelled:
        state, _, errors, attempts, _, _ = by_id[handle.job_id]
        assert (state, errors, attempts) == ("cancelled", [], 0)
