"""Bulk enqueue (issue 11): Jobs.enqueue_many and JobFunction.enqueue_many, one
round trip per batch, every item checked before anything is written
(docs/protocol.md, "enqueue_many"). Against the real test server."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest

from echomq_django import Jobs
from echomq_django.exceptions import KindError, PayloadError, PayloadTooLargeError
from echomq_django.protocol import scripts
from echomq_django.protocol.ids import BrandedId
from echomq_django.protocol.jobs import CALL_ITEMS, MAX_BATCH
from echomq_django.protocol.keyspace import WAKE_CAP, Keyspace
from echomq_django.protocol.records import Outcome
from echomq_django.rules import MIN_RUN_AT_MS
from tests import nodes
from tests.state import queue_pattern, snapshot
from tests.testapp import jobs as testjobs


def new_id() -> str:
    return BrandedId.generate("JOB")


def item(job_id=None, payload="{}", **options) -> dict:
    return {"job_id": job_id or new_id(), "payload": payload, **options}


def state(redis_client, queue) -> dict:
    """Every key of the queue and its content (SCAN)."""
    return snapshot(redis_client, queue_pattern(queue))


# -- outcomes ---------------------------------------------------------------


def test_outcomes_come_back_in_input_order(conn, redis_client, queue, server_time_ms):
    jobs = Jobs(conn)
    ks = Keyspace(queue)
    existing = new_id()
    assert jobs.enqueue(queue, existing, '{"v": "first"}') == "enqueued"
    twice = new_id()
    now = server_time_ms()
    items = [item(payload='{"n": 0}'), item(existing, '{"v": "second"}'),
             item(payload='{"n": 2}', delay_ms=60_000), item(twice, '{"v": "a"}'),
             item(payload='{"n": 4}', run_at_ms=MIN_RUN_AT_MS + 1),
             item(twice, '{"v": "b"}', delay_ms=5)]
    outcomes = jobs.enqueue_many(queue, items)
    assert outcomes == [Outcome.ENQUEUED, Outcome.DUPLICATE, Outcome.SCHEDULED,
                        Outcome.ENQUEUED, Outcome.SCHEDULED, Outcome.DUPLICATE]
    # A duplicate changes nothing: the first admission of an id stands.
    assert jobs.get(queue, existing).payload == '{"v": "first"}'
    assert jobs.get(queue, twice).payload == '{"v": "a"}'
    assert jobs.get(queue, twice).state == "pending"
    delayed = jobs.get(queue, items[2]["job_id"])
    assert delayed.state == "scheduled" and delayed.run_at_ms >= now + 60_000
    assert redis_client.zscore(ks.schedule, items[4]["job_id"]) == MIN_RUN_AT_MS + 1
    # Sent again, the whole batch is duplicates and changes nothing.
    before = state(redis_client, queue)
    assert set(jobs.enqueue_many(queue, items)) == {Outcome.DUPLICATE}
    assert state(redis_client, queue) == before


def test_an_empty_batch_sends_nothing(conn, redis_client, queue):
    assert Jobs(conn).enqueue_many(queue, []) == []
    assert testjobs.add.using(queue=queue).enqueue_many(iter(())) == []
    assert state(redis_client, queue) == {}


def test_lanes_and_priority_are_claimed_as_if_enqueued_one_by_one(conn, queue):
    jobs = Jobs(conn)
    one_by_one, batch = queue + "-1", queue + "-b"
    specs = [(None, 0), ("a", 0), ("b", 3), (None, 5), ("a", 10), ("b", -2), (None, 5),
             ("c", 0), ("a", 10), (None, -100)]
    ids = [new_id() for _ in specs]
    for job_id, (group, priority) in zip(ids, specs):
        jobs.enqueue(one_by_one, job_id, "{}", group=group, priority=priority)
    jobs.enqueue_many(batch, [item(job_id, group=group, priority=priority)
                              for job_id, (group, priority) in zip(ids, specs)])

    def claim_order(q):
        order = []
        while claim := jobs.claim(q, "w", 60_000):
            order.append(claim.job_id)
        return order

    order = claim_order(batch)
    assert order == claim_order(one_by_one)
    # The rule itself: lanes in turn ('' first, as the first job's, then a, b,
    # c), and in a lane the highest priority first, then mint order.
    assert order[:5] == [ids[3], ids[4], ids[2], ids[7], ids[6]]
    assert sorted(order) == sorted(ids)


def test_the_rows_are_the_rows_single_admissions_write(conn, redis_client, queue):
    jobs = Jobs(conn)
    ks = Keyspace(queue)
    payload = json.dumps({"job": "benchmarks.jobs.noop", "args": [0, 0, "x" * 42],
                          "kwargs": {}}, separators=(",", ":"))
    cases = [({}, lambda i: jobs.enqueue(queue, i, payload)),
             ({"group": "g-1", "priority": 7},
              lambda i: jobs.enqueue(queue, i, payload, group="g-1", priority=7)),
             ({"delay_ms": 3_600_000}, lambda i: jobs.enqueue_in(queue, i, payload, 3_600_000)),
             ({"run_at_ms": 2 * MIN_RUN_AT_MS},
              lambda i: jobs.enqueue_at(queue, i, payload, 2 * MIN_RUN_AT_MS))]
    for options, single in cases:
        alone, bulk = new_id(), new_id()
        single(alone)
        jobs.enqueue_many(queue, [item(bulk, payload, **options)])
        rows = [redis_client.hgetall(ks.job(i)) for i in (alone, bulk)]
        assert rows[0].keys() == rows[1].keys(), options
        times = {"enqueued_at_ms", "run_at_ms"}
        assert ({k: v for k, v in rows[0].items() if k not in times}
                == {k: v for k, v in rows[1].items() if k not in times})
        assert (redis_client.object("encoding", ks.job(alone))
                == redis_client.object("encoding", ks.job(bulk)) == "listpack")
        # As compact: the same encoded bytes (MEMORY USAGE also counts the
        # allocator's rounding, which on Valkey 8.1 varies with the server's
        # history by 16 bytes even between a key and a RESTOREd copy of it).
        dumps = [conn.dump(ks.job(i)) for i in (alone, bulk)]
        assert len(dumps[0]) == len(dumps[1]), options


# -- one wake marker per batch ------------------------------------------------


def test_one_wake_marker_per_batch_and_one_beat(conn, redis_client, queue):
    jobs = Jobs(conn)
    ks = Keyspace(queue)
    jobs.enqueue_many(queue, [item() for _ in range(5)])
    assert redis_client.llen(ks.wake) == 1
    redis_client.delete(ks.wake)
    # Split into three calls (1,000 jobs a call), still one marker.
    jobs.enqueue_many(queue, [item() for _ in range(2 * CALL_ITEMS + 500)])
    assert redis_client.llen(ks.wake) == 1
    redis_client.delete(ks.wake)
    # Scheduled only: no wake marker; one beat (the schedule's new head).
    jobs.enqueue_many(queue, [item(delay_ms=60_000 - i) for i in range(10)])
    assert redis_client.llen(ks.wake) == 0 and redis_client.llen(ks.beat) == 1
    redis_client.delete(ks.beat)
    # Later than the head: the metronome's sleep already covers it.
    jobs.enqueue_many(queue, [item(delay_ms=120_000)])
    assert redis_client.llen(ks.beat) == 0
    # All duplicates: nothing to wake anyone for.
    redis_client.delete(ks.wake)
    ids = [new_id() for _ in range(3)]
    jobs.enqueue_many(queue, [item(i) for i in ids])
    redis_client.delete(ks.wake)
    jobs.enqueue_many(queue, [item(i) for i in ids])
    assert redis_client.llen(ks.wake) == 0


# -- bad input: the item's index and rule, nothing written ------------------


BAD_ITEMS = [
    (lambda: item(priority=500), ValueError, r"items\[2\]: priority must be in -100\.\.100"),
    (lambda: item(priority=True), TypeError, r"items\[2\]: priority must be an int"),
    (lambda: item(group="a b"), ValueError, r"items\[2\]: group must be 1-200 bytes"),
    (lambda: item(group=7), TypeError, r"items\[2\]: group must be a str"),
    (lambda: item(job_id="USR" + "0" * 26), KindError, r"items\[2\]: job_id must be JOB"),
    (lambda: item(job_id="JOB x"), ValueError, r"items\[2\]: job_id must be 1-200"),
    (lambda: item(payload="{nope"), ValueError, r"items\[2\]: payload must be valid JSON"),
    (lambda: item(payload=b"{}"), TypeError, r"items\[2\]: payload must be JSON text"),
    (lambda: item(payload="\"" + "x" * 600_000 + "\""), PayloadTooLargeError,
     r"items\[2\]: payload is 600002 bytes"),
    (lambda: item(delay_ms=-1), ValueError, r"items\[2\]: delay_ms must be in 0\.\."),
    (lambda: item(run_at_ms=1_764_590_405), ValueError, r"items\[2\]: run_at_ms .* seconds"),
    (lambda: item(delay_ms=1, run_at_ms=MIN_RUN_AT_MS), ValueError,
     r"items\[2\]: takes delay_ms or run_at_ms, not both"),
    (lambda: item(delay=5), TypeError, r"items\[2\]: takes job_id, payload and optionally"),
    (lambda: {"job_id": new_id()}, TypeError, r"items\[2\]: takes job_id, payload"),
    (lambda: (new_id(), "{}"), TypeError, r"items\[2\]: must be a mapping"),
]


@pytest.mark.parametrize("bad, error, words", BAD_ITEMS)
def test_one_bad_item_writes_nothing_of_the_batch(conn, redis_client, queue, bad, error, words):
    jobs = Jobs(conn)
    jobs.enqueue(queue, new_id(), "{}")   # the queue holds something already
    before = state(redis_client, queue)
    with pytest.raises(error, match=words):
        jobs.enqueue_many(queue, [item(), item(delay_ms=10), bad(), item()])
    assert state(redis_client, queue) == before


def test_a_bad_item_late_in_a_batch_of_several_calls_writes_nothing(conn, redis_client, queue):
    items = [item() for _ in range(2 * CALL_ITEMS + 500)]
    items[2 * CALL_ITEMS + 400]["priority"] = 101
    with pytest.raises(ValueError, match=r"^items\[2400\]: priority"):
        Jobs(conn).enqueue_many(queue, items)
    assert state(redis_client, queue) == {}


def test_too_many_items_are_refused_before_any_is_checked(conn, redis_client, queue):
    with pytest.raises(ValueError, match=r"items must hold at most 100000 jobs, got 100001"):
        Jobs(conn).enqueue_many(queue, [{}] * (MAX_BATCH + 1))
    with pytest.raises(TypeError, match="queue name must be a str"):
        Jobs(conn).enqueue_many(None, [item()])
    assert state(redis_client, queue) == {}


@pytest.mark.parametrize("garbage", [None, 5, "JOB1", {"job_id": "JOB1", "payload": "{}"}])
def test_a_batch_that_is_not_a_list_is_refused_naming_it(conn, redis_client, queue, garbage):
    # Before: None or 5 raised "'NoneType' object is not iterable", naming
    # nothing; a str or a dict was taken apart into its characters or keys.
    with pytest.raises(TypeError, match=r"^items must be a list of mappings, got "):
        Jobs(conn).enqueue_many(queue, garbage)
    with pytest.raises(TypeError, match=r"^calls must be a list of argument tuples or dicts"):
        testjobs.add.using(queue=queue).enqueue_many(garbage)
    assert state(redis_client, queue) == {}


def test_the_script_checks_every_item_before_its_first_write(conn, redis_client, queue):
    # Another client than ours, unchecked: the server refuses the call whole.
    ks = Keyspace(queue)
    keys = [ks.pending, ks.schedule, ks.wake, ks.beat]
    good = [new_id(), "{}", "", "0", "", "0"]
    cases = [([new_id(), "{x", "", "0", "", "0"], ValueError, "payload must be JSON text"),
             ([new_id(), "{}", "", "101", "", "0"], ValueError, "priority must be an integer"),
             ([new_id(), "{}", "a b", "0", "", "0"], ValueError, "group must be"),
             ([new_id(), "{}", "", "0", "soon", "0"], ValueError, "mode must be"),
             ([new_id(), "{}", "", "0", "in", "-1"], ValueError, "value must be an integer"),
             (["USR" + "0" * 26, "{}", "", "0", "", "0"], KindError, "job id must be JOB-namespaced"),
             ([new_id(), "{}", "", 0, "", "0"], ValueError, "must be an array of six strings"),
             ([new_id(), "{}"], ValueError, "must be an array of six strings")]
    for bad, error, words in cases:
        with pytest.raises(error, match=rf"^items\[41\]: {words}"):
            scripts.run(conn, "jobs/enqueue_many", keys,
                        [ks.base, WAKE_CAP, 1, 40, json.dumps([good, bad])])
        assert state(redis_client, queue) == {}, bad
    for garbage in ("{", "5", json.dumps([good] * 1001)):
        with pytest.raises(ValueError, match="items must be a JSON array"):
            scripts.run(conn, "jobs/enqueue_many", keys, [ks.base, WAKE_CAP, 1, 0, garbage])
    assert state(redis_client, queue) == {}
    assert scripts.run(conn, "jobs/enqueue_many", keys,
                       [ks.base, WAKE_CAP, 1, 0, json.dumps([good])]) == [1]


# -- size and round trips ----------------------------------------------------


def test_a_batch_of_10000_in_one_call(conn, redis_client, queue):
    jobs = Jobs(conn)
    ks = Keyspace(queue)
    items = [item(payload=json.dumps({"n": i}), group=f"g{i % 7}" if i % 2 else None,
                  priority=i % 3) for i in range(10_000)]
    nodes.reset_stats(redis_client)
    outcomes = jobs.enqueue_many(queue, items)
    stats = nodes.command_stats(redis_client)
    assert outcomes == [Outcome.ENQUEUED] * 10_000
    assert int(redis_client.get(ks.lanes_total)) == 10_000
    assert redis_client.llen(ks.wake) == 1
    # Ten script calls of 1,000 (sent in one pipeline) and nothing else (a
    # server of the suite's own: another one counts other clients' calls).
    if not os.environ.get("ECHOMQ_TEST_URL"):
        assert stats["evalsha"] == 10
    assert jobs.get(queue, items[9_999]["job_id"]).payload == '{"n": 9999}'


@pytest.mark.skipif(bool(os.environ.get("ECHOMQ_TEST_URL")),
                    reason="SCRIPT FLUSH only on the server this suite started")
def test_a_flushed_script_is_sent_again(conn, redis_client, queue):
    redis_client.script_flush()
    items = [item() for _ in range(CALL_ITEMS + 1)]
    assert Jobs(conn).enqueue_many(queue, items) == [Outcome.ENQUEUED] * (CALL_ITEMS + 1)
    assert redis_client.llen(Keyspace(queue).wake) == 1


# -- JobFunction.enqueue_many --------------------------------------------------


def test_job_function_takes_argument_tuples_and_dicts(conn, redis_client, queue,
                                                      server_time_ms):
    fn = testjobs.add.using(queue=queue, group="room", priority=1)
    when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    handles = fn.enqueue_many([
        (1, 2),
        [3, 4],
        {"args": (5,), "kwargs": {"b": 6}, "group": None, "priority": -3},
        {"kwargs": {"a": 7, "b": 8}, "delay": dt.timedelta(seconds=30)},
        {"args": [9, 10], "when": when},
        {"args": (11, 12), "delay": 0},
    ])
    assert [h.outcome for h in handles] == ["enqueued"] * 3 + ["scheduled"] * 3
    assert [h.queue for h in handles] == [queue] * 6
    ids = [h.job_id for h in handles]
    assert ids == sorted(ids) and len(set(ids)) == 6    # minted in the order given
    rows = [h.get() for h in handles]
    assert [json.loads(r.payload)["args"] for r in rows] == [
        [1, 2], [3, 4], [5], [], [9, 10], [11, 12]]
    assert json.loads(rows[2].payload)["kwargs"] == {"b": 6}
    assert [(r.group, r.priority) for r in rows] == [
        ("room", 1), ("room", 1), (None, -3), ("room", 1), ("room", 1), ("room", 1)]
    assert rows[3].run_at_ms >= server_time_ms() + 29_000
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    assert rows[4].run_at_ms == (when - epoch) // dt.timedelta(milliseconds=1)
    # The same rows a single enqueue writes.
    single = fn.enqueue(1, 2).get()
    assert (single.payload, single.group, single.priority) == (
        rows[0].payload, rows[0].group, rows[0].priority)


BAD_CALLS = [
    ((dt.datetime.now(),), PayloadError, r"^calls\[1\]: args\[0\] is a datetime"),
    ((1, 2, 3), TypeError, r"^calls\[1\]: tests\.testapp\.jobs\.add\(\) cannot take"),
    ({"args": (1,)}, TypeError, r"^calls\[1\]: tests\.testapp\.jobs\.add\(\) cannot take"),
    ({"args": (1, 2), "delay": -1}, ValueError, r"^calls\[1\]: delay must be >= 0 ms"),
    ({"args": (1, 2), "when": dt.datetime(2030, 1, 1)}, ValueError,
     r"^calls\[1\]: when must be a timezone-aware"),
    ({"args": (1, 2), "delay": 5, "when": 2 * MIN_RUN_AT_MS}, ValueError,
     r"^calls\[1\]: takes delay or when, not both"),
    ({"args": (1, 2), "group": ""}, ValueError, r"^calls\[1\]: group must be"),
    ({"args": (1, 2), "priority": 1000}, ValueError, r"^calls\[1\]: priority must be"),
    ({"args": (1, 2), "lane": "x"}, TypeError, r"^calls\[1\]: takes args, kwargs"),
    ({"args": 1}, TypeError, r"^calls\[1\]: args must be a tuple or list"),
    ("12", TypeError, r"^calls\[1\]: must be a tuple of arguments or a dict"),
    (("\ud800", 1), ValueError, r"^calls\[1\]: args\[0\] must be text UTF-8 can encode"),
    (("x" * 600_000, 1), PayloadTooLargeError, r"^calls\[1\]: payload is"),
]


@pytest.mark.parametrize("bad, error, words", BAD_CALLS)
def test_job_function_bad_call_writes_nothing(redis_client, queue, bad, error, words):
    fn = testjobs.add.using(queue=queue)
    with pytest.raises(error, match=words):
        fn.enqueue_many([(1, 2), bad, (3, 4)])
    assert state(redis_client, queue) == {}
