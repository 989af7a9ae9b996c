"""A handler's database connections are reset around its job as Django resets
them around a request (close_old_connections: a connection past its
CONN_MAX_AGE, 0 by default, is closed), in every handler thread that opened
one; a thread that never opened one asks nothing of Django."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from echomq_django.runtime import outcome
from echomq_django.runtime.consumer import Consumer, Retention
from tests.procs import state_of, wait_for
from tests.testapp import jobs as testjobs


def _consumer(conn, queue):
    return Consumer(conn, [queue], lease_ms=60_000, concurrency=1, burst=True,
                    retention=Retention(result_ttl_ms=3_600_000, dead_ttl_ms=3_600_000,
                                        dead_max=100))


def _count_resets(monkeypatch) -> list[str]:
    """The names of the threads that call close_old_connections from now on
    (counted, not replaced: the real one still runs)."""
    calls: list[str] = []
    real = outcome.close_old_connections

    def counted():
        calls.append(threading.current_thread().name)
        real()

    monkeypatch.setattr(outcome, "close_old_connections", counted)
    return calls


@pytest.mark.django_db(transaction=True)
def test_a_handler_thread_that_opened_a_connection_resets_it_after_each_job(
        conn, redis_client, queue, monkeypatch):
    calls = _count_resets(monkeypatch)
    key = f"{queue}:db"
    handles = [testjobs.db_connection_report.using(queue=queue).enqueue(key) for _ in range(3)]
    consumer = _consumer(conn, queue)
    consumer.start()
    wait_for(lambda: not consumer.alive())
    consumer.shutdown(0)
    assert [state_of(conn, queue, h.job_id) for h in handles] == ["done"] * 3
    assert len(redis_client.lrange(key, 0, -1)) == 3
    # One handler thread ran the three jobs. The first opened the connection
    # during its run, so a reset followed it, and one followed each job after
    # (the reset before a job is skipped while the one after the previous
    # job is under a second old).
    handler_calls = [name for name in calls if name.startswith("echomq-handler")]
    assert len(handler_calls) == 3, calls
    assert len(set(handler_calls)) == 1, calls


def test_a_thread_that_never_opened_a_connection_asks_nothing_of_django(monkeypatch):
    calls = _count_resets(monkeypatch)
    seen = {}

    def handler_thread():
        outcome._fresh_connections()
        outcome._after_handler()
        seen["initialized"] = [alias for alias in connections
                               if hasattr(connections._connections, alias)]

    thread = threading.Thread(target=handler_thread)
    thread.start()
    thread.join()
    assert calls == []
    assert seen["initialized"] == []
