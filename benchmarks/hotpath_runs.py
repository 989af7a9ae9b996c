"""The measurements of hotpath.py, one function each; every figure comes from the run itself.

Each function works on the benchmark's own server (``Server``), flushes the
database first when it needs an empty one, and stops every worker it starts
(its ``finally``), so an error or Ctrl-C leaves nothing running. Each returns
its figures, or raises :class:`Skip` with the reason a figure could not be
had (never a made-up one).
"""

from __future__ import annotations

import time

from benchmarks.harness import PAD, Child, Server, wait_until
from benchmarks.probe import count_done
from benchmarks.systems import System
from benchmarks.tripcount import CountingProxy, Reader

DRAIN_TIMEOUT_S = 300
READY_TIMEOUT_S = 60
#: After runechomq logs its start line, how long before the idle window opens
#: (its threads start and load their scripts; that is start-up, not idling).
IDLE_SETTLE_S = 1.0


class Skip(Exception):
    """A figure that could not be measured; the message says why."""


def fill(system: System, n_jobs: int, total: int) -> float:
    """Enqueue ``n_jobs`` no-op jobs one API call each; return the seconds it took.
    ``total`` is the count after which the handlers stamp the last start."""
    started = time.perf_counter()
    for seq in range(n_jobs):
        system.noop(total, seq)
    return time.perf_counter() - started


def bare_evalsha(n_calls: int) -> float:
    """Seconds for ``n_calls`` EVALSHA calls of a script that only returns 1,
    from EchoMQ's own redis-py client (``get_connection()``), with 3 keys and
    5 arguments shaped as an EchoMQ enqueue's (job row, pending, wake; id,
    payload, wake cap, group, priority): the floor under one enqueue."""
    from echomq_django import get_connection
    from echomq_django.api.payload import encode
    from echomq_django.protocol.ids import BrandedId
    from echomq_django.protocol.keyspace import WAKE_CAP, Keyspace

    client = get_connection()
    sha = client.script_load("return 1")
    ks = Keyspace("bench")
    job_id = BrandedId.generate("JOB", int(time.time() * 1000))
    text = encode("benchmarks.jobs.noop", (n_calls, n_calls, PAD), {}, 1 << 20)
    keys_args = (ks.job(job_id), ks.pending, ks.wake, job_id, text, WAKE_CAP, "", 0)
    started = time.perf_counter()
    for _ in range(n_calls):
        client.evalsha(sha, 3, *keys_args)
    return time.perf_counter() - started


def probe_cost(server: Server, proxy: CountingProxy, n_calls: int) -> tuple[float, float]:
    """``(commands, round trips)`` per call of the handlers' probe
    (``probe.count_done``), measured through the proxy: what every drained
    job adds on top of the system's own work, subtracted from the drains."""
    import redis

    client = redis.Redis.from_url(proxy.url)
    try:
        client.ping()
        reader = Reader(server.client)
        reader.snapshot()
        proxy.reset()
        for _ in range(n_calls):
            count_done(client, "calibration", n_calls)
        trips, _ = proxy.counts()
        return reader.delta() / n_calls, trips / n_calls
    finally:
        client.close()
        server.client.delete(*(f"bench:done:calibration{s}" for s in ("", ":first", ":last")))


def drain(system: System, server: Server, concurrency: int, n_jobs: int, cap: int | None,
          log_dir: str, proxy: CountingProxy | None = None) -> dict:
    """Fill the queue with ``n_jobs`` (one call each), then drain it with ONE
    worker process running ``concurrency`` handlers; the drain counts the first
    ``min(n_jobs, cap)`` jobs. With ``proxy`` the worker reaches the server
    through it and the round trips are counted.

    Returns ``enqueue_s`` (the fill), ``count``, ``span_s`` (server clock,
    first job's start to the last counted's), ``commands`` (the server's
    commands from the worker's start to the last job, reader excluded),
    ``trips`` and ``connections`` (with ``proxy``; else None).
    """
    argv = system.one_process(concurrency)
    if isinstance(argv, str):
        raise Skip(argv)
    conn = server.client
    conn.execute_command("FLUSHDB", "SYNC")
    count = min(n_jobs, cap or n_jobs)
    enqueue_s = fill(system, n_jobs, count)
    done = f"bench:done:{system.name}"
    reader = Reader(conn)
    reader.snapshot()
    env = None
    if proxy is not None:
        proxy.reset()
        env = {"BENCH_REDIS_URL": proxy.url}
    child = Child(argv, log_dir, f"c{concurrency}-{system.name}", env=env)
    try:
        finished = wait_until(lambda: int(reader.get(done) or 0) >= count or child.exited(),
                              DRAIN_TIMEOUT_S, 0.01)
        # Read the counters first: the worker goes on idling while the rest
        # is read.
        trips, connections = proxy.counts() if proxy is not None else (None, None)
        commands = reader.delta()
        ran = int(conn.get(done) or 0)
        if not finished or ran < count:
            raise Skip(f"{ran} of {count} jobs ran within {DRAIN_TIMEOUT_S} s (worker exited: "
                       f"{child.exited()})\n{child.tail()}")
        first, last = int(conn.get(f"{done}:first")), int(conn.get(f"{done}:last"))
        return {"enqueue_s": enqueue_s, "count": count, "span_s": max(last - first, 1) / 1000,
                "commands": commands, "trips": trips, "connections": connections}
    finally:
        child.stop(system.stop_signal)


def bulk(system: System, server: Server, n_jobs: int, batch: int) -> float:
    """Seconds to enqueue ``n_jobs`` no-op jobs through the system's API for
    many (``system.bulk``), ``batch`` jobs per call. Raises Skip when the API
    is missing or fails, or when not every job is queued afterwards."""
    conn = server.client
    conn.execute_command("FLUSHDB", "SYNC")
    started = time.perf_counter()
    try:
        for low in range(0, n_jobs, batch):
            system.bulk(n_jobs, range(low, min(low + batch, n_jobs)))
    except NotImplementedError as err:
        raise Skip(str(err)) from None
    except Exception as err:  # a bulk API whose shape changed is reported, not measured
        raise Skip(f"{system.bulk_note} failed: {type(err).__name__}: {err}") from None
    seconds = time.perf_counter() - started
    queued = system.queued()
    if queued != n_jobs:
        raise Skip(f"{queued} of {n_jobs} jobs queued after the bulk calls")
    return seconds


def idle_commands_per_s(server: Server, queues: list[str], window_s: float,
                        log_dir: str) -> float:
    """Commands per second the server runs for an idle ``runechomq`` serving
    ``queues`` (nothing enqueued), over ``window_s`` seconds that open
    IDLE_SETTLE_S after the worker logs its start line."""
    import sys

    conn = server.client
    conn.execute_command("FLUSHDB", "SYNC")
    argv = [sys.executable, "-m", "django", "runechomq", *queues, "-v", "1"]
    child = Child(argv, log_dir, f"idle-{len(queues)}")
    try:
        if not wait_until(lambda: "runechomq: queues" in child.log_path.read_text(errors="replace")
                          or child.exited(), READY_TIMEOUT_S, 0.05) or child.exited():
            raise Skip(f"runechomq did not report ready within {READY_TIMEOUT_S} s\n"
                       f"{child.tail()}")
        time.sleep(IDLE_SETTLE_S)
        reader = Reader(conn)
        reader.snapshot()
        started = time.monotonic()
        time.sleep(window_s)
        commands = reader.delta()
        elapsed = time.monotonic() - started
        if child.exited():
            raise Skip(f"runechomq exited during the idle window\n{child.tail()}")
        return commands / elapsed
    finally:
        child.stop()


def scheduled_bytes_per_job(server: Server, n_jobs: int) -> tuple[float, int]:
    """``(used_memory bytes per job, payload bytes)`` for ``n_jobs`` jobs
    scheduled an hour ahead through ``JobFunction.enqueue_in``, each with a
    100-byte payload (the stored JSON envelope, measured). Another module
    (memory.py) may grow the same measure; this one is to be merged with it."""
    from echomq_django.api.payload import encode

    from benchmarks import jobs

    path = jobs.noop.path
    base = len(encode(path, (0, 0, ""), {}, 1 << 20).encode())
    pad = "x" * max(0, 100 - base)
    size = len(encode(path, (0, 0, pad), {}, 1 << 20).encode())
    conn = server.client
    conn.execute_command("FLUSHDB", "SYNC")
    before = conn.info("memory")["used_memory"]
    for _ in range(n_jobs):
        jobs.noop.enqueue_in(3_600_000, 0, 0, pad)
    after = conn.info("memory")["used_memory"]
    conn.execute_command("FLUSHDB", "SYNC")
    return (after - before) / n_jobs, size
