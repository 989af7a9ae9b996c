"""The five job systems as the benchmarks drive them: EchoMQ, RQ, Huey, Celery and Dramatiq.

Each factory imports its system (a peer that is not installed raises, and
:func:`load_systems` reports it as skipped) and returns a :class:`System`:
how to start its worker (default settings, the drain worker, and ONE process
at a given concurrency), how to enqueue now, at a run-at and in bulk, and how
many jobs wait. The handlers are in ``jobs.py`` and ``peer_*.py``; they all
record through ``probe.py``.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Callable

from benchmarks.harness import BIN, PAD, aware

@dataclass
class System:
    """One job system as the benchmarks drive it.

    ``stamp_at(run_at_ms)`` schedules the latency handler through the system's
    own delayed API; ``stamp_now()`` enqueues it for now (warm-up);
    ``noop(total, seq)`` enqueues one throughput job; ``bulk(total, seqs)``
    enqueues the throughput jobs ``seqs`` through the system's API for many
    jobs (``bulk_note`` says which); ``queued()`` counts the jobs waiting in
    queue ``bench``. ``latency_argv`` and ``drain_argv`` start its worker;
    ``burst`` says the drain worker exits by itself once the queue is empty.
    ``one_process(n)`` is the argv of ONE long-running worker process (as
    deployed; stopped once its jobs are counted) running ``n`` handlers at a
    time (hotpath.py), or a str saying why the system has none;
    ``one_process_note(n)`` describes it.
    """

    name: str
    defaults: str
    latency_argv: list[str]
    drain_argv: list[str]
    drain_defaults: str
    burst: bool
    stamp_at: Callable[[int], object]
    stamp_now: Callable[[], object]
    noop: Callable[[int, int], object]
    one_process: Callable[[int], list[str] | str]
    one_process_note: Callable[[int], str]
    bulk: Callable[[int, range], object]
    bulk_note: str
    queued: Callable[[], int]
    stop_signal: int = signal.SIGTERM
    extra: dict = field(default_factory=dict)


def _echomq() -> System:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.bench_settings")
    import django

    django.setup()
    from echomq_django import get_connection
    from echomq_django.protocol.keyspace import Keyspace

    from benchmarks import jobs

    manage = [sys.executable, "-m", "django", "runechomq", "bench", "-v", "0"]
    return System(
        name="echomq",
        defaults="runechomq bench (defaults: 4 threads, 1 process, metronome in-process)",
        latency_argv=manage,
        drain_argv=manage + ["--concurrency", "4", "--burst"],
        drain_defaults="runechomq bench --concurrency 4 --burst (threads)",
        burst=True,
        stamp_at=lambda ms: jobs.stamp.enqueue_at(ms, ms),
        stamp_now=lambda: jobs.stamp.enqueue(0),
        noop=lambda total, seq: jobs.noop.enqueue(total, seq, PAD),
        # Not --burst: a burst run beats the metronome once instead of running
        # its thread, and so leaves out what a deployed worker spends per job.
        one_process=lambda n: manage + ["--concurrency", str(n)],
        one_process_note=lambda n: f"runechomq bench --concurrency {n} ({n} handler "
                                   "thread(s), the metronome's thread in the same process)",
        bulk=lambda total, seqs: _echomq_bulk(jobs.noop, total, seqs),
        bulk_note="JobFunction.enqueue_many(argument tuples), one call per batch",
        queued=lambda: get_connection().zcard(Keyspace("bench").pending),
    )


def _echomq_bulk(fn, total: int, seqs: range) -> object:
    """``fn.enqueue_many`` over the batch, or NotImplementedError while it does
    not exist. Issue 11 adds it; its final shape is not settled, so the caller
    also checks that every job of the batch is queued before using a figure."""
    enqueue_many = getattr(fn, "enqueue_many", None)
    if enqueue_many is None:
        raise NotImplementedError("enqueue_many not available")
    return enqueue_many([(total, seq, PAD) for seq in seqs])


def _rq() -> System:
    import redis
    from rq import Queue

    from benchmarks import peer_rq

    queue = Queue("bench", connection=redis.Redis.from_url(os.environ["BENCH_REDIS_URL"]))
    rq = [str(BIN / "rq"), "worker", "bench", "-q"]  # --url comes from RQ_REDIS_URL
    why = ("RQ has no in-process concurrency (one job at a time, each in a forked work "
           "horse); `rq worker-pool -n N` is N worker processes, and each system gets ONE")
    return System(
        name="rq",
        defaults="rq worker --with-scheduler (defaults: forking Worker, scheduler interval 1 s)",
        latency_argv=rq + ["--with-scheduler"],
        drain_argv=rq + ["--burst"],
        drain_defaults="rq worker --burst (default Worker: one forked work horse per job)",
        burst=True,
        stamp_at=lambda ms: queue.enqueue_at(aware(ms), peer_rq.stamp, ms),
        stamp_now=lambda: queue.enqueue(peer_rq.stamp, 0),
        noop=lambda total, seq: queue.enqueue(peer_rq.noop, total, seq, PAD),
        one_process=lambda n: rq if n == 1 else why,
        one_process_note=lambda n: "rq worker (default Worker: one job at a time, a forked "
                                   "work horse per job)" if n == 1 else why,
        bulk=lambda total, seqs: queue.enqueue_many(
            [Queue.prepare_data(peer_rq.noop, (total, seq, PAD)) for seq in seqs]),
        bulk_note="Queue.enqueue_many(Queue.prepare_data(...)), one pipeline per batch",
        queued=lambda: queue.count,
    )


def _huey() -> System:
    from benchmarks import peer_huey

    consumer = [str(BIN / "huey_consumer"), "benchmarks.peer_huey.huey", "-q"]
    return System(
        name="huey",
        defaults="huey_consumer (defaults: 1 worker thread, scheduler interval 1 s, blocking BRPOP)",
        latency_argv=consumer,
        drain_argv=consumer + ["-w", "4", "-k", "thread"],
        drain_defaults="huey_consumer -w 4 -k thread (stopped once all jobs are counted)",
        burst=False,
        stamp_at=lambda ms: peer_huey.stamp.schedule(args=(ms,), eta=aware(ms)),
        stamp_now=lambda: peer_huey.stamp(0),
        noop=lambda total, seq: peer_huey.noop(total, seq, PAD),
        one_process=lambda n: consumer + ["-w", str(n), "-k", "thread"],
        one_process_note=lambda n: f"huey_consumer -w {n} -k thread ({n} worker thread(s) "
                                   "and the consumer's scheduler thread)",
        bulk=lambda total, seqs: peer_huey.noop.map([(total, seq, PAD) for seq in seqs]),
        bulk_note="Task.map(argument tuples): Huey's API for many, one LPUSH per job",
        queued=lambda: peer_huey.huey.pending_count(),
    )


def _celery() -> System:
    import celery

    from benchmarks import peer_celery, probe

    celery_argv = [sys.executable, "-m", "celery", "-A", "benchmarks.peer_celery", "worker",
                   "-Q", "bench", "-l", "WARNING"]
    return System(
        name="celery",
        defaults="celery worker (defaults: prefork pool, concurrency = 2 cores, prefetch x4; "
                 "ETA held in worker memory)",
        latency_argv=celery_argv,
        drain_argv=celery_argv + ["--concurrency", "4"],
        drain_defaults="celery worker --concurrency 4 (prefork processes; stopped once all "
                       "jobs are counted)",
        burst=False,
        stamp_at=lambda ms: peer_celery.stamp.apply_async((ms,), eta=aware(ms), queue="bench"),
        stamp_now=lambda: peer_celery.stamp.apply_async((0,), queue="bench"),
        noop=lambda total, seq: peer_celery.noop.apply_async((total, seq, PAD), queue="bench"),
        # One process: the thread pool at n > 1 (prefork would add n processes),
        # the solo pool at 1 (tasks run in the worker's own thread, no pool).
        one_process=lambda n: celery_argv + (["-P", "threads", "-c", str(n)] if n > 1
                                             else ["-P", "solo"]),
        one_process_note=lambda n: (f"celery worker -P threads -c {n} (one process, {n} pool "
                                    "threads; prefork would add processes)") if n > 1 else (
            "celery worker -P solo (one process, one task at a time in the worker's own "
            "thread; -P threads -c 1 and prefork -c 1 add a pool)"),
        bulk=lambda total, seqs: celery.group(
            peer_celery.noop.s(total, seq, PAD) for seq in seqs).apply_async(queue="bench"),
        bulk_note="group(signatures).apply_async(): Celery's API for many, one publish per job",
        queued=lambda: probe.own_client().llen("bench"),  # kombu's list for queue bench
    )


def _dramatiq() -> System:
    import dramatiq

    from benchmarks import peer_dramatiq
    from benchmarks.probe import server_ms

    worker = [str(BIN / "dramatiq"), "benchmarks.peer_dramatiq", "-Q", "bench"]
    client = peer_dramatiq.broker.client
    return System(
        name="dramatiq",
        defaults="dramatiq (defaults: 1 process per core, 8 threads each; a delayed message "
                 "is held in worker memory until its eta)",
        latency_argv=worker,
        drain_argv=worker + ["-p", "1", "-t", "4"],
        drain_defaults="dramatiq -p 1 -t 4 (stopped once all jobs are counted)",
        burst=False,
        # Dramatiq takes a delay (ms from now), not a run-at: the delay is
        # computed on the server clock, which every system is measured on.
        stamp_at=lambda ms: peer_dramatiq.stamp.send_with_options(
            args=(ms,), delay=max(0, ms - server_ms(client))),
        stamp_now=lambda: peer_dramatiq.stamp.send(0),
        noop=lambda total, seq: peer_dramatiq.noop.send(total, seq, PAD),
        one_process=lambda n: worker + ["-p", "1", "-t", str(n)],
        one_process_note=lambda n: f"dramatiq -p 1 -t {n} (one worker process with {n} "
                                   "thread(s), under Dramatiq's supervising parent)",
        bulk=lambda total, seqs: dramatiq.group(
            peer_dramatiq.noop.message(total, seq, PAD) for seq in seqs).run(),
        bulk_note="group(messages).run(): Dramatiq's API for many, one enqueue script per job",
        queued=lambda: client.llen("dramatiq:bench"),
    )


FACTORIES = {"echomq": _echomq, "rq": _rq, "huey": _huey, "celery": _celery,
             "dramatiq": _dramatiq}


def load_systems(names: list[str]) -> tuple[list[System], dict[str, str]]:
    """The systems that could be set up, and a reason for each one that could not."""
    systems, skipped = [], {}
    for name in names:
        try:
            systems.append(FACTORIES[name]())
        except Exception as err:  # an uninstalled or broken peer is reported, not faked
            skipped[name] = f"{type(err).__name__}: {err}"
    return systems, skipped
