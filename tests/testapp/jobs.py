"""Jobs the test suite enqueues. Each records what happened in Redis (not in
memory), so a test in another process can read it."""

import os
import time
import uuid
from datetime import timedelta

from echomq_django import Backoff, job
from tests.nodes import job_client, steady


def _client():
    # Repeats a command whose connection was dropped (the fault tests kill
    # connections); every command the jobs send is safe to repeat or is
    # checked by a test that tolerates it.
    return job_client()


@job(queue="default")
def add(a, b):
    return a + b


@job(queue="default", max_attempts=3, backoff=Backoff.fixed(50))
def flaky(key, fail_times):
    """Fails the first ``fail_times`` runs, then returns the run count."""
    runs = _client().incr(key)
    if runs <= fail_times:
        raise RuntimeError(f"transient failure {runs}")
    return runs


@job(queue="default", max_attempts=2, backoff=Backoff.fixed(20))
def always_fails(key):
    _client().incr(key)
    raise ValueError("permanent failure")


@job(queue="default")
def record_start(key):
    """Stores the server time (ms) at which the handler started."""
    client = _client()
    sec, usec = client.time()
    client.set(key, sec * 1000 + usec // 1000)


@job(queue="default")
def sleep_then_mark(key, seconds):
    client = _client()
    client.set(key + ":started", 1)
    time.sleep(seconds)
    client.set(key + ":finished", 1)
    return "slept"


@job(queue="default", context=True)
def whoami(context):
    return {"job_id": context.job_id, "attempt": context.attempt, "queue": context.queue}


@job(queue="default", every=timedelta(hours=1))
def hourly_report():
    return "hourly"


# -- lifecycle controls (tests/test_lifecycle*.py) ----------------------------
# Each records what it saw under keys that start with the ``key`` it is given
# (the test's queue name), so the test can read it from another process.

import signal  # noqa: E402

from echomq_django import Discard, Retry, Snooze  # noqa: E402


@job(queue="default", context=True, max_attempts=3, backoff=Backoff.exponential(1000, 300_000))
def snooze_then_fail(key, snoozes, context):
    """Snoozes ``snoozes`` times (raising and returning Snooze(0) in turn), then
    fails once for real, then returns what its context said."""
    client = _client()
    client.rpush(key + ":runs", f"{context.attempt}:{context.snoozes}")
    if context.snoozes < snoozes:
        if context.snoozes % 2:
            return Snooze(0)
        raise Snooze(0)
    if client.incr(key + ":failures") == 1:
        raise RuntimeError("a real failure after the snoozes")
    return {"attempt": context.attempt, "snoozes": context.snoozes}


@job(queue="default", context=True, max_attempts=3, backoff=Backoff.fixed(10))
def wait_for_cancel(key, raise_after, context):
    """Loops until ``context.cancelled``; records that it saw it, then raises
    (``raise_after``) or returns. Gives up after 20 s."""
    client = _client()
    client.incr(key + ":runs")
    deadline = time.monotonic() + 20
    while not context.cancelled:
        if time.monotonic() > deadline:
            return "never cancelled"
        time.sleep(0.01)
    client.set(key + ":saw_cancel", context.attempt)
    if raise_after:
        raise RuntimeError("the handler raised after seeing the cancel")
    return "stopped early"


@job(queue="default", context=True)
def hold_then_return(key, seconds, context):
    """Attempt 1 sleeps ``seconds`` (the one a test pauses or kills); later
    attempts return at once. Returns the pid and attempt that ran it."""
    client = _client()
    client.rpush(key + ":runs", f"{os.getpid()}:{context.attempt}")
    if context.attempt == 1:
        time.sleep(seconds)
        client.set(key + ":first_finished", os.getpid())
    return {"pid": os.getpid(), "attempt": context.attempt}


@job(queue="default", context=True)
def report_progress(key, context):
    """Reports 40 "reading", waits for ``key:go``, then reports 100 "written"."""
    client = _client()
    context.progress(40, "reading")
    client.set(key + ":reported", 1)
    deadline = time.monotonic() + 20
    while not client.exists(key + ":go") and time.monotonic() < deadline:
        time.sleep(0.01)
    context.progress(100, "written")
    return "reported"


@job(queue="default", max_attempts=1, timeout_ms=300)
def overrun(key, seconds):
    """Sleeps ``seconds``, far past its 300 ms time limit."""
    client = _client()
    client.set(key + ":pid", os.getpid())
    time.sleep(seconds)
    client.set(key + ":finished", 1)
    return "too late"


@job(queue="default", max_attempts=2, backoff=Backoff.fixed(50), timeout_ms=300)
def overrun_twice(key, seconds):
    """Like ``overrun`` with two attempts."""
    _client().rpush(key + ":runs", os.getpid())
    time.sleep(seconds)
    return "too late"


@job(queue="default")
def poison(key):
    """Kills the process that runs it, every time."""
    _client().incr(key)
    os.kill(os.getpid(), signal.SIGKILL)


@job(queue="default", max_attempts=3, backoff=Backoff.fixed(20))
def choose(key, outcome, delay_ms=0):
    """Ends the way ``outcome`` says: retry (Retry(delay_ms)), discard,
    snooze_raise, snooze_return, error (a plain exception) or done."""
    _client().incr(key)
    if outcome == "retry":
        raise Retry(delay_ms=delay_ms, reason="asked to retry")
    if outcome == "discard":
        raise Discard("the user was deleted")
    if outcome == "snooze_raise":
        raise Snooze(delay_ms)
    if outcome == "snooze_return":
        return Snooze(delay_ms)
    if outcome == "error":
        raise KeyError("boom")
    return {"outcome": outcome}


@job(queue="default", context=True)
def context_report(context):
    """Returns what its context says."""
    return {"job_id": context.job_id, "attempt": context.attempt, "snoozes": context.snoozes,
            "scheduled_for_ms": context.scheduled_for_ms, "missed": context.missed,
            "cancelled": context.cancelled, "queue": context.queue,
            "timeout_ms": context.timeout_ms}


@job(queue="default")
def no_context(*args, **kwargs):
    """Returns the keyword arguments it was called with (no context expected)."""
    return sorted(kwargs)


@job(queue="default", max_attempts=2, backoff=Backoff.fixed(20))
def fail_with(message, discard=False, bad_byte=False):
    """Raises ValueError(message), or Discard(message) with ``discard``.
    ``bad_byte`` appends the byte 0xff as surrogateescape decodes it: a lone
    surrogate (arguments cannot carry one; enqueue refuses it)."""
    if bad_byte:
        message = (message.encode() + b"\xff").decode("utf-8", "surrogateescape")
    if discard:
        raise Discard(message)
    raise ValueError(message)


# Not a job: test_decorators checks that @job refuses a module-level lambda.
lambda_for_tests = lambda: None  # noqa: E731


@job(queue="default", max_attempts=2, backoff=Backoff.fixed(20))
def exits(key):
    """Raises SystemExit, as a handler that calls sys.exit() does."""
    _client().incr(key)
    raise SystemExit(3)


@job(queue="default", context=True)
def tally(key, sleep_ms=0, context=None):
    """Records each run of each job: the job id joins the set ``key`` and a
    fresh run id joins ``key:<job id>`` (two members: it ran twice). SADD is
    idempotent, so a command the client repeats after a dropped connection
    does not count twice, nor does one ``steady`` repeats."""
    if sleep_ms:
        time.sleep(sleep_ms / 1000)
    client = _client()
    run = uuid.uuid4().hex
    steady(lambda: client.sadd(f"{key}:{context.job_id}", run))
    steady(lambda: client.sadd(key, context.job_id))
    return context.attempt


def tally_runs(client, key) -> dict[str, int]:
    """job id -> how many times ``tally`` ran it."""
    ids = sorted(client.smembers(key))
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.scard(f"{key}:{job_id}")
    return dict(zip(ids, pipe.execute()))


@job(queue="default")
def nap(ms):
    """Sleeps ``ms`` and returns it; touches no server itself."""
    time.sleep(ms / 1000)
    return ms


@job(queue="default", lease_ms=5_000)
def nap_leased(ms):
    """``nap`` with a lease of its own, so the worker extends the lease it
    claimed with before the handler runs."""
    time.sleep(ms / 1000)
    return ms


@job(queue="default", context=True)
def lane_probe(key, sleep_ms=0, context=None):
    """Records its run in the list ``key``: ``"<group>|<start ms>|<end ms>|<job
    id>|<claimed at ms>"``, start and end read from the server's clock in the
    handler, the last from the context (the claim's own instant)."""
    client = _client()
    sec, usec = client.time()
    start = int(sec) * 1000 + int(usec) // 1000
    if sleep_ms:
        time.sleep(sleep_ms / 1000)
    sec, usec = client.time()
    end = int(sec) * 1000 + int(usec) // 1000
    client.rpush(key, f"{context.group or ''}|{start}|{end}|{context.job_id}|"
                      f"{context.claimed_at_ms}")


@job(queue="default", context=True)
def token_report(key, context=None):
    """Records the fencing token its run holds in the list ``key``:
    ``"<queue>|<job id>|<token>"``."""
    _client().rpush(key, f"{context.queue}|{context.job_id}|{context.token}")


@job(queue="default")
def lone_surrogate():
    """Returns text UTF-8 cannot encode (what a bad byte decoded with
    surrogateescape leaves)."""
    return {"name": "caf\udce9"}


@job(queue="default", context=True, max_attempts=3, backoff=Backoff.fixed(0))
def fail_every_attempt(n, context=None):
    """Fails each of its three attempts with the job's and the attempt's
    number in the message (the archive's test), so it ends dead."""
    raise ValueError(f"job {n} attempt {context.attempt}")


@job(queue="default", context=True)
def append_run(path, token, sleep_ms=0, context=None):
    """Appends ``"<token> <job id> <attempt> <time.time()>"`` to the file
    ``path`` (one O_APPEND write per run, so lines of concurrent runs never
    mix): a record of every run that no Redis failover can lose
    (tests/test_sentinel.py)."""
    if sleep_ms:
        time.sleep(sleep_ms / 1000)
    line = f"{token} {context.job_id} {context.attempt} {time.time():.3f}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@job(queue="default")
def db_connection_report(key):
    """Records in the list ``key`` whether this thread's database connection
    was open when the job started ("open" or "closed"), then uses it."""
    from django.db import connection

    _client().rpush(key, "open" if connection.connection is not None else "closed")
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
