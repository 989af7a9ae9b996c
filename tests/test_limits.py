"""RateLimiter: token buckets on the server clock (docs/protocol.md, "limits/take").

Every instant is the server's: a take happened somewhere between the TIME read
just before the call and the one just after, and the assertions allow exactly
that bracket. Waits are the ones the limiter answers, never guessed.
"""

import math
import threading
import time
import uuid

import pytest
import redis
from redis.crc import key_slot

from echomq_django import BrandedId, Jobs, RateLimiter
from echomq_django.protocol import keyspace, scripts
from echomq_django.protocol.keyspace import Keyspace
from tests.state import queue_pattern, snapshot

@pytest.fixture
def key():
    return "chat-" + uuid.uuid4().hex[:12]


def timed_take(limiter, server_time_ms, key, count, per_ms):
    """(server ms before, wait, server ms after) of one take."""
    before = server_time_ms()
    wait = limiter.take(key, count, per_ms)
    return before, wait, server_time_ms()


def sleep_until_server(server_time_ms, instant_ms):
    """Sleep until the server's clock reads ``instant_ms``: the local sleep is
    only how long the server says is left."""
    while (left := instant_ms - server_time_ms()) > 0:
        time.sleep(left / 1000)


def test_the_key_is_its_own_hash_tag():
    assert keyspace.rate_limit("chat-7") == "emq:{rl:chat-7}"
    assert key_slot(b"emq:{rl:chat-7}") == key_slot(b"rl:chat-7")
    assert key_slot(keyspace.rate_limit("a").encode()) != key_slot(keyspace.rate_limit("b").encode())


def test_a_burst_of_count_then_a_wait_that_is_right_on_the_server_clock(
        conn, server_time_ms, key):
    limiter = RateLimiter(conn)
    # 3 per 900 ms: a burst of 3, then one every 300 ms, counted from the
    # first take (at x1, somewhere in [s0, s1]): the next token is due at
    # x1 + 300, +1 ms for float rounding.
    s0, first, s1 = timed_take(limiter, server_time_ms, key, 3, 900)
    assert first == 0
    assert [limiter.take(key, 3, 900) for _ in range(2)] == [0, 0]
    r0, wait, r1 = timed_take(limiter, server_time_ms, key, 3, 900)
    assert s0 + 300 - r1 <= wait <= s1 + 301 - r0
    # Halfway there, asking again takes nothing and names the same instant.
    sleep_until_server(server_time_ms, s1 + 150)
    a0, again, a1 = timed_take(limiter, server_time_ms, key, 3, 900)
    assert s0 + 300 - a1 <= again <= s1 + 301 - a0
    # Once the server's clock passes that instant, exactly one token is there.
    sleep_until_server(server_time_ms, a1 + again)
    assert limiter.take(key, 3, 900) == 0
    assert 1 <= limiter.take(key, 3, 900) <= 301


def test_tokens_refill_at_the_rate_and_never_faster(conn, server_time_ms, key):
    limiter = RateLimiter(conn)
    # One per 200 ms: after the first take every later one waits a full 200 ms.
    takes = []  # (server ms before, server ms after) of each take that got a token
    while len(takes) < 6:
        before, wait, after = timed_take(limiter, server_time_ms, key, 1, 200)
        if wait == 0:
            takes.append((before, after))
        else:
            assert 1 <= wait <= 201
            sleep_until_server(server_time_ms, after + wait)
    for (before, _), (_, after) in zip(takes, takes[1:]):
        assert after - before >= 200              # never two tokens within 200 ms
    # ... and not slower than the rate plus what this machine adds per take.
    assert takes[-1][0] - takes[0][1] <= 5 * 200 + 5 * 60


def test_a_bucket_holds_at_most_count(conn, server_time_ms, key):
    limiter = RateLimiter(conn)
    # 3 per 1000 ms. One take leaves 2; 700 ms later the refill (2.1) would
    # make 4.1 without the cap, but the bucket holds 3.
    before, wait, after = timed_take(limiter, server_time_ms, key, 3, 1_000)
    assert wait == 0
    sleep_until_server(server_time_ms, after + 700)
    burst = [limiter.take(key, 3, 1_000) for _ in range(4)]
    assert server_time_ms() < before + 1_000      # still inside the key's life
    assert burst[:3] == [0, 0, 0] and burst[3] >= 1


def test_the_bucket_expires_when_a_full_one_would_be_no_different(
        conn, redis_client, server_time_ms, key):
    limiter = RateLimiter(conn)
    name = keyspace.rate_limit(key)
    assert [limiter.take(key, 2, 300) for _ in range(3)][:2] == [0, 0]
    taken = server_time_ms()
    assert 0 < redis_client.pttl(name) <= 300
    assert redis_client.hget(name, "bucket") is not None
    sleep_until_server(server_time_ms, taken + 300)
    deadline = time.monotonic() + 2
    while redis_client.exists(name):    # reading an expired key removes it
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # Gone, and as good as full: a whole burst again, then a wait.
    burst = [limiter.take(key, 2, 300) for _ in range(3)]
    assert burst[:2] == [0, 0] and burst[2] >= 1


def test_a_refused_take_writes_nothing(conn, redis_client, key):
    limiter = RateLimiter(conn)
    name = keyspace.rate_limit(key)
    assert limiter.take(key, 1, 5_000) == 0
    held = redis_client.hgetall(name)
    ttl = redis_client.pttl(name)
    assert limiter.take(key, 1, 5_000) >= 1
    assert redis_client.hgetall(name) == held
    assert redis_client.pttl(name) <= ttl    # not renewed by the refusal


def test_each_key_has_its_own_bucket(conn, key):
    limiter = RateLimiter(conn)
    assert limiter.take(key, 1, 60_000) == 0
    assert limiter.take(key, 1, 60_000) >= 59_000
    assert limiter.take(key + "-other", 1, 60_000) == 0


def test_takers_on_threads_never_exceed_the_rate_in_any_window(conn, server_time_ms, key):
    count, per_ms, run_ms = 3, 300, 1_500
    start = server_time_ms()
    takes, lock = [], threading.Lock()

    def taker():
        limiter = RateLimiter(conn)
        while True:
            before, wait, after = timed_take(limiter, server_time_ms, key, count, per_ms)
            if wait == 0:
                with lock:
                    takes.append((before, after))
            if after >= start + run_ms:
                return
            if wait:
                time.sleep(min(wait, start + run_ms - after) / 1000)

    threads = [threading.Thread(target=taker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads)
    takes.sort()
    # Every take in a window [a, b] of server ms: at most count + (b - a) * rate.
    # For each pair of takes, the ones whose whole bracket lies between the
    # first's start and the second's end certainly happened in that window.
    for i, (a, _) in enumerate(takes):
        for _, b in takes[i:]:
            inside = sum(1 for before, after in takes if before >= a and after <= b)
            assert inside <= count + math.floor((b - a) * count / per_ms + 1e-9), (a, b, inside)
    # And the limiter did hand out its budget (not a vacuous pass): the burst
    # plus most of the refill over the run.
    assert len(takes) >= count + (run_ms * count // per_ms) * 2 // 3


@pytest.mark.parametrize("args, error, name", [
    ((None, 1, 1000), TypeError, "key"),
    ((7, 1, 1000), TypeError, "key"),
    ((b"chat", 1, 1000), TypeError, "key"),
    (("", 1, 1000), ValueError, "key"),
    (("x" * 201, 1, 1000), ValueError, "key"),
    (("has space", 1, 1000), ValueError, "key"),
    (("br{ace}", 1, 1000), ValueError, "key"),
    (("lone\ud800", 1, 1000), ValueError, "key"),
    (("k", 0, 1000), ValueError, "count"),
    (("k", -3, 1000), ValueError, "count"),
    (("k", 2**53 + 1, 1000), ValueError, "count"),
    (("k", 1.5, 1000), TypeError, "count"),
    (("k", True, 1000), TypeError, "count"),
    (("k", "3", 1000), TypeError, "count"),
    (("k", 1, 0), ValueError, "per_ms"),
    (("k", 1, -1000), ValueError, "per_ms"),
    (("k", 1, 1000.0), TypeError, "per_ms"),
    (("k", 1, None), TypeError, "per_ms"),
])
def test_bad_arguments_are_refused_before_anything_is_sent(
        conn, redis_client, key, args, error, name):
    # "k" stands for this test's own key, so only its bucket is watched.
    args = (key if args[0] == "k" else args[0], *args[1:])
    watched = [keyspace.rate_limit(key)]
    if isinstance(args[0], str) and args[0] != key:
        watched.append(("emq:{rl:" + args[0] + "}").encode("utf-8", "surrogatepass"))
    with pytest.raises(error, match=rf"^{name} must"):
        RateLimiter(conn).take(*args)
    assert redis_client.exists(*watched) == 0
    # A client that cannot reach any server: the check raises before a send would.
    nowhere = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    with pytest.raises(error, match=rf"^{name} must"):
        RateLimiter(nowhere).take(*args)


GARBAGE = ["x", "-500", "0", "1.5", "", "1e400", "1e17", "nan", "0x10", " 5", "1e3", "5.0"]


def test_the_script_refuses_garbage_and_foreign_keys_before_any_write(
        conn, redis_client, queue, key):
    name = keyspace.rate_limit(key)
    job_id = BrandedId.generate()
    Jobs(conn).enqueue(queue, job_id, "{}")
    row = Keyspace(queue).job(job_id)

    wrongs = [row, "emq:{rl:}", "emq:{rl:a}:" + key, "emq:{rl:a " + key + "}", "rl:" + key, key]

    def state():
        return {**snapshot(redis_client, name, *wrongs[1:]),
                **snapshot(redis_client, queue_pattern(queue))}

    before = state()
    for i, label in enumerate(["count", "per_ms"]):
        for bad in GARBAGE:
            args = [3, 1000]
            args[i] = bad
            with pytest.raises(ValueError, match=rf"^{label} must be an integer"):
                scripts.run(conn, "limits/take", [name], args)
            assert state() == before, (label, bad)
    for wrong in wrongs:
        with pytest.raises(ValueError, match="is not a rate limiter key"):
            scripts.run(conn, "limits/take", [wrong], [3, 1000])
        with pytest.raises(redis.ResponseError, match="^EMQKEY "):   # a wrong key's code
            scripts._script(conn, "limits/take")(keys=[wrong], args=[3, 1000])
        assert state() == before, wrong
    # The call as built does write, so the refusals were about the garbage.
    assert scripts.run(conn, "limits/take", [name], [3, 1000]) == 0
    assert state() != before
