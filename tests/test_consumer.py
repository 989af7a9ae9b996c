"""The consumer's fetcher in this process, against the real test server: how
it uses fencing tokens across queues (docs/protocol.md, "Fencing tokens")."""

from __future__ import annotations

import logging
import time

import pytest
import redis

from echomq_django import Jobs
from echomq_django.api import payload
from echomq_django.connection.resilience import Backoff
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.runtime.claim_round import ClaimRound
from echomq_django.runtime.consumer import Consumer, Retention
from tests.procs import state_of, wait_for
from tests.testapp import jobs as testjobs


@pytest.fixture(autouse=True)
def _no_database(monkeypatch):
    # run_claim resets Django's database connections around the handler; an
    # earlier test of the session may have opened one that pytest-django then
    # forbids touching. These handlers use no database.
    monkeypatch.setattr("echomq_django.runtime.outcome.close_old_connections", lambda: None)


def _consumer(conn, queues, **options):
    return Consumer(conn, queues, lease_ms=60_000,
                    retention=Retention(result_ttl_ms=3_600_000, dead_ttl_ms=3_600_000,
                                        dead_max=100), **options)


def _batch(token: str) -> str:
    """The batch token a job's token was minted from (``<batch>.<i>``)."""
    return token.rsplit(".", 1)[0]


@pytest.fixture
def two_queues(queue):
    return [f"{queue}-a", f"{queue}-b"]


def test_one_round_over_two_queues_uses_a_token_per_queue(conn, redis_client, two_queues):
    key = f"{two_queues[0]}:tokens"
    handles = [testjobs.token_report.using(queue=q).enqueue(key) for q in two_queues]
    consumer = _consumer(conn, two_queues, concurrency=4, burst=True)
    consumer.start()
    wait_for(lambda: not consumer.alive())
    consumer.shutdown(0)
    assert [state_of(conn, h.queue, h.job_id) for h in handles] == ["done", "done"]
    seen = [line.split("|") for line in redis_client.lrange(key, 0, -1)]
    assert sorted(queue for queue, _, _ in seen) == two_queues
    tokens = [token for _, _, token in seen]
    # Both jobs were claimed in the fetcher's first round, one script per
    # queue; each script got a batch token of its own.
    assert len({_batch(t) for t in tokens}) == 2, tokens


def test_a_queue_whose_claim_reply_was_lost_answers_the_same_lease_next_round(
        conn, two_queues):
    jobs = Jobs(conn)
    first, second = two_queues
    handle = testjobs.add.using(queue=second).enqueue(1, 2)
    consumer = _consumer(conn, two_queues, concurrency=2)
    rounds = ClaimRound(jobs, consumer.name, 60_000, list(two_queues))
    rounds.tokens = tokens = {first: "lost-reply-a", second: "lost-reply-b"}
    # The fetcher's claim on the second queue ran on the server but its reply
    # never arrived: the server holds the lease for the queue's token.
    (lost,), _ = jobs.claim_many(second, consumer.name, 60_000, 2, token=tokens[second])
    claims: list = []
    rounds.run(2, claims)
    assert [(c.job_id, c.token) for c in claims] == [(handle.job_id, lost.token)]
    assert rounds.tokens[first] == "lost-reply-a"      # it claimed nothing: kept
    assert rounds.tokens[second] != "lost-reply-b"     # it answered a lease: never used again


def test_a_queue_whose_claim_fails_keeps_the_jobs_earlier_queues_claimed(
        conn, redis_client, two_queues, caplog):
    first, second = two_queues
    handle = testjobs.add.using(queue=first).enqueue(2, 3)
    # The second queue's claims index is corrupt: its claim fails every round
    # with WRONGTYPE (it reads the index first), an error that does not pass
    # on its own.
    redis_client.set(Keyspace(second).claims, "not a hash")
    consumer = _consumer(conn, two_queues, concurrency=2)
    with caplog.at_level(logging.ERROR, logger="echomq.consumer"):
        consumer.start()
        try:
            wait_for(lambda: state_of(conn, first, handle.job_id) == "done", timeout=10)
        finally:
            consumer.shutdown(1)
    assert Jobs(conn).get(first, handle.job_id).result_value == 5
    assert "claim failed" in caplog.text and "WRONGTYPE" in caplog.text


# -- the hot path (issue 11): finish and fetch, the wake of one queue -------------


def _script_calls(client) -> int:
    stats = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("evalsha", "eval"))


def test_at_concurrency_1_each_finish_fetches_the_next_job(start_valkey):
    """A dedicated server, so every script call counted is this consumer's:
    200 jobs drain in about one script call each (the finish that records a
    job claims the next), not a claim plus an ack."""
    url, _ = start_valkey()
    conn = redis.Redis.from_url(url)
    queue = "hot"
    jobs = Jobs(conn)
    for n in range(200):
        jobs.enqueue(queue, f"JOB-{n:04d}",
                     payload.encode("tests.testapp.jobs.add", (n, 1), {}, 65_536))
    observer = redis.Redis.from_url(url)
    before = _script_calls(observer)
    consumer = _consumer(conn, [queue], concurrency=1, burst=True)
    consumer.start()
    wait_for(lambda: not consumer.alive(), timeout=30)
    consumer.shutdown(0)
    calls = _script_calls(observer) - before
    assert consumer.processed == 200
    assert [row.state for row in (jobs.get(queue, f"JOB-{n:04d}") for n in range(200))] \
        == ["done"] * 200
    # 200 finishes (the last claims nothing), the first claim, the claims that
    # find the queue empty at the end, and the heartbeat's few.
    assert 200 <= calls <= 215, calls


def test_a_wake_marker_names_the_queue_that_has_work(conn, redis_client, two_queues):
    consumer = _consumer(conn, two_queues, concurrency=1)
    redis_client.lpush(Keyspace(two_queues[1]).wake, "1")
    assert consumer._wait_for_work(None, Backoff()) == two_queues[1]
    redis_client.lpush(Keyspace(two_queues[0]).wake, "1")
    assert consumer._wait_for_work(None, Backoff()) == two_queues[0]


def test_a_claim_round_leaves_a_queue_that_failed_out_for_its_backoff(two_queues):
    """A queue whose claim fails for a passing reason is not asked again until
    its backoff ends; a round in which every queue was left out raises
    nothing and says it heard nothing (the fetcher then reports neither an
    outage's end nor a new failure)."""
    import socket

    with socket.socket() as sock:                 # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # Refused at once and not retried, so the second round comes well within
    # the first backoff (at least 25 ms).
    away = redis.Redis(port=port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    rounds = ClaimRound(Jobs(away), "w", 60_000, list(two_queues))
    with pytest.raises(redis.ConnectionError):
        rounds.run(2, [])                         # every queue asked failed
    claims: list = []
    assert rounds.run(2, claims) is None          # both left out: nothing asked
    assert (claims, rounds.answered, rounds.partial) == ([], False, None)
    assert 0 < rounds.retry_s <= Backoff().cap_s


def test_a_finish_waits_for_the_outcomes_of_the_other_running_handlers(start_valkey,
                                                                       monkeypatch):
    """The sender lingers (LINGER_S, here stretched so the test never races
    the scheduler) while fewer outcomes wait than handlers run: two handlers'
    outcomes ride one finish call, not two."""
    import threading

    from echomq_django.protocol.records import Finish
    from echomq_django.runtime import finisher as finisher_mod

    monkeypatch.setattr(finisher_mod, "LINGER_S", 5.0)
    url, _ = start_valkey()
    conn = redis.Redis.from_url(url)
    jobs = Jobs(conn)
    running = [1]
    fin = finisher_mod.Finisher(jobs, consumer="w", lease_ms=60_000,
                                keep=(60_000, 60_000, 100),
                                hooks=finisher_mod.Hooks(running=lambda: running[0]))
    # One finish first, alone, so the script is loaded before the count.
    jobs.enqueue("q", "JOB-W", "{}")
    [warm], _ = jobs.claim_many("q", "w", 60_000, 1, token="t0")
    assert fin.record(warm, Finish("ack", warm.job_id, warm.token, None), lease_s=5) == "done"
    for n in range(2):
        jobs.enqueue("q", f"JOB-{n}", "{}")
    claims, _ = jobs.claim_many("q", "w", 60_000, 2, token="t1")
    running[0] = 2
    observer = redis.Redis.from_url(url)
    before = _script_calls(observer)
    states = {}

    def record(claim, delay_s):
        time.sleep(delay_s)
        states[claim.job_id] = fin.record(claim, Finish("ack", claim.job_id, claim.token, None),
                                          lease_s=5)

    threads = [threading.Thread(target=record, args=(c, d)) for c, d in zip(claims, (0, 0.05))]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert states == {c.job_id: "done" for c in claims}
    assert _script_calls(observer) - before == 1                 # one finish for both
    assert time.monotonic() - started < 2                       # it waited for the second only
    # With one handler running there is nobody to wait for.
    running[0] = 1
    jobs.enqueue("q", "JOB-9", "{}")
    [claim], _ = jobs.claim_many("q", "w", 60_000, 1, token="t2")
    started = time.monotonic()
    assert fin.record(claim, Finish("ack", claim.job_id, claim.token, None), lease_s=5) == "done"
    assert time.monotonic() - started < 1
