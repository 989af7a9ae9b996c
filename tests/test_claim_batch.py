"""The batched paths of claim and finish (docs/protocol.md, "claim", "finish"),
on the real server: when the ungrouped lane is the only one ready and no queue
rate applies, a claim pops its jobs in one call; a finish sends its outcomes'
active-set, claims-index and counter changes once each. Both must leave
exactly what one job at a time leaves."""

from __future__ import annotations

import pytest
import redis

from echomq_django import Jobs
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.protocol.records import Finish
from tests.test_lanes import enqueue_many


def test_a_batch_takes_the_lanes_jobs_in_claim_order_with_consecutive_tokens(
        conn, redis_client, queue):
    jobs, ks = Jobs(conn), Keyspace(queue)
    low = enqueue_many(conn, queue, 1, priority=-3)
    plain = enqueue_many(conn, queue, 3)
    high = enqueue_many(conn, queue, 2, priority=5)
    got, wait_ms = jobs.claim_many(queue, "w", 60_000, 4, token="batch")
    assert wait_ms is None
    # Highest priority first, then mint order within a priority.
    assert [c.job_id for c in got] == high + plain[:2]
    assert [c.token for c in got] == [f"batch.{i}" for i in range(1, 5)]
    assert {c.attempts for c in got} == {1}
    deadline = got[0].lease_deadline_ms
    assert redis_client.zrange(ks.active, 0, -1, withscores=True) == sorted(
        (c.job_id, float(deadline)) for c in got)
    assert redis_client.hgetall(ks.claims) == {c.token: c.job_id for c in got}
    for claim in got:
        row = redis_client.hgetall(ks.job(claim.job_id))
        assert (row["state"], row["token"], row["worker.1"]) == ("active", claim.token, "w")
        assert row["lease_until_ms"] == str(deadline)
    # Two wait: the lane counts them and stays in the ring.
    assert redis_client.zrange(ks.pending, 0, -1) == [plain[2]] + low
    assert redis_client.zscore(ks.lanes, "") == 2
    assert redis_client.get(ks.lanes_total) == "2"
    assert redis_client.zrange(ks.ring, 0, -1) == [""]
    rest, _ = jobs.claim_many(queue, "w", 60_000, 10, token="again")
    assert [c.job_id for c in rest] == [plain[2]] + low
    assert [c.token for c in rest] == ["again.1", "again.2"]
    assert redis_client.zcard(ks.lanes) == redis_client.zcard(ks.ring) == 0
    assert redis_client.get(ks.lanes_total) == "0"


def test_a_batch_stops_at_the_queue_cap(conn, queue):
    jobs = Jobs(conn)
    jobs.set_limits(queue, concurrency=3)
    enqueue_many(conn, queue, 6)
    assert jobs.claim(queue, "w", 60_000) is not None
    got, _ = jobs.claim_many(queue, "w", 60_000, 10)
    assert len(got) == 2
    assert jobs.claim(queue, "w", 60_000) is None


def test_a_member_whose_job_is_not_pending_is_dropped_and_takes_no_token(
        conn, redis_client, queue):
    jobs, ks = Jobs(conn), Keyspace(queue)
    running_id, *waiting = enqueue_many(conn, queue, 4)
    running = jobs.claim(queue, "w", 60_000)
    assert running.job_id == running_id
    row = redis_client.hgetall(ks.job(running_id))
    # A stale member: the running job's id again in the lane, counted (it
    # sorts first, so it is popped inside the batch).
    redis_client.zadd(ks.pending, {running_id: 0})
    redis_client.zincrby(ks.lanes, 1, "")
    redis_client.incr(ks.lanes_total)
    got, _ = jobs.claim_many(queue, "w2", 60_000, 10, token="t")
    assert [c.job_id for c in got] == waiting
    assert [c.token for c in got] == ["t.1", "t.2", "t.3"]
    assert redis_client.hgetall(ks.job(running_id)) == row     # untouched
    assert redis_client.get(ks.lanes_total) == "0"
    assert redis_client.zcard(ks.lanes) == redis_client.zcard(ks.ring) == 0


@pytest.mark.parametrize("holds", [0, 2])
def test_a_lane_counted_over_what_it_holds_is_repaired(conn, redis_client, queue, holds):
    jobs, ks = Jobs(conn), Keyspace(queue)
    held = enqueue_many(conn, queue, holds) if holds else []
    # The lane says three more than it holds (a repair finds such counts).
    redis_client.zincrby(ks.lanes, 3, "")
    redis_client.incrby(ks.lanes_total, 3)
    redis_client.zadd(ks.ring, {"": redis_client.incr(ks.turn)})
    got, _ = jobs.claim_many(queue, "w", 60_000, 10)
    assert [c.job_id for c in got] == held
    assert redis_client.get(ks.lanes_total) == "0"
    assert redis_client.zcard(ks.lanes) == redis_client.zcard(ks.ring) == 0
    assert jobs.claim(queue, "w", 60_000) is None


def test_a_lane_counted_short_of_what_it_holds_gives_up_all_of_it(conn, redis_client, queue):
    jobs, ks = Jobs(conn), Keyspace(queue)
    held = enqueue_many(conn, queue, 3)
    # The lane counts one of its three (one at a time would claim that one
    # and strand two; the batch takes all three and the counts end at zero).
    redis_client.zincrby(ks.lanes, -2, "")
    redis_client.decrby(ks.lanes_total, 2)
    got, _ = jobs.claim_many(queue, "w", 60_000, 10)
    assert [c.job_id for c in got] == held
    assert redis_client.get(ks.lanes_total) == "0"
    assert redis_client.zcard(ks.lanes) == redis_client.zcard(ks.ring) == 0


def test_a_finish_of_several_outcomes_counts_and_ends_each_lease_once(
        conn, redis_client, queue):
    jobs, ks = Jobs(conn), Keyspace(queue)
    enqueue_many(conn, queue, 4)
    got, _ = jobs.claim_many(queue, "w", 60_000, 4)
    outcomes = [Finish("ack", got[0].job_id, got[0].token),
                Finish("ack", got[1].job_id, got[1].token, result=7),
                Finish("dead", got[2].job_id, got[2].token, reason="failed", error="E"),
                Finish("retry", got[3].job_id, got[3].token, delay_ms=60_000, error="E")]
    states, claims, _ = jobs.finish_many(queue, outcomes)
    assert states == ["done", "done", "dead", "scheduled"]
    assert claims == []
    assert redis_client.zcard(ks.active) == 0
    assert redis_client.hlen(ks.claims) == 0
    for claim in got:
        assert redis_client.hmget(ks.job(claim.job_id), "token", "lease_until_ms") == [
            None, None]
    counters = {}
    for key in redis_client.scan_iter(match=f"{ks.base}stats:*"):
        kind = key[len(ks.base) + len("stats:"):].split(":")[0]
        counters[kind] = int(redis_client.get(key))
        assert redis_client.pttl(key) > 0      # each counter expires on its own
    assert counters == {"done": 2, "failed": 2, "dead": 1}
    # A repeat of the call (its reply lost) answers the same and counts nothing more.
    assert jobs.finish_many(queue, outcomes)[0] == states
    again = {key: int(redis_client.get(key))
             for key in redis_client.scan_iter(match=f"{ks.base}stats:*")}
    assert sorted(again.values()) == sorted(counters.values())


def _finish_args(ks, claims):
    """finish's raw keys and arguments acking ``claims`` (a raw call: Python
    caps outcomes at 1,000, the script does not)."""
    keys = [ks.pending, ks.active, ks.claims, ks.wake, ks.beat, ks.paused, ks.schedule,
            ks.dead] + [ks.job(c.job_id) for c in claims]
    args = [ks.base, "", 1, 100, "", 0, 3_600_000, 3_600_000, 10_000, 3_600_000]
    for claim in claims:
        args += ["ack", claim.job_id, claim.token, "", "", ""]
    return keys, args


def _done_count(redis_client, ks) -> int:
    return sum(int(redis_client.get(key))
               for key in redis_client.scan_iter(match=f"{ks.base}stats:done:*"))


def test_a_finish_of_more_outcomes_than_one_call_can_take_ends_every_lease(
        conn, redis_client, queue):
    from echomq_django.protocol import scripts

    jobs, ks = Jobs(conn), Keyspace(queue)
    n = 8_200      # the server's Lua unpacks about 8,000 values into one call at most
    for first in range(0, n, 1000):
        enqueue_many(conn, queue, min(1000, n - first))
    held = []
    while len(held) < n:
        held += jobs.claim_many(queue, "w", 600_000, min(1000, n - len(held)))[0]
    assert len(held) == n
    keys, args = _finish_args(ks, held)
    reply = scripts.run(conn, "jobs/finish", keys, args)
    assert [entry[1] for entry in reply[2]] == ["done"] * n
    assert redis_client.zcard(ks.active) == redis_client.hlen(ks.claims) == 0
    assert _done_count(redis_client, ks) == n


def test_a_finish_that_fails_part_way_leaves_the_outcomes_before_it_whole(
        conn, redis_client, queue):
    from echomq_django.protocol import scripts

    jobs, ks = Jobs(conn), Keyspace(queue)
    enqueue_many(conn, queue, 2)
    first, second = jobs.claim_many(queue, "w", 600_000, 2)[0]
    redis_client.delete(ks.job(second.job_id))
    redis_client.set(ks.job(second.job_id), "not a hash")     # a corrupt row
    keys, args = _finish_args(ks, [first, second])
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        scripts.run(conn, "jobs/finish", keys, args)
    # The first outcome is recorded whole, as recording them one by one leaves it.
    assert redis_client.hget(ks.job(first.job_id), "state") == "done"
    assert redis_client.zrange(ks.active, 0, -1) == [second.job_id]
    assert redis_client.hgetall(ks.claims) == {second.token: second.job_id}
    assert _done_count(redis_client, ks) == 1
