"""Pure next-run computation at exact instants (docs/repeat.md, "Cadence").

No server and no clock: every "now" is an argument.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from echomq_django.repeat import cadence
from echomq_django.repeat.cadence import Cadence

HOUR = 3_600_000


def ms(text: str) -> int:
    """'2027-10-31T00:30' (UTC) -> Unix ms."""
    moment = datetime.fromisoformat(text).replace(tzinfo=timezone.utc)
    return int(moment.timestamp()) * 1000


def between(c: Cadence, start: str, end: str) -> list[int]:
    out = []
    for t in c.occurrences(ms(start) - 1):
        if t > ms(end):
            return out
        out.append(t)


# -- the Berlin cases -------------------------------------------------


def test_fixed_hour_on_fall_back_fires_once_on_the_first_pass():
    c = Cadence.build(cron="30 2 * * *", tz="Europe/Berlin")
    assert between(c, "2027-10-30T12:00", "2027-10-31T12:00") == [ms("2027-10-31T00:30")]
    assert c.next_after(ms("2027-10-31T00:30")) == ms("2027-11-01T01:30")


def test_fixed_hour_on_spring_forward_fires_once_after_the_gap():
    c = Cadence.build(cron="30 2 * * *", tz="Europe/Berlin")
    assert between(c, "2027-03-27T12:00", "2027-03-28T12:00") == [ms("2027-03-28T01:00")]
    assert c.next_after(ms("2027-03-28T01:00")) == ms("2027-03-29T00:30")


def test_hour_stepping_schedule_fires_on_both_passes_of_fall_back():
    c = Cadence.build(cron="30 * * * *", tz="Europe/Berlin")
    got = between(c, "2027-10-30T23:00", "2027-10-31T02:59")
    assert got == [ms("2027-10-30T23:30"), ms("2027-10-31T00:30"),
                   ms("2027-10-31T01:30"), ms("2027-10-31T02:30")]


def test_hour_stepping_schedule_skips_the_gap_keeping_real_time_cadence():
    c = Cadence.build(cron="30 * * * *", tz="Europe/Berlin")
    got = between(c, "2027-03-27T23:00", "2027-03-28T02:59")
    # 01:30 CET, then 03:30 CEST: one hour apart in real time, no 02:30.
    assert got == [ms("2027-03-27T23:30"), ms("2027-03-28T00:30"),
                   ms("2027-03-28T01:30"), ms("2027-03-28T02:30")]


def test_several_gap_times_collapse_to_one_run_after_the_gap():
    c = Cadence.build(cron="*/15 2 * * *", tz="Europe/Berlin")
    assert between(c, "2027-03-27T12:00", "2027-03-28T12:00") == [ms("2027-03-28T01:00")]
    # Fall-back: the four quarter hours fire on the first pass only.
    assert between(c, "2027-10-30T12:00", "2027-10-31T12:00") == [
        ms("2027-10-31T00:00"), ms("2027-10-31T00:15"),
        ms("2027-10-31T00:30"), ms("2027-10-31T00:45")]


def test_new_york_fall_back_fixed_time_once():
    c = Cadence.build(cron="30 1 * * *", tz="America/New_York")
    # 2027-11-07 01:30 EDT = 05:30Z; the second 01:30 (EST, 06:30Z) does not fire.
    assert between(c, "2027-11-06T12:00", "2027-11-07T12:00") == [ms("2027-11-07T05:30")]


def test_a_gap_wall_time_that_also_matches_after_the_gap_fires_once():
    c = Cadence.build(cron="0,30 2,3 * * *", tz="Europe/Berlin")
    # 02:00 and 02:30 do not exist; both map to 03:00 CEST, which matches too.
    assert between(c, "2027-03-27T23:00", "2027-03-28T02:59") == [
        ms("2027-03-28T01:00"), ms("2027-03-28T01:30")]


def test_six_field_seconds_form():
    c = Cadence.build(cron="* * * * * */20", tz="UTC")  # seconds come last
    assert between(c, "2027-01-01T00:00", "2027-01-01T00:01") == [
        ms("2027-01-01T00:00"), ms("2027-01-01T00:00") + 20_000,
        ms("2027-01-01T00:00") + 40_000, ms("2027-01-01T00:01")]


def test_aliases_are_expanded():
    assert Cadence.build(cron="@hourly", tz="Europe/Berlin").steps_hours
    assert not Cadence.build(cron="@daily", tz="Europe/Berlin").steps_hours


def test_the_process_time_zone_never_matters(monkeypatch):
    c = Cadence.build(cron="30 2 * * *", tz="Europe/Berlin")
    expected = between(c, "2027-03-27T12:00", "2027-11-01T12:00")
    for process_tz in ("America/New_York", "Pacific/Auckland", "Europe/London"):
        monkeypatch.setenv("TZ", process_tz)
        time.tzset()
        try:
            assert between(c, "2027-03-27T12:00", "2027-11-01T12:00") == expected
        finally:
            monkeypatch.delenv("TZ")
            time.tzset()


# -- a brute-force reference around transitions --------------------------------


def reference(cron: str, tz: str, start: str, end: str) -> list[int]:
    """The classic policy stated minute by minute in UTC, independently."""
    zone = ZoneInfo(tz)
    steps = croniter(cron).expressions[1].startswith("*")
    out = []
    t = datetime.fromisoformat(start).replace(tzinfo=timezone.utc)
    stop = datetime.fromisoformat(end).replace(tzinfo=timezone.utc)
    minute = timedelta(minutes=1)
    while t <= stop:
        local = t.astimezone(zone)
        wall = local.replace(tzinfo=None)
        fires = croniter.match(cron, wall)
        if fires and not steps:
            # The second pass of a repeated wall time does not fire.
            earlier = wall.replace(tzinfo=zone, fold=0)
            fires = int(earlier.timestamp()) == int(t.timestamp())
        before = (t - minute).astimezone(zone)
        gap = local.utcoffset() - before.utcoffset()
        if not steps and gap > timedelta(0):
            # t is the first instant after a gap: fire if a skipped wall matched.
            w = before.replace(tzinfo=None) + minute
            while w < wall:
                fires = fires or croniter.match(cron, w)
                w += minute
        if fires:
            out.append(int(t.timestamp()) * 1000)
        t += minute
    return out


@pytest.mark.parametrize("tz,start,end", [
    ("Europe/Berlin", "2027-03-27T18:00", "2027-03-28T12:00"),
    ("Europe/Berlin", "2027-10-30T18:00", "2027-10-31T12:00"),
    ("America/New_York", "2027-03-14T00:00", "2027-03-14T18:00"),
    ("America/New_York", "2027-11-07T00:00", "2027-11-07T18:00"),
    ("Australia/Lord_Howe", "2027-04-03T10:00", "2027-04-04T04:00"),
    ("Australia/Lord_Howe", "2027-10-02T10:00", "2027-10-03T04:00"),
])
@pytest.mark.parametrize("cron", [
    "30 2 * * *", "*/20 * * * *", "15,45 1-3 * * *", "0 * * * *", "10 */2 * * *",
    "*/7 2 * * *",
])
def test_matches_the_minute_by_minute_reference(cron, tz, start, end):
    c = Cadence.build(cron=cron, tz=tz)
    assert between(c, start, end) == reference(cron, tz, start, end)


# -- every_ms: the grid ------------------------------------------------------


def test_grid_is_anchored_at_the_epoch_by_default():
    c = Cadence.build(every_ms=HOUR)
    assert c.first_run(ms("2027-01-01T10:20")) == ms("2027-01-01T11:00")
    assert c.first_run(ms("2027-01-01T11:00")) == ms("2027-01-01T11:00")
    assert c.next_after(ms("2027-01-01T11:00")) == ms("2027-01-01T12:00")


def test_grid_is_anchored_at_start_at_ms():
    start = ms("2027-01-01T10:07")
    c = Cadence.build(every_ms=HOUR, start_at_ms=start)
    assert c.first_run(ms("2026-12-01T00:00")) == start
    assert c.first_run(ms("2027-01-01T12:00")) == ms("2027-01-01T12:07")


def test_cron_respects_start_at_ms():
    c = Cadence.build(cron="0 * * * *", tz="UTC", start_at_ms=ms("2027-01-01T10:30"))
    assert c.first_run(ms("2027-01-01T00:00")) == ms("2027-01-01T11:00")


# -- catch-up after downtime --------------------------------------------------


def test_catch_up_on_time_stands_for_itself():
    c = Cadence.build(every_ms=1000)
    plan = c.catch_up(5000, 5030)
    assert (plan.slot_ms, plan.due, plan.missed, plan.next_ms) == (5000, 1, 0, 6000)


def test_catch_up_after_3_5_s_stopped_in_the_second_half_of_a_period():
    # Slot S minted, everything stopped at S+600 for 3.5 s: the registry
    # holds S+1000; at S+4100 four slots are due -> one job, missed = 3.
    s = 1_700_000_000_000
    plan = Cadence.build(every_ms=1000).catch_up(s + 1000, s + 4100)
    assert (plan.slot_ms, plan.due, plan.missed, plan.next_ms) == (s + 4000, 4, 3, s + 5000)


def test_catch_up_after_3_5_s_stopped_in_the_first_half_of_a_period():
    s = 1_700_000_000_000
    plan = Cadence.build(every_ms=1000).catch_up(s + 1000, s + 3700)
    assert (plan.slot_ms, plan.missed, plan.next_ms) == (s + 3000, 2, s + 4000)


def test_catch_up_at_the_hour_scale():
    plan = Cadence.build(every_ms=HOUR).catch_up(ms("2027-01-01T10:00"), ms("2027-01-01T13:30"))
    assert (plan.slot_ms, plan.missed, plan.next_ms) == (
        ms("2027-01-01T13:00"), 3, ms("2027-01-01T14:00"))
    cron = Cadence.build(cron="0 * * * *", tz="Europe/Berlin")
    assert cron.catch_up(ms("2027-01-01T10:00"), ms("2027-01-01T13:30")) == plan


def test_catch_up_with_cron_across_fall_back():
    c = Cadence.build(cron="30 * * * *", tz="Europe/Berlin")
    plan = c.catch_up(ms("2027-10-30T23:30"), ms("2027-10-31T02:45"))
    # 23:30, 00:30, 01:30 (the second 02:30 wall), 02:30 -> four due.
    assert (plan.slot_ms, plan.missed, plan.next_ms) == (
        ms("2027-10-31T02:30"), 3, ms("2027-10-31T03:30"))


def test_catch_up_of_a_daily_cron_down_for_days():
    c = Cadence.build(cron="0 3 * * *", tz="Europe/Berlin")
    plan = c.catch_up(ms("2027-01-01T02:00"), ms("2027-01-04T12:00"))
    assert (plan.slot_ms, plan.missed, plan.next_ms) == (
        ms("2027-01-04T02:00"), 3, ms("2027-01-05T02:00"))


def test_catch_up_saturates_at_the_cap(monkeypatch):
    monkeypatch.setattr(cadence, "CATCH_UP_CAP", 10)
    c = Cadence.build(cron="* * * * * *", tz="UTC")
    plan = c.catch_up(ms("2027-01-01T00:00"), ms("2027-01-01T00:01") + 500)
    assert (plan.slot_ms, plan.due, plan.next_ms) == (
        ms("2027-01-01T00:01"), 10, ms("2027-01-01T00:01") + 1000)


def test_catch_up_refuses_a_score_in_the_future():
    with pytest.raises(ValueError, match="due_ms"):
        Cadence.build(every_ms=1000).catch_up(2000, 1000)


# -- validation ---------------------------------------------------------------


@pytest.mark.parametrize("kwargs,exc,word", [
    ({}, ValueError, "every_ms and cron"),
    ({"every_ms": 1000, "cron": "* * * * *"}, ValueError, "every_ms and cron"),
    ({"every_ms": 0}, ValueError, "every_ms"),
    ({"every_ms": -5}, ValueError, "every_ms"),
    ({"every_ms": True}, TypeError, "every_ms"),
    ({"every_ms": 1.5}, TypeError, "every_ms"),
    ({"cron": "61 * * * *"}, ValueError, "cron"),
    ({"cron": "* * *"}, ValueError, "cron"),
    ({"cron": "0 0 * * * * 2027"}, ValueError, "cron"),
    ({"cron": "H * * * *"}, ValueError, "cron"),
    ({"cron": "0 0 30 2 *"}, ValueError, "cron"),
    ({"cron": " 0 * * * *"}, ValueError, "cron"),
    ({"cron": 5}, TypeError, "cron"),
    ({"cron": "0 * * * *", "tz": "Mars/Olympus"}, ValueError, "tz"),
    ({"cron": "0 * * * *", "tz": "../etc/passwd"}, ValueError, "tz"),
    ({"cron": "0 * * * *", "tz": ""}, ValueError, "tz"),
    ({"cron": "0 * * * *", "tz": "x" * 300}, ValueError, "tz"),
    ({"cron": "0 * * * *", "tz": "Europe"}, ValueError, "tz"),
    ({"cron": "0 * * * *", "tz": 1}, TypeError, "tz"),
    ({"every_ms": 1000, "start_at_ms": -1}, ValueError, "start_at_ms"),
    ({"every_ms": 1000, "start_at_ms": "0"}, TypeError, "start_at_ms"),
])
def test_bad_input_names_the_argument(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        Cadence.build(**kwargs)


def test_module_uses_no_host_clock():
    source = open(cadence.__file__, encoding="utf-8").read()
    for call in ("time.time", "datetime.now", "utcnow", "date.today"):
        assert call not in source, call
