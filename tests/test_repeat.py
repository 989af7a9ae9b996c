"""The recurring registry on a real server (docs/repeat.md).

Single-process tests: definitions, reads, the pump's compare-and-set, catch-up
and skip, orphans, boot-time sync, the one-clock rule. The multi-process ones
are in test_repeat_processes.py.
"""

from __future__ import annotations

import json
import logging
import time

import pytest
from django.test import override_settings

from echomq_django.repeat import registry as repeat_module
from echomq_django import Jobs
from echomq_django.protocol import scripts
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.protocol.records import decode_row
from echomq_django.repeat import Repeat, RepeatEntry, sync
from tests import nodes

TEMPLATE = {"job": "app.jobs.digest", "args": [1], "kwargs": {"room": "r1"}}
MINUTE = 60_000
HOUR = 3_600_000


@pytest.fixture
def rep(redis_client):
    return Repeat(redis_client)


def keys_of(client, queue):
    ks = Keyspace(queue)
    return sorted(nodes.keys(client, ks.base.replace("{", "[{]").replace("}", "[}]") + "*"))


def minted_rows(client, queue):
    ks = Keyspace(queue)
    # decode_row joins a payload stored in chunks (lua/includes/payload.lua).
    rows = [decode_row(client.hgetall(ks.job(i))) | {"id": i}
            for i in client.zrange(ks.pending, 0, -1)]
    return sorted(rows, key=lambda r: int(r["scheduled_for_ms"]))


def force_due(client, queue, name, score):
    """Put ``name``'s registry score at ``score`` (as a paused past would)."""
    client.zadd(Keyspace(queue).repeat, {name: score}, xx=True)


# -- register / upsert / remove / get / list ----------------------------------


def test_register_writes_member_and_record_with_first_run_from_server_time(
        rep, redis_client, queue, server_time_ms):
    before = server_time_ms()
    assert rep.register(queue, "tick", every_ms=1000, template=TEMPLATE) == "registered"
    entry = rep.get(queue, "tick")
    assert isinstance(entry, RepeatEntry)
    assert (entry.queue, entry.name, entry.every_ms, entry.cron, entry.tz) == (
        queue, "tick", 1000, None, "UTC")
    assert entry.template == TEMPLATE and entry.missed == "coalesce"
    assert entry.start_at_ms is None and entry.last_run_ms is None and entry.last_job_id is None
    # The grid is anchored at the epoch: whole seconds, the first one >= now.
    assert entry.next_run_ms % 1000 == 0
    assert before <= entry.next_run_ms <= server_time_ms() + 1000
    ks = Keyspace(queue)
    assert redis_client.zcard(ks.repeat) == 1
    assert redis_client.hget(ks.repeat_record("tick"), "version") == "1"


def test_register_is_idempotent_and_never_a_silent_overwrite(rep, redis_client, queue):
    assert rep.register(queue, "d", cron="0 3 * * *", tz="Europe/Berlin",
                        template=TEMPLATE) == "registered"
    ks = Keyspace(queue)
    before = redis_client.hgetall(ks.repeat_record("d")), redis_client.zscore(ks.repeat, "d")
    assert rep.register(queue, "d", cron="0 3 * * *", tz="Europe/Berlin",
                        template=dict(TEMPLATE)) == "exists"
    assert rep.register(queue, "d", cron="0 4 * * *", tz="Europe/Berlin",
                        template=TEMPLATE) == "conflict"
    assert rep.register(queue, "d", cron="0 3 * * *", tz="Europe/Berlin",
                        template={"other": 1}) == "conflict"
    assert rep.register(queue, "d", cron="0 3 * * *", tz="Europe/Berlin", template=TEMPLATE,
                        missed="skip") == "conflict"
    after = redis_client.hgetall(ks.repeat_record("d")), redis_client.zscore(ks.repeat, "d")
    assert after == before


def test_template_key_order_does_not_make_a_conflict(rep, queue):
    assert rep.register(queue, "o", every_ms=5000, template={"a": 1, "b": {"y": 2, "x": 1}}) \
        == "registered"
    assert rep.register(queue, "o", every_ms=5000, template={"b": {"x": 1, "y": 2}, "a": 1}) \
        == "exists"


def test_default_tz_is_time_zone_setting_stored_with_the_schedule(rep, queue):
    with override_settings(TIME_ZONE="Europe/Berlin"):
        rep.register(queue, "berlin", cron="30 2 * * *", template={})
    with override_settings(TIME_ZONE="America/New_York"):
        assert rep.get(queue, "berlin").tz == "Europe/Berlin"
        assert rep.register(queue, "berlin", cron="30 2 * * *", template={}) == "conflict"
        assert rep.register(queue, "berlin", cron="30 2 * * *", tz="Europe/Berlin",
                            template={}) == "exists"


def test_upsert_outcomes(rep, redis_client, queue, server_time_ms):
    ks = Keyspace(queue)
    assert rep.upsert(queue, "u", every_ms=HOUR, template={"v": 1}) == "registered"
    first = rep.get(queue, "u")
    assert rep.upsert(queue, "u", every_ms=HOUR, template={"v": 1}) == "unchanged"
    assert redis_client.hget(ks.repeat_record("u"), "version") == "1"

    # A template change keeps the grid (and bumps the version).
    assert rep.upsert(queue, "u", every_ms=HOUR, template={"v": 2}) == "updated"
    second = rep.get(queue, "u")
    assert second.template == {"v": 2} and second.next_run_ms == first.next_run_ms
    assert second.version == "2"

    # A timing change recomputes the next run from the new definition.
    now = server_time_ms()
    assert rep.upsert(queue, "u", every_ms=1000, template={"v": 2}) == "updated"
    third = rep.get(queue, "u")
    assert third.every_ms == 1000 and now <= third.next_run_ms <= now + 2000
    assert redis_client.zcard(ks.repeat) == 1


def test_upsert_keeps_a_due_occurrence_when_only_the_template_changes(
        rep, redis_client, queue, server_time_ms):
    rep.register(queue, "k", every_ms=HOUR, template={"v": 1})
    due = server_time_ms() // HOUR * HOUR
    force_due(redis_client, queue, "k", due)
    assert rep.upsert(queue, "k", every_ms=HOUR, template={"v": 2}) == "updated"
    assert rep.pump(queue) == 1
    (row,) = minted_rows(redis_client, queue)
    assert json.loads(row["payload"])["v"] == 2
    assert int(row["scheduled_for_ms"]) == due


def test_remove(rep, redis_client, queue):
    rep.register(queue, "r", every_ms=1000, template={})
    assert rep.remove(queue, "r") is True
    assert rep.get(queue, "r") is None
    # Only the beat marker the registration left for a metronome remains.
    assert keys_of(redis_client, queue) == [Keyspace(queue).beat]
    assert rep.remove(queue, "r") is False


def test_list_reads_in_batches_by_next_run(rep, queue, monkeypatch, server_time_ms):
    monkeypatch.setattr(repeat_module, "LIST_BATCH", 2)
    now = server_time_ms()
    for i, minutes in enumerate([5, 1, 3, 2, 4]):
        rep.register(queue, f"s{i}", every_ms=HOUR, start_at_ms=now + minutes * MINUTE,
                     template={"i": i})
    entries = rep.list(queue)
    assert [e.name for e in entries] == ["s1", "s3", "s2", "s4", "s0"]
    assert [e.template["i"] for e in entries] == [1, 3, 2, 4, 0]
    assert rep.list("t-empty-" + queue) == []


@pytest.mark.parametrize("kwargs,exc,word", [
    ({"every_ms": 1000, "cron": "* * * * *"}, ValueError, "every_ms and cron"),
    ({}, ValueError, "every_ms and cron"),
    ({"every_ms": 0}, ValueError, "every_ms"),
    ({"every_ms": "1000"}, TypeError, "every_ms"),
    ({"cron": "not a cron"}, ValueError, "cron"),
    ({"cron": "0 3 * * *", "tz": "Europe/Atlantis"}, ValueError, "tz"),
    ({"every_ms": 1000, "template": "{}"}, TypeError, "template"),
    ({"every_ms": 1000, "template": ["x"]}, TypeError, "template"),
    ({"every_ms": 1000, "template": {"x": object()}}, TypeError, "template"),
    ({"every_ms": 1000, "template": {"x": float("nan")}}, TypeError, "template"),
    ({"every_ms": 1000, "template": {1: "int key"}}, ValueError, "template"),
    ({"every_ms": 1000, "template": {"t": (1, 2)}}, ValueError, "template"),
    ({"every_ms": 1000, "template": {"missed": 1}}, ValueError, "reserved"),
    ({"every_ms": 1000, "template": {"scheduled_for": 1}}, ValueError, "reserved"),
    ({"every_ms": 1000, "missed": "later"}, ValueError, "missed"),
    ({"every_ms": 1000, "start_at_ms": -1}, ValueError, "start_at_ms"),
])
@pytest.mark.parametrize("method", ["register", "upsert"])
def test_bad_input_raises_naming_the_problem_and_writes_nothing(
        rep, redis_client, queue, method, kwargs, exc, word):
    kwargs = {"template": {}} | kwargs
    with pytest.raises(exc, match=word):
        getattr(rep, method)(queue, "bad", **kwargs)
    assert keys_of(redis_client, queue) == []


@pytest.mark.parametrize("method", ["register", "upsert"])
def test_a_template_nested_too_deep_or_containing_itself_is_refused(
        rep, redis_client, queue, method):
    from echomq_django import PayloadError

    deep = {}
    for _ in range(100_000):
        deep = {"d": deep}
    with pytest.raises(PayloadError, match=r"^template is nested deeper than 100 levels"):
        getattr(rep, method)(queue, "deep", every_ms=1000, template=deep)
    loop = {"job": "app.jobs.x", "args": []}
    loop["args"].append(loop)
    with pytest.raises(PayloadError,
                       match=r"^template contains itself \(again at template\['args'\]\[0\]\)"):
        getattr(rep, method)(queue, "loop", every_ms=1000, template=loop)
    assert keys_of(redis_client, queue) == []


@pytest.mark.parametrize("tz", ["", "x" * 300, "Europe"])
@pytest.mark.parametrize("method", ["register", "upsert"])
def test_a_tz_that_names_no_zone_raises_value_error_naming_tz(rep, redis_client, queue, method,
                                                              tz):
    with pytest.raises(ValueError, match=r"tz must be an IANA zone name, got '") as info:
        getattr(rep, method)(queue, "bad-tz", cron="0 9 * * *", tz=tz, template={})
    assert not isinstance(info.value, OSError)
    assert keys_of(redis_client, queue) == []


@pytest.mark.parametrize("queue_name,name,exc,word", [
    ("bad queue", "n", ValueError, "queue"),
    ("q", "", ValueError, "name"),
    ("q", "has space", ValueError, "name"),
    ("q", "x" * 201, ValueError, "name"),
    ("q", "tab\there", ValueError, "name"),
    ("q", 7, TypeError, "name"),
])
def test_bad_queue_or_name(rep, queue_name, name, exc, word):
    with pytest.raises(exc, match=word):
        rep.register(queue_name, name, every_ms=1000, template={})
    with pytest.raises(exc, match=word):
        rep.remove(queue_name, name)


# -- pump: mint + advance as one compare-and-set ---------------------------------


def test_pump_mints_one_job_with_the_occurrence_payload_and_advances(
        rep, redis_client, queue, server_time_ms):
    ks = Keyspace(queue)
    # Hourly: the next slot is never reached between the two pumps (with
    # every second, a slow machine crossed into the next slot and minted it).
    rep.register(queue, "tick", every_ms=3_600_000, template=TEMPLATE)
    slot = server_time_ms() // 3_600_000 * 3_600_000
    force_due(redis_client, queue, "tick", slot)
    assert rep.pump(queue) == 1
    assert rep.pump(queue) == 0  # already advanced past now
    (row,) = minted_rows(redis_client, queue)
    assert row["id"].startswith("JOB")
    assert row["state"] == "pending" and "attempts" not in row  # absent: 0
    assert row["repeat"] == "tick" and int(row["scheduled_for_ms"]) == slot
    assert int(row["enqueued_at_ms"]) >= slot
    assert json.loads(row["payload"]) == TEMPLATE | {"scheduled_for": slot, "missed": 0}
    assert redis_client.zscore(ks.pending, row["id"]) == 0
    assert redis_client.llen(ks.wake) == 1
    entry = rep.get(queue, "tick")
    assert entry.next_run_ms > slot and entry.next_run_ms % 1000 == 0
    assert entry.last_job_id == row["id"] and entry.last_scheduled_for_ms == slot
    assert entry.last_run_ms == int(row["enqueued_at_ms"])


def test_pump_coalesces_downtime_into_one_job_and_returns_to_the_grid(
        rep, redis_client, queue, server_time_ms):
    rep.register(queue, "tick", every_ms=1000, template={})
    now = server_time_ms()
    latest = now // 1000 * 1000
    force_due(redis_client, queue, "tick", latest - 3000)
    assert rep.pump(queue) == 1
    (row,) = minted_rows(redis_client, queue)
    payload = json.loads(row["payload"])
    assert payload["scheduled_for"] in (latest, latest + 1000)  # a slot may pass meanwhile
    assert payload["missed"] == (payload["scheduled_for"] - (latest - 3000)) // 1000
    assert rep.get(queue, "tick").next_run_ms == payload["scheduled_for"] + 1000
    assert rep.get(queue, "tick").cadence.every_ms == 1000


def test_skip_mints_nothing_after_downtime(rep, redis_client, queue, server_time_ms):
    rep.register(queue, "s", every_ms=1000, template={}, missed="skip")
    latest = server_time_ms() // 1000 * 1000
    force_due(redis_client, queue, "s", latest - 3000)
    assert rep.pump(queue) == 0
    assert minted_rows(redis_client, queue) == []
    entry = rep.get(queue, "s")
    assert entry.next_run_ms > latest and entry.skipped >= 4


def test_skip_mints_a_lone_occurrence_within_the_grace_but_not_a_stale_one(
        rep, redis_client, queue, server_time_ms):
    rep.register(queue, "h", every_ms=HOUR, template={}, missed="skip")
    now = server_time_ms()
    force_due(redis_client, queue, "h", now - 1000)  # a slow beat: minted
    assert rep.pump(queue) == 1
    rep.register(queue, "h2", every_ms=HOUR, template={}, missed="skip",
                 start_at_ms=(now - 2 * MINUTE) % HOUR)
    force_due(redis_client, queue, "h2", now - 2 * MINUTE)  # down across it: skipped
    assert rep.pump(queue) == 0
    assert rep.get(queue, "h2").skipped == 1
    assert len(minted_rows(redis_client, queue)) == 1


def test_a_paused_pumper_that_resumes_mints_nothing(rep, redis_client, queue, server_time_ms):
    """The SIGSTOP case, made deterministic: read, pause, someone else pumps, resume."""
    ks = Keyspace(queue)
    rep.register(queue, "tick", every_ms=1000, template={})
    force_due(redis_client, queue, "tick", server_time_ms() // 1000 * 1000)
    now, due = rep._pump._due(ks, 10)
    (name, score), = due
    raw = redis_client.hgetall(ks.repeat_record(name))
    assert Repeat(redis_client).pump(queue) == 1          # the live metronome
    assert rep._pump._pump_one(ks, name, score, raw, now) == 0  # the resumed one
    assert len(minted_rows(redis_client, queue)) == 1


def test_mint_refuses_a_payload_built_from_an_older_version(
        rep, redis_client, queue, server_time_ms):
    ks = Keyspace(queue)
    rep.register(queue, "v", every_ms=HOUR, template={"v": 1})
    force_due(redis_client, queue, "v", server_time_ms() - 10)
    now, ((name, score),) = rep._pump._due(ks, 10)
    raw = redis_client.hgetall(ks.repeat_record(name))
    rep.upsert(queue, "v", every_ms=HOUR, template={"v": 2})
    assert rep._pump._pump_one(ks, name, score, raw, now) == 0
    assert rep.pump(queue) == 1
    (row,) = minted_rows(redis_client, queue)
    assert json.loads(row["payload"])["v"] == 2


def test_advance_is_a_compare_and_set(rep, queue):
    rep.register(queue, "a", every_ms=HOUR, template={})
    score = rep.get(queue, "a").next_run_ms
    assert rep.advance(queue, "a", expected_ms=score - 1, next_ms=score + HOUR) is False
    assert rep.advance(queue, "a", expected_ms=score, next_ms=score + HOUR) is True
    assert rep.get(queue, "a").next_run_ms == score + HOUR
    assert rep.advance(queue, "missing", expected_ms=score, next_ms=score) is False


def test_a_next_run_earlier_than_the_metronome_s_plan_marks_the_beat(
        rep, redis_client, queue, server_time_ms):
    # The metronome sleeps towards the instant it planned; a write that puts
    # an earlier next run in front of it marks the beat (and only such a write).
    beat = Keyspace(queue).beat
    now = server_time_ms()
    rep.register(queue, "late", every_ms=HOUR, template={}, start_at_ms=now + 2 * HOUR)
    assert redis_client.lpop(beat) == "1"  # no plan yet: the first head
    Jobs(redis_client).horizon(queue, max_sleep_ms=3 * HOUR)   # a metronome plans: "late"
    rep.register(queue, "later", every_ms=HOUR, template={}, start_at_ms=now + 3 * HOUR)
    assert redis_client.llen(beat) == 0
    rep.upsert(queue, "later", every_ms=HOUR, template={}, start_at_ms=now + HOUR)
    assert redis_client.lpop(beat) == "1"  # moved in front of "late"
    rep.upsert(queue, "later", every_ms=HOUR, template={"v": 2}, start_at_ms=now + HOUR)
    assert redis_client.llen(beat) == 0  # the template alone: the next run is kept
    sync(redis_client, [{"queue": queue, "name": "sooner", "every_ms": HOUR,
                         "start_at_ms": now + MINUTE}])
    assert redis_client.lpop(beat) == "1"
    head = rep.get(queue, "sooner").next_run_ms
    assert rep.advance(queue, "late", expected_ms=rep.get(queue, "late").next_run_ms,
                       next_ms=head - 1)
    assert redis_client.lpop(beat) == "1"
    # A pump's mint moves a due run past now, so past the plan of the pumping
    # metronome (which read the horizon with that run due: its plan is now).
    force_due(redis_client, queue, "late", now - 10)
    Jobs(redis_client).horizon(queue, max_sleep_ms=3 * HOUR)
    assert rep.pump(queue) == 1
    assert redis_client.llen(beat) == 0


def test_due_lists_names_at_or_before_server_now(rep, redis_client, queue, server_time_ms):
    rep.register(queue, "late", every_ms=HOUR, template={})
    rep.register(queue, "later", every_ms=HOUR, template={})
    rep.register(queue, "future", every_ms=HOUR, template={})
    now = server_time_ms()
    force_due(redis_client, queue, "late", now - 2000)
    force_due(redis_client, queue, "later", now - 1000)
    assert rep.due(queue, 10) == [("late", now - 2000), ("later", now - 1000)]
    assert rep.due(queue, 1) == [("late", now - 2000)]
    with pytest.raises(ValueError, match="limit"):
        rep.due(queue, 0)


@pytest.mark.slow
def test_pump_mints_a_six_field_cron_every_second(rep, redis_client, queue):
    rep.register(queue, "sec", cron="* * * * * *", tz="Europe/Berlin", template={})
    deadline = time.monotonic() + 2.6
    while time.monotonic() < deadline:
        rep.pump(queue)
        time.sleep(0.03)
    slots = [int(r["scheduled_for_ms"]) for r in minted_rows(redis_client, queue)]
    assert len(slots) >= 2
    assert all(b - a == 1000 for a, b in zip(slots, slots[1:]))


# -- run_now ------------------------------------------------------------------


def test_run_now_mints_without_moving_the_grid(rep, redis_client, queue, server_time_ms):
    rep.register(queue, "n", cron="0 3 * * *", tz="Europe/Berlin", template=TEMPLATE)
    before = rep.get(queue, "n")
    now = server_time_ms()
    job_id = rep.run_now(queue, "n")
    (row,) = minted_rows(redis_client, queue)
    assert row["id"] == job_id and row["repeat"] == "n"
    payload = json.loads(row["payload"])
    assert payload["missed"] == 0 and now <= payload["scheduled_for"] <= server_time_ms()
    after = rep.get(queue, "n")
    assert after.next_run_ms == before.next_run_ms
    assert after.last_job_id == job_id and after.last_scheduled_for_ms is None
    with pytest.raises(LookupError, match="nope"):
        rep.run_now(queue, "nope")


# -- orphans --------------------------------------------------------------------


def test_member_without_record_is_dropped_by_the_pump_once(
        rep, redis_client, queue, server_time_ms, caplog):
    ks = Keyspace(queue)
    redis_client.zadd(ks.repeat, {"ghost": server_time_ms() - 10})
    with caplog.at_level(logging.WARNING, logger="echomq.repeat"):
        assert rep.pump(queue) == 0
    assert "ghost" in caplog.text
    assert redis_client.zcard(ks.repeat) == 0
    assert rep.pump(queue) == 0


def test_unreadable_record_is_taken_off_the_registry_and_kept(
        rep, redis_client, queue, server_time_ms, caplog):
    ks = Keyspace(queue)
    rep.register(queue, "bad", every_ms=1000, template={})
    redis_client.hset(ks.repeat_record("bad"), "tz", "Nowhere/Zone")
    force_due(redis_client, queue, "bad", server_time_ms() - 10)
    with caplog.at_level(logging.ERROR, logger="echomq.repeat"):
        assert rep.pump(queue) == 0
    assert "bad" in caplog.text
    assert redis_client.zscore(ks.repeat, "bad") is None
    assert redis_client.exists(ks.repeat_record("bad"))
    assert rep.get(queue, "bad").next_run_ms is None


def test_register_over_an_orphan_record_repairs_it(rep, redis_client, queue):
    ks = Keyspace(queue)
    rep.register(queue, "o", every_ms=1000, template={})
    redis_client.zrem(ks.repeat, "o")
    assert rep.get(queue, "o").next_run_ms is None
    assert rep.list(queue) == []
    assert rep.register(queue, "o", every_ms=1000, template={}) == "registered"
    assert rep.get(queue, "o").next_run_ms is not None


# -- boot-time sync --------------------------------------------------------------


def declared(queue, **changes):
    base = [
        {"queue": queue, "name": "digest", "cron": "0 7 * * *", "tz": "Europe/Berlin",
         "template": {"job": "digest"}},
        {"queue": queue, "name": "tick", "every_ms": HOUR, "template": {"job": "tick"},
         "missed": "skip"},
    ]
    for item in base:
        item.update(changes.get(item["name"], {}))
    return base


def test_sync_registers_then_leaves_unchanged_names_untouched(rep, redis_client, queue):
    ks = Keyspace(queue)
    counts = sync(redis_client, declared(queue))
    assert counts["registered"] == 2 and counts["unchanged"] == 0
    # A restart "50 minutes into the hour": the next run is kept, not reset.
    force_due(redis_client, queue, "tick", rep.get(queue, "tick").next_run_ms - 10 * MINUTE)
    before = redis_client.zrange(ks.repeat, 0, -1, withscores=True)
    counts = sync(redis_client, declared(queue))
    assert counts["unchanged"] == 2 and counts["registered"] == counts["updated"] == 0
    assert redis_client.zrange(ks.repeat, 0, -1, withscores=True) == before


def test_sync_upserts_and_logs_a_changed_name(rep, redis_client, queue, caplog):
    sync(redis_client, declared(queue))
    with caplog.at_level(logging.INFO, logger="echomq.repeat"):
        counts = sync(redis_client, declared(queue, digest={"cron": "0 8 * * *"}))
    assert counts["updated"] == 1 and counts["unchanged"] == 1
    assert "digest" in caplog.text and "updated" in caplog.text
    assert rep.get(queue, "digest").cron == "0 8 * * *"


def test_sync_prunes_only_when_asked_and_only_in_its_queues(rep, redis_client, queue):
    other = queue + "-other"
    sync(redis_client, declared(queue))
    rep.register(queue, "stale", every_ms=HOUR, template={})
    rep.register(other, "elsewhere", every_ms=HOUR, template={})
    counts = sync(redis_client, declared(queue))
    assert counts["undeclared"] == 1 and rep.get(queue, "stale") is not None
    counts = sync(redis_client, declared(queue), prune=True)
    assert counts["removed"] == 1 and rep.get(queue, "stale") is None
    assert rep.get(other, "elsewhere") is not None
    assert sync(redis_client, [], prune=True, queues=[other])["removed"] == 1
    assert rep.get(other, "elsewhere") is None


def test_sync_repairs_and_reports_orphans(rep, redis_client, queue, server_time_ms):
    ks = Keyspace(queue)
    sync(redis_client, declared(queue))
    redis_client.zrem(ks.repeat, "digest")               # a record without member
    redis_client.zadd(ks.repeat, {"ghost": server_time_ms() + HOUR})  # a member without record
    counts = sync(redis_client, declared(queue))
    assert counts["repaired"] == 1 and counts["orphans"] == 1
    assert rep.get(queue, "digest").next_run_ms is not None
    assert redis_client.zscore(ks.repeat, "ghost") is None


@pytest.mark.parametrize("bad,exc,word", [
    ({"every_ms": 0}, ValueError, "every_ms"),
    ({"cron": "99 * * * *", "every_ms": None}, ValueError, "cron"),
    ({"tz": "Nowhere/Zone"}, ValueError, "tz"),
    ({"colour": "red"}, ValueError, "unknown keys"),
    ({"queue": "bad queue"}, ValueError, "queue"),
])
def test_sync_validates_everything_before_writing(redis_client, queue, bad, exc, word):
    with pytest.raises(exc, match=word):
        sync(redis_client, declared(queue, tick=bad))
    assert keys_of(redis_client, queue) == []


def test_sync_refuses_a_name_declared_twice(redis_client, queue):
    items = declared(queue) + [declared(queue)[0]]
    with pytest.raises(ValueError, match="twice"):
        sync(redis_client, items)
    assert keys_of(redis_client, queue) == []


# -- one clock -------------------------------------------------------------------


@pytest.mark.parametrize("skew_ms", [10 * MINUTE, -10 * MINUTE])
def test_a_host_clock_off_by_minutes_changes_nothing(
        rep, redis_client, queue, server_time_ms, monkeypatch, skew_ms):
    real_time, real_time_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real_time() + skew_ms / 1000)
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + skew_ms * 1_000_000)
    start = server_time_ms()
    rep.register(queue, "e", every_ms=1000, template={})
    rep.register(queue, "c", cron="* * * * *", tz="Europe/Berlin", template={})
    sync(redis_client, [{"queue": queue, "name": "s", "every_ms": 5000}])
    end = server_time_ms()
    assert start <= rep.get(queue, "e").next_run_ms <= end + 1000
    assert start <= rep.get(queue, "c").next_run_ms <= end + MINUTE
    assert start <= rep.get(queue, "s").next_run_ms <= end + 5000
    force_due(redis_client, queue, "e", server_time_ms() // 1000 * 1000)
    assert rep.pump(queue) >= 1
    row = next(r for r in minted_rows(redis_client, queue) if r["repeat"] == "e")
    assert abs(int(row["scheduled_for_ms"]) - server_time_ms()) < 2000
    assert abs(rep.get(queue, "e").next_run_ms - server_time_ms()) <= 2000


REPEAT_SCRIPTS = {"repeat/register", "repeat/upsert", "repeat/unregister", "repeat/due",
                  "repeat/mint", "repeat/run_now", "repeat/drop_member", "repeat/mark_synced"}


def test_repeat_methods_pass_exactly_the_header_keys_in_order(
        redis_client, queue, monkeypatch, server_time_ms):
    calls = []
    real_run = scripts.run

    def recording_run(client, name, keys, args):
        calls.append((name, list(keys), list(args)))
        return real_run(client, name, keys, args)

    monkeypatch.setattr(scripts, "run", recording_run)
    rep = Repeat(redis_client)
    ks = Keyspace(queue)
    rep.register(queue, "a", every_ms=1000, template={})
    rep.upsert(queue, "a", every_ms=2000, template={})
    force_due(redis_client, queue, "a", server_time_ms() - 5)
    rep.pump(queue)
    rep.run_now(queue, "a")
    redis_client.zadd(ks.repeat, {"ghost": 1})
    rep.pump(queue)
    rep.advance(queue, "a", expected_ms=1, next_ms=2)
    rep.remove(queue, "a")
    sync(redis_client, [{"queue": queue, "name": "b", "every_ms": 1000}])

    assert {name for name, _, _ in calls} == REPEAT_SCRIPTS
    for name, keys, args in calls:
        src = scripts.source(name)
        assert len(args) == len(src.argv), name
        values = dict(zip(src.argv, args))
        built = {"repeat": ks.repeat, "pending": ks.pending, "wake": ks.wake, "beat": ks.beat,
                 "synced": ks.synced,
                 "repeat_record": ks.repeat_record(values.get("name", "")),
                 "job": ks.job(values.get("job_id") or "-")}
        assert keys == [built[label] for label in src.keys], name
        if "wake_cap" in values:
            assert values["wake_cap"] == repeat_module.WAKE_CAP


# -- the management command --------------------------------------------------------


def test_schedules_command_lists_runs_and_removes(rep, redis_client, queue):
    from io import StringIO

    from django.core.management import CommandError, call_command

    rep.register(queue, "digest", cron="30 2 * * *", tz="Europe/Berlin", template={})
    out = StringIO()
    call_command("echomq_schedules", "list", "--queue", queue, stdout=out)
    entry = rep.get(queue, "digest")
    text = out.getvalue()
    assert f"{queue}/digest" in text and "Europe/Berlin" in text
    assert "02:30:00+0" in text and "+00:00" in text and "job -" in text

    out = StringIO()
    call_command("echomq_schedules", "run", "digest", "--queue", queue, stdout=out)
    job_id = out.getvalue().strip()
    assert redis_client.hget(Keyspace(queue).job(job_id), "repeat") == "digest"
    assert rep.get(queue, "digest").next_run_ms == entry.next_run_ms
    out = StringIO()
    call_command("echomq_schedules", "list", "--queue", queue, stdout=out)
    assert job_id in out.getvalue()

    out = StringIO()
    call_command("echomq_schedules", "remove", "digest", "--queue", queue, stdout=out)
    assert "removed" in out.getvalue() and rep.get(queue, "digest") is None
    out = StringIO()
    call_command("echomq_schedules", "list", "--queue", queue, stdout=out)
    assert "no schedules" in out.getvalue()

    with pytest.raises(CommandError, match="no schedule"):
        call_command("echomq_schedules", "remove", "digest", "--queue", queue)
    with pytest.raises(CommandError, match="--queue"):
        call_command("echomq_schedules", "run", "digest")
    with pytest.raises(CommandError, match="no recurring schedule"):
        call_command("echomq_schedules", "run", "digest", "--queue", queue)


def test_schedules_command_lists_an_unreadable_zone_without_failing(rep, redis_client, queue):
    from io import StringIO

    from django.core.management import call_command

    rep.register(queue, "z", every_ms=HOUR, template={})
    redis_client.hset(Keyspace(queue).repeat_record("z"), "tz", "Nowhere/Zone")
    out = StringIO()
    call_command("echomq_schedules", "list", "--queue", queue, stdout=out)
    assert f"{queue}/z  unreadable" in out.getvalue()


def test_sync_takes_none_as_the_default(rep, redis_client, queue):
    counts = sync(redis_client, [{"queue": queue, "name": "n", "every_ms": HOUR, "cron": None,
                                  "tz": None, "template": None, "missed": None,
                                  "start_at_ms": None}])
    assert counts["registered"] == 1
    entry = rep.get(queue, "n")
    assert (entry.template, entry.missed, entry.tz) == ({}, "coalesce", "UTC")
