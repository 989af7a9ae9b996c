"""The chaos run: jobs through two runechomq processes while one is SIGKILLed
every second and every client connection is killed every 100 ms.

    python benchmarks/chaos.py [--jobs 10000] [--concurrency 4] [--lease-ms 2000]
                               [--kill-every-s 1.0] [--client-kill-every-ms 100]

On its own valkey-server (harness.Server): enqueues ``--jobs`` jobs of
``benchmarks.jobs.chaos_run`` (a few ms of sleep, then it records the run),
starts two ``runechomq`` processes (``--concurrency`` threads, ``--lease-ms``
lease), and until every job is final: SIGKILLs one of them every
``--kill-every-s`` and starts it again (the same one each time, or with
``--victims alternate`` each in turn), while another thread
runs ``CLIENT KILL TYPE normal`` every ``--client-kill-every-ms``. Then it
prints what it counted: jobs lost (never ran), dead, run more than once, the
kills, and the promise it checks (0 lost, 0 dead, duplicate runs at most
kills x concurrency: only a SIGKILL can cut a finished handler off before its
outcome is recorded). Exit code 0 when the promise held, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import BIN, Child, Server  # noqa: E402


def _killer(url: str, stop: threading.Event, every_s: float, counter: list[int]) -> None:
    import redis

    client = redis.Redis.from_url(url)
    while not stop.wait(every_s):
        try:
            client.client_kill_filter(_type="normal", skipme=True)
            counter[0] += 1
        except redis.RedisError:
            pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--lease-ms", type=int, default=2_000)
    parser.add_argument("--kill-every-s", type=float, default=1.0)
    parser.add_argument("--client-kill-every-ms", type=int, default=100)
    parser.add_argument("--sleep-ms", type=int, default=2, help="each job's handler sleeps this")
    parser.add_argument("--timeout-s", type=float, default=900)
    parser.add_argument("--victims", choices=("one", "alternate"), default="one",
                        help="SIGKILL the same process every time (the spec), or each in turn")
    parser.add_argument("--max-stalls", type=int, default=None,
                        help="ECHOMQ['MAX_STALLS'] for the workers (default: the setting's)")
    args = parser.parse_args()
    if args.max_stalls is not None:
        os.environ["BENCH_MAX_STALLS"] = str(args.max_stalls)

    import redis

    server = Server()
    logs = tempfile.mkdtemp(prefix="echomq-chaos-")
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        from benchmarks.bench_settings import ECHOMQ  # noqa: F401  (BENCH_REDIS_URL is set)
        import django

        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.bench_settings"
        django.setup()
        from echomq_django import BrandedId, Jobs
        from echomq_django.protocol.clock import mint_now_ms
        from echomq_django.protocol.keyspace import Keyspace

        jobs = Jobs(client)
        ids = [BrandedId.generate("JOB", mint_now_ms(client)) for _ in range(args.jobs)]
        payload = json.dumps({"job": "benchmarks.jobs.chaos_run", "args": [args.sleep_ms],
                              "kwargs": {}})
        pipe_size = 500
        for i in range(0, len(ids), pipe_size):
            for job_id in ids[i:i + pipe_size]:
                jobs.enqueue("chaos", job_id, payload)

        def start(n: int) -> Child:
            return Child([str(BIN / "python"), "-m", "django", "runechomq", "chaos",
                          "--concurrency", str(args.concurrency), "--lease-ms",
                          str(args.lease_ms)], logs, f"worker-{n}-{time.monotonic_ns()}")

        workers = [start(0), start(1)]
        client_kills = [0]
        stop = threading.Event()
        killer = threading.Thread(target=_killer, daemon=True,
                                  args=(server.url, stop, args.client_kill_every_ms / 1000,
                                        client_kills))
        killer.start()
        ks = Keyspace("chaos")
        sigkills = 0
        started = time.monotonic()
        victim = 0

        def final() -> int:
            try:
                pipe = client.pipeline(transaction=False)
                pipe.zcard(ks.pending)
                pipe.zcard(ks.schedule)
                pipe.zcard(ks.active)
                pending, scheduled, active = pipe.execute()
                return pending + scheduled + active
            except redis.RedisError:
                return -1

        while final() != 0:
            if time.monotonic() - started > args.timeout_s:
                print("timed out; not every job is final", file=sys.stderr)
                break
            time.sleep(args.kill_every_s * random.uniform(0.9, 1.1))
            if final() == 0:
                break
            workers[victim].stop(sig=9, grace_s=1)  # SIGKILL to its process group
            sigkills += 1
            workers[victim] = start(victim)
            if args.victims == "alternate":
                victim = 1 - victim
        elapsed = time.monotonic() - started
        stop.set()
        killer.join()
        for worker in workers:
            worker.stop()

        ran = client.smembers("chaos:ran")
        pipe = client.pipeline(transaction=False)
        for job_id in ids:
            pipe.scard(f"chaos:runs:{job_id}")
        runs = dict(zip(ids, pipe.execute()))
        states = {}
        pipe = client.pipeline(transaction=False)
        for job_id in ids:
            pipe.hget(ks.job(job_id), "state")
        for state in pipe.execute():
            states[state] = states.get(state, 0) + 1
        lost = sum(1 for job_id in ids if job_id not in ran)
        dead = client.zcard(ks.dead)
        extra = sum(n - 1 for n in runs.values() if n > 1)
        twice = sum(1 for n in runs.values() if n > 1)
        bound = sigkills * args.concurrency
        print(f"chaos run on valkey {server.version}: {args.jobs} jobs of {args.sleep_ms} ms, "
              f"2 runechomq x {args.concurrency} threads, lease {args.lease_ms} ms, victims "
              f"{args.victims}, {elapsed:.1f} s")
        print(f"  SIGKILLs of a worker: {sigkills}; CLIENT KILL TYPE normal: {client_kills[0]}")
        print(f"  final states: {states}")
        print(f"  lost (never ran): {lost}")
        print(f"  dead: {dead}")
        print(f"  ran more than once: {twice} jobs, {extra} extra runs "
              f"(bound: kills x concurrency = {bound})")
        for job_id in [j for j in ids if j not in ran][:10]:
            row = client.hgetall(ks.job(job_id))
            print(f"    never ran: {job_id} state={row.get('state')} "
                  f"attempts={row.get('attempts')} stalls={row.get('stalls')} "
                  f"reason={row.get('reason')} error={row.get('last_error', '')[-200:]!r}")
        for job_id in client.zrange(ks.dead, 0, 9):
            row = client.hgetall(ks.job(job_id))
            print(f"    dead: {job_id} attempts={row.get('attempts')} "
                  f"stalls={row.get('stalls')} reason={row.get('reason')} "
                  f"runs={runs.get(job_id)} error={row.get('last_error', '')[-300:]!r}")
        held = lost == 0 and dead == 0 and extra <= bound
        print("  promise " + ("held" if held else "BROKEN") + f"; worker logs in {logs}")
        return 0 if held else 1
    finally:
        client.close()
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
