"""@job: registration, inline calls, the JSON envelope and its rules, enqueue variants."""

import datetime as dt
import decimal
import json

import pytest
from django.test import override_settings

from echomq_django import Backoff, JobFunction, Outcome, PayloadError, PayloadTooLargeError, job
from echomq_django.api import registry
from echomq_django.protocol.keyspace import Keyspace
from echomq_django.protocol.records import decode_row
from tests import nodes, state
from tests.testapp import jobs as testjobs


def keys_of(redis_client, queue):
    return sorted(nodes.keys(redis_client, f"emq:{{{queue}}}:*"))


def test_registered_by_dotted_path():
    assert registry.lookup("tests.testapp.jobs.add") is testjobs.add
    assert isinstance(testjobs.add, JobFunction)
    assert testjobs.add.path == "tests.testapp.jobs.add"


def test_calling_runs_inline():
    assert testjobs.add(2, 3) == 5


def test_local_functions_and_lambdas_are_refused():
    with pytest.raises(TypeError, match="module-level"):
        @job
        def local():
            pass
    with pytest.raises(TypeError, match="module-level"):
        job(testjobs.lambda_for_tests)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="queue name"):
        job(queue="no spaces")(testjobs.add.fn)
    with pytest.raises(ValueError, match="max_attempts must be in 1..9007199254740992, got 0"):
        job(max_attempts=0)(testjobs.add.fn)
    with pytest.raises(TypeError, match="max_attempts must be an int >= 1, got str"):
        job(max_attempts="3")(testjobs.add.fn)
    with pytest.raises(ValueError, match="lease_ms"):
        job(lease_ms=-1)(testjobs.add.fn)
    with pytest.raises(ValueError, match="timeout_ms"):
        job(timeout_ms=0)(testjobs.add.fn)
    with pytest.raises(ValueError, match="backoff"):
        job(backoff=("linear", 5))(testjobs.add.fn)
    with pytest.raises(ValueError, match="not both"):
        job(every=1000, cron="* * * * *")(testjobs.add.fn)
    # The failed decorations did not replace the registered job.
    assert registry.lookup("tests.testapp.jobs.add") is testjobs.add


def test_enqueue_writes_the_envelope(redis_client, queue):
    handle = testjobs.add.using(queue=queue).enqueue(1, b=2)
    assert handle.outcome is Outcome.ENQUEUED and handle.queue == queue
    ks = Keyspace(queue)
    row = decode_row(redis_client.hgetall(ks.job(handle.job_id)))  # the payload's chunks joined
    assert row["state"] == "pending"
    assert json.loads(row["payload"]) == {"job": "tests.testapp.jobs.add", "args": [1], "kwargs": {"b": 2}}
    assert redis_client.zscore(ks.pending, handle.job_id) == 0
    assert handle.get().state == "pending"


def test_using_does_not_change_the_original():
    other = testjobs.add.using(queue="elsewhere")
    assert other.queue == "elsewhere" and testjobs.add.queue == "default"
    assert other.path == testjobs.add.path


def test_enqueue_in_accepts_timedelta_and_ms(redis_client, queue, server_time_ms):
    fn = testjobs.add.using(queue=queue)
    before = server_time_ms()
    h1 = fn.enqueue_in(dt.timedelta(seconds=5), 1, 1)
    h2 = fn.enqueue_in(2500, 1, 1)
    after = server_time_ms()
    ks = Keyspace(queue)
    assert h1.outcome is Outcome.SCHEDULED
    assert before + 5000 <= redis_client.zscore(ks.schedule, h1.job_id) <= after + 5000
    assert before + 2500 <= redis_client.zscore(ks.schedule, h2.job_id) <= after + 2500


def test_enqueue_at_accepts_aware_datetime_and_ms(redis_client, queue):
    fn = testjobs.add.using(queue=queue)
    when = dt.datetime(2030, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    h1 = fn.enqueue_at(when, 1, 2)
    h2 = fn.enqueue_at(1_900_000_000_123, 1, 2)
    ks = Keyspace(queue)
    assert redis_client.zscore(ks.schedule, h1.job_id) == int(when.timestamp() * 1000)
    assert redis_client.zscore(ks.schedule, h2.job_id) == 1_900_000_000_123


@pytest.mark.parametrize("call, error, words", [
    (lambda fn: fn.enqueue_at(dt.datetime(2030, 1, 1), 1, 2), ValueError, "timezone-aware"),
    (lambda fn: fn.enqueue_at("tomorrow", 1, 2), TypeError, "aware datetime"),
    (lambda fn: fn.enqueue_at(-1, 1, 2), ValueError, "when must be Unix milliseconds"),
    (lambda fn: fn.enqueue_at(2**53 + 1, 1, 2), ValueError, "9007199254740992"),
    (lambda fn: fn.enqueue_in(-5, 1, 2), ValueError, ">= 0"),
    (lambda fn: fn.enqueue_in(1.5, 1, 2), TypeError, "timedelta"),
    (lambda fn: fn.enqueue(dt.datetime.now()), PayloadError, "args\\[0\\] is a datetime"),
    (lambda fn: fn.enqueue(decimal.Decimal("1.5")), PayloadError, "Decimal"),
    (lambda fn: fn.enqueue(float("nan")), PayloadError, "NaN"),
    (lambda fn: fn.enqueue({1: "a"}), PayloadError, "int key"),
    (lambda fn: fn.enqueue(x=(1, 2)), PayloadError, "kwargs\\['x'\\] is a tuple"),
    (lambda fn: fn.enqueue([{"deep": object()}]), PayloadError, "args\\[0\\]\\[0\\]\\['deep'\\]"),
    # Lone surrogates have no UTF-8 form (what surrogateescape leaves for
    # undecodable bytes): refused naming where they are.
    (lambda fn: fn.enqueue("\ud800", 1), ValueError,
     r"^args\[0\] must be text UTF-8 can encode; it has a lone surrogate '\\ud800' at index 0"),
    (lambda fn: fn.enqueue(1, b=["ok", {"k": "x\udcff"}]), ValueError,
     r"^kwargs\['b'\]\[1\]\['k'\] must be text UTF-8 can encode; .* at index 1"),
    (lambda fn: fn.enqueue({"\udc80": 1}, 2), ValueError,
     r"^a key of args\[0\] must be text UTF-8 can encode"),
    (lambda fn: fn.enqueue_in(10, ["\ud83d"], 2), ValueError, r"^args\[0\]\[0\] must be text"),
])
def test_bad_input_raises_and_writes_nothing(redis_client, queue, call, error, words):
    fn = testjobs.add.using(queue=queue)
    with pytest.raises(error, match=words):
        call(fn)
    assert keys_of(redis_client, queue) == []


def test_a_surrogate_pair_is_text_and_travels_whole(redis_client, queue):
    handle = testjobs.add.using(queue=queue).enqueue("\U0001f600", b={"é": "\u00e9"})
    assert json.loads(handle.get().payload)["args"] == ["\U0001f600"]


def test_payload_errors_are_type_errors():
    assert issubclass(PayloadError, TypeError)
    assert issubclass(PayloadTooLargeError, ValueError)


def test_model_instance_is_refused(redis_client, queue, django_user_model):
    user = django_user_model(username="x")
    with pytest.raises(PayloadError, match="User"):
        testjobs.add.using(queue=queue).enqueue(user)
    assert keys_of(redis_client, queue) == []


def test_payload_size_limit(redis_client, queue, valkey_url):
    fn = testjobs.add.using(queue=queue)
    with override_settings(ECHOMQ={"URL": valkey_url, "MAX_PAYLOAD_BYTES": 1000}):
        fn.enqueue("x" * 900, "")
        with pytest.raises(PayloadTooLargeError, match="MAX_PAYLOAD_BYTES"):
            fn.enqueue("x" * 1000, "")
    assert len(redis_client.zrange(Keyspace(queue).pending, 0, -1)) == 1


def test_default_payload_limit_is_512_kib(redis_client, queue):
    fn = testjobs.add.using(queue=queue)
    with pytest.raises(PayloadTooLargeError):
        fn.enqueue("x" * (512 * 1024), "")
    assert keys_of(redis_client, queue) == []


def test_backoff_constructor_is_usable_in_job():
    jf = job(backoff=Backoff.exponential(base_ms=100, cap_ms=1000, jitter=True))(testjobs.add.fn)
    try:
        assert jf.backoff == ("jitter", ("exponential", 100, 1000))
    finally:
        registry.register(testjobs.add)


def _nested(levels):
    value = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("enqueue", [
    lambda fn, *a, **k: fn.enqueue(*a, **k),
    lambda fn, *a, **k: fn.enqueue_in(10, *a, **k),
    lambda fn, *a, **k: fn.enqueue_at(2_000_000_000_000, *a, **k),
])
def test_a_payload_nested_too_deep_raises_payload_error_and_writes_nothing(
        redis_client, queue, enqueue):
    fn = testjobs.add.using(queue=queue)
    with pytest.raises(PayloadError, match=r"^args\[0\] is nested deeper than 100 levels"):
        enqueue(fn, _nested(100_000), 1)
    with pytest.raises(PayloadError, match=r"^kwargs\['b'\] is nested deeper than 100 levels"):
        enqueue(fn, 1, b={"x": _nested(100)})
    assert state.snapshot(redis_client, state.queue_pattern(queue)) == {}
    # 100 levels is the limit, not past it: the worker reads it back.
    handle = enqueue(fn, _nested(100), 1)
    assert json.loads(handle.get().payload)["args"][0] == _nested(100)


def test_a_payload_that_contains_itself_raises_payload_error_and_writes_nothing(
        redis_client, queue):
    fn = testjobs.add.using(queue=queue)
    loop = [1, 2]
    loop.append(loop)
    with pytest.raises(PayloadError,
                       match=r"^args\[0\] contains itself \(again at args\[0\]\[2\]\)"):
        fn.enqueue(loop, 1)
    ring = {"next": {"items": []}}
    ring["next"]["items"].append(ring)
    with pytest.raises(PayloadError,
                       match=r"^kwargs\['b'\] contains itself \(again at "
                             r"kwargs\['b'\]\['next'\]\['items'\]\[0\]\)"):
        fn.enqueue(1, b=ring)
    assert state.snapshot(redis_client, state.queue_pattern(queue)) == {}
    # The same object twice is not a cycle.
    shared = [1]
    assert fn.enqueue([shared, shared], 1).outcome is Outcome.ENQUEUED


@pytest.mark.parametrize("options", [
    {"cron": "0 9 * * *", "tz": "x" * 300},   # zoneinfo's OSError: file name too long
    {"cron": "0 9 * * *", "tz": "Europe"},    # a directory of the zone database
    {"cron": "0 9 * * *", "tz": ""},          # was read as "UTC" here, refused at boot
    {"every": 60_000, "tz": ""},
    {"tz": ""},                               # no schedule: still not a zone
])
def test_a_bad_tz_fails_at_decoration_naming_tz(options):
    try:
        with pytest.raises(ValueError, match=r"^tz must be an IANA zone name, got '") as info:
            job(**options)(testjobs.hourly_report.fn)
        assert not isinstance(info.value, OSError) and len(str(info.value)) < 400
    finally:
        registry.register(testjobs.hourly_report)


@pytest.mark.parametrize("delay, shown", [
    (dt.timedelta(microseconds=-1), "-0.001 ms"),   # was rounded to 0 and accepted
    (dt.timedelta(milliseconds=-1), "-1.0 ms"),
    (dt.timedelta(days=-1), "-86400000.0 ms"),
    (-1, "-1 ms"),
])
def test_a_negative_delay_is_refused_whatever_its_unit(redis_client, queue, delay, shown):
    with pytest.raises(ValueError, match=f"^delay must be >= 0 ms, got {shown}$"):
        testjobs.add.using(queue=queue).enqueue_in(delay, 1, 2)
    assert state.snapshot(redis_client, state.queue_pattern(queue)) == {}


def test_a_positive_sub_millisecond_delay_rounds_down(redis_client, queue, server_time_ms):
    before = server_time_ms()
    handle = testjobs.add.using(queue=queue).enqueue_in(dt.timedelta(microseconds=1999), 1, 2)
    assert before + 1 <= redis_client.zscore(Keyspace(queue).schedule, handle.job_id) <= \
        server_time_ms() + 1


def test_enqueue_at_refuses_unix_seconds_and_instants_before_2000(redis_client, queue):
    import time

    fn = testjobs.add.using(queue=queue)
    seconds = int(time.time()) + 5
    with pytest.raises(ValueError, match=(
            rf"^when must be Unix milliseconds \(>= 946684800000, 2000-01-01\); got {seconds}, "
            r"which looks like seconds$")):
        fn.enqueue_at(seconds, 1, 2)
    with pytest.raises(ValueError, match=r"^when must be Unix milliseconds .*; got 5$"):
        fn.enqueue_at(5, 1, 2)
    late_1999 = dt.datetime(1999, 12, 31, 23, 59, 59, 999_000, tzinfo=dt.timezone.utc)
    with pytest.raises(ValueError, match=r"^when must be 2000-01-01T00:00:00Z or later, "
                                         r"got 1999-12-31T23:59:59.999000\+00:00$"):
        fn.enqueue_at(late_1999, 1, 2)
    assert state.snapshot(redis_client, state.queue_pattern(queue)) == {}
    # The bound itself is an instant (in the past: due at once).
    ks = Keyspace(queue)
    first = fn.enqueue_at(946_684_800_000, 1, 2)
    second = fn.enqueue_at(late_1999 + dt.timedelta(milliseconds=1), 1, 2)
    assert redis_client.zscore(ks.schedule, first.job_id) == 946_684_800_000
    assert redis_client.zscore(ks.schedule, second.job_id) == 946_684_800_000


@pytest.mark.parametrize("args, kwargs, problem", [
    (("a", "b", "c"), {}, "too many positional arguments"),
    ((1,), {}, "missing a required argument: 'b'"),
    ((1, 2), {"c": 3}, "got an unexpected keyword argument 'c'"),
    ((1,), {"a": 2}, "multiple values for argument 'a'"),
])
@pytest.mark.parametrize("verb", ["enqueue", "enqueue_in", "enqueue_at"])
def test_arguments_that_do_not_fit_the_signature_raise_before_writing(
        redis_client, queue, verb, args, kwargs, problem):
    fn = testjobs.add.using(queue=queue)
    lead = {"enqueue": (), "enqueue_in": (10,), "enqueue_at": (2_000_000_000_000,)}[verb]
    with pytest.raises(TypeError) as info:
        getattr(fn, verb)(*lead, *args, **kwargs)
    assert type(info.value) is TypeError
    assert str(info.value) == f"tests.testapp.jobs.add() cannot take these arguments: {problem}"
    assert state.snapshot(redis_client, state.queue_pattern(queue)) == {}


def test_a_context_job_binds_with_the_context_the_worker_passes(redis_client, queue):
    fn = testjobs.whoami.using(queue=queue)
    assert fn.enqueue().outcome is Outcome.ENQUEUED
    after_one = state.snapshot(redis_client, state.queue_pattern(queue))
    # The 1 would land on context, which the worker passes too.
    with pytest.raises(TypeError, match=r"^tests\.testapp\.jobs\.whoami\(\) cannot take these "
                                        r"arguments: multiple values for argument 'context'$"):
        fn.enqueue(1)
    with pytest.raises(TypeError, match=r"^tests\.testapp\.jobs\.whoami\(\) gets context= from "
                                        r"the worker"):
        fn.enqueue(context="mine")
    assert state.snapshot(redis_client, state.queue_pattern(queue)) == after_one  # nothing written
    assert testjobs.no_context.using(queue=queue).enqueue(1, x=2, context=3)


def test_the_signature_is_read_once_not_per_enqueue(redis_client, queue, monkeypatch):
    import inspect

    def no_more(*args, **kwargs):
        raise AssertionError("inspect.signature called at enqueue")

    monkeypatch.setattr(inspect, "signature", no_more)
    fn = testjobs.add.using(queue=queue)
    fn.enqueue(1, 2)
    with pytest.raises(TypeError, match="missing a required argument"):
        fn.enqueue(1)


def test_a_recurring_job_that_needs_arguments_fails_at_decoration():
    try:
        with pytest.raises(TypeError, match=(
                r"^tests\.testapp\.jobs\.add\(\) cannot take these arguments: missing a "
                r"required argument: 'a'; a recurring @job's occurrences pass no arguments")):
            job(every=60_000)(testjobs.add.fn)
        with pytest.raises(TypeError, match=r"missing a required argument: 'key'"):
            job(cron="0 9 * * *", context=True)(testjobs.snooze_then_fail.fn)
        # The context the worker passes counts: this one binds.
        job(every=60_000, context=True)(testjobs.context_report.fn)
    finally:
        for original in (testjobs.add, testjobs.snooze_then_fail, testjobs.context_report):
            registry.register(original)


def test_context_true_needs_a_context_parameter():
    try:
        with pytest.raises(TypeError, match=r"^@job\(context=True\) needs "
                                            r"tests\.testapp\.jobs\.add\(\) to take a context"):
            job(context=True)(testjobs.add.fn)
    finally:
        registry.register(testjobs.add)


@pytest.mark.parametrize("options", [{"group": "chat-1"}, {"priority": 5}])
def test_a_recurring_job_refuses_a_group_or_priority_it_would_ignore(options):
    try:
        with pytest.raises(ValueError, match=r"takes no group or priority: recurring "
                                             r"occurrences run in the queue's ungrouped lane"):
            job(every=60_000, **options)(testjobs.hourly_report.fn)
        # Priority 0 is the default it would get anyway.
        job(every=60_000, priority=0)(testjobs.hourly_report.fn)
    finally:
        registry.register(testjobs.hourly_report)


@pytest.mark.parametrize("option, value, error, words", [
    ("lease_ms", 2**53 + 1, ValueError, r"lease_ms must be in 1..9007199254740992, got"),
    ("timeout_ms", 2**53 + 1, ValueError, r"timeout_ms must be in 1..9007199254740992, got"),
    ("max_attempts", 2**53 + 1, ValueError, r"max_attempts must be in 1..9007199254740992"),
    ("lease_ms", 1.5, TypeError, r"lease_ms must be an int >= 1, got float"),
    ("timeout_ms", True, TypeError, r"timeout_ms must be an int >= 1, got bool"),
    ("backoff", ("fixed", 2**53 + 1), ValueError, r"backoff \('fixed', ms\) .* 0..2\*\*53"),
    ("backoff", ("exponential", 1000, 2**60), ValueError, r"base and cap in 1..2\*\*53"),
    ("backoff", ("jitter", ("exponential", 2**53 + 1, 1)), ValueError, r"1..2\*\*53"),
    ("context", "yes", TypeError, r"context must be a bool \(True or False\), got 'yes'"),
    ("context", 1, TypeError, r"context must be a bool"),
    ("context", None, TypeError, r"context must be a bool"),
    ("queue", 5, TypeError, r"queue name must be a str of 1-100 characters .* got int$"),
    ("queue", None, TypeError, r"queue name must be a str"),
    ("queue", b"mail", TypeError, r"queue name must be a str"),
])
def test_an_option_out_of_its_range_or_type_fails_at_decoration(option, value, error, words):
    try:
        with pytest.raises(error, match=words):
            job(**{option: value})(testjobs.add.fn)
        assert registry.lookup("tests.testapp.jobs.add") is testjobs.add
    finally:
        registry.register(testjobs.add)


def test_the_largest_options_are_accepted():
    jf = job(lease_ms=2**53, timeout_ms=2**53, max_attempts=2**53,
             backoff=("exponential", 2**53, 2**53))(testjobs.add.fn)
    try:
        assert (jf.lease_ms, jf.timeout_ms, jf.max_attempts) == (2**53,) * 3
    finally:
        registry.register(testjobs.add)


def test_jitter_nested_thousands_deep_fails_at_decoration_with_a_value_error():
    policy = ("fixed", 10)
    for _ in range(5000):
        policy = ("jitter", policy)
    with pytest.raises(ValueError, match=r"backoff policy nests \('jitter', inner\) more than"):
        job(backoff=policy)(testjobs.add.fn)


@pytest.mark.parametrize("value", [5, b"mail", ["mail"]])
def test_using_a_queue_that_is_not_a_str_is_a_type_error(value):
    with pytest.raises(TypeError, match=r"queue name must be a str"):
        testjobs.add.using(queue=value)
