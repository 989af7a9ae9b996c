"""What hotpath.py prints: a table per figure, then issue 11's "Done when" lines with PASS/FAIL.

Every number printed comes from :class:`Results`, filled by one run; a
figure that could not be measured is printed as ``skipped:`` with its reason.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from benchmarks.harness import percentile


@dataclass
class Results:
    """Everything one run of hotpath.py measured (lists hold one sample per round)."""

    n_jobs: int
    names: list[str]
    sections: list[str]
    #: (system, concurrency) -> drain() dicts of the plain drains / the counting drains
    drains: dict = field(default_factory=dict)
    counted: dict = field(default_factory=dict)
    #: system -> jobs/s samples of the 1-by-1 fills; bare EVALSHA calls/s samples
    enqueue: dict = field(default_factory=dict)
    evalsha: list = field(default_factory=list)
    #: system -> bulk jobs/s samples; system -> lateness ms (pooled)
    bulk: dict = field(default_factory=dict)
    late: dict = field(default_factory=dict)
    #: number of queues -> idle commands/s; (bytes per job, payload bytes)
    idle: dict = field(default_factory=dict)
    memory: tuple | None = None
    #: (section, system or "") -> why it has no figure
    skipped: dict = field(default_factory=dict)
    probe: tuple = (0.0, 0.0)  # commands, round trips per probe call

    def add(self, table: dict, key, value) -> None:
        table.setdefault(key, []).append(value)

    def skip(self, section: str, name: str, why: str) -> None:
        self.skipped.setdefault((section, name), why)


def med(values: list[float]) -> float:
    return statistics.median(values)


def rate_cell(values: list[float] | None) -> str:
    if not values:
        return ""
    if len(values) == 1:
        return f"{values[0]:,.0f}"
    return f"{med(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def drain_rates(res: Results, name: str, conc: int) -> list[float]:
    return [(d["count"] - 1) / d["span_s"] for d in res.drains.get((name, conc), [])]


def per_job(res: Results, name: str, conc: int) -> tuple[float, float, float] | None:
    """Median ``(commands, round trips, connections)`` per drained job, the
    probe's share subtracted, from the counting drains; None without one."""
    runs = res.counted.get((name, conc))
    if not runs:
        return None
    probe_cmds, probe_trips = res.probe
    return (med([d["commands"] / d["count"] - probe_cmds for d in runs]),
            med([d["trips"] / d["count"] - probe_trips for d in runs]),
            med([d["connections"] for d in runs]))


def print_skips(res: Results, prefix: str, setup: bool = True) -> None:
    """Every skip reason of the sections named ``prefix...`` (and, with
    ``setup``, the systems that could not be set up at all)."""
    for (sec, name), why in res.skipped.items():
        if sec.startswith(prefix) or (setup and sec == "setup"):
            first, *rest = why.splitlines()
            where = sec[len(prefix):].strip()
            print(f"  {name:9}skipped: {where + ': ' if where else ''}{first}")
            for line in rest:
                print(line)


def print_tables(res: Results) -> None:
    """The figures per system, one table per section that ran."""
    for section, table in (("drain", _drain), ("count", _count), ("drain", _enqueue),
                           ("bulk", _bulk), ("late", _late), ("idle", _idle),
                           ("memory", _memory)):
        if section in res.sections:
            table(res)


def _drain(res: Results) -> None:
    print("\n1. drain jobs/s, one worker process, no-op jobs (median (range) of the rounds)")
    print(f"  {'system':9}{'concurrency 4':>26}{'concurrency 1':>26}")
    for name in res.names:
        cells = [rate_cell(drain_rates(res, name, c)) or "-" for c in (4, 1)]
        if any(cell != "-" for cell in cells):
            print(f"  {name:9}{cells[0]:>26}{cells[1]:>26}")
    print_skips(res, "drain")


def _count(res: Results) -> None:
    p_cmds, p_trips = res.probe
    print("\n2. per drained job: server commands (INFO commandstats, script calls inside "
          "included) / round trips\n   (the counting drains, worker through the proxy; the "
          f"handler's probe, measured at {p_cmds:.2f} commands\n   and {p_trips:.2f} round "
          "trips a call, is subtracted; worker start-up is included)")
    print(f"  {'system':9}{'c4 cmds':>9}{'trips':>8}{'conns':>7}{'drain/s':>9}"
          f"{'c1 cmds':>11}{'trips':>8}{'conns':>7}{'drain/s':>9}")
    for name in res.names:
        cells = []
        for conc in (4, 1):
            figures = per_job(res, name, conc)
            if figures is None:
                cells.append(f"{'-':>9}{'':>8}{'':>7}{'':>9}")
                continue
            runs = res.counted[(name, conc)]
            rate = med([(d["count"] - 1) / d["span_s"] for d in runs])
            cells.append(f"{figures[0]:>9.1f}{figures[1]:>8.2f}{figures[2]:>7.0f}{rate:>9,.0f}")
        if any(cell.strip() != "-" for cell in cells):
            print(f"  {name:9}{cells[0]}  {cells[1]}")
    print("  (drain/s here is through the proxy, for scale only; section 1 is without it)")
    print_skips(res, "count")


def _enqueue(res: Results) -> None:
    print("\n3. enqueue 1-by-1 jobs/s, one client (all the fills of the drains)")
    for name in res.names:
        if res.enqueue.get(name):
            print(f"  {name:9}{rate_cell(res.enqueue[name]):>26}")
    if res.evalsha:
        print(f"  {'EVALSHA':9}{rate_cell(res.evalsha):>26}   bare EVALSHA of 'return 1' "
              "(3 keys, 5 args), EchoMQ's client")


def _bulk(res: Results) -> None:
    print("\n4. bulk enqueue jobs/s (each system's API for many jobs)")
    for name in res.names:
        if res.bulk.get(name):
            print(f"  {name:9}{rate_cell(res.bulk[name]):>26}")
    print_skips(res, "bulk")


def _late(res: Results) -> None:
    print("\n5. delayed-job lateness ms (start on the server clock - run-at; pooled samples)")
    print(f"  {'system':9}{'n':>6}{'p50':>8}{'p99':>8}{'max':>8}{'min':>8}{'early':>7}")
    for name in res.names:
        late = res.late.get(name)
        if late:
            print(f"  {name:9}{len(late):>6}{percentile(late, 50):>8}{percentile(late, 99):>8}"
                  f"{max(late):>8}{min(late):>8}{sum(1 for x in late if x < 0):>7}")
    print_skips(res, "late")


def _idle(res: Results) -> None:
    print("\n6. idle runechomq, server commands/s (nothing enqueued)")
    for queues, rate in res.idle.items():
        print(f"  {queues:>2} queue(s) {rate:8.1f}/s   {rate / queues:6.2f}/s per queue")
    print_skips(res, "idle", setup=False)


def _memory(res: Results) -> None:
    print("\n7. server memory per scheduled job")
    if res.memory:
        print(f"  {res.memory[0]:.0f} B per job (payload {res.memory[1]} B, used_memory delta)")
    print_skips(res, "memory", setup=False)


def verdicts(res: Results) -> list[tuple[str, str, str, bool | None]]:
    """``(figure, measured, target, passed)`` per "Done when" line; passed is
    None when the figure was not measured (``measured`` says why)."""
    rows = []
    peers = [n for n in res.names if n != "echomq"]
    for conc, target in ((4, 2.0), (1, 1.0)):
        ours = drain_rates(res, "echomq", conc)
        theirs = {n: med(drain_rates(res, n, conc)) for n in peers if drain_rates(res, n, conc)}
        label = f"drain jobs/s, --concurrency {conc}"
        if not ours or not theirs:
            rows.append((label, "skipped: " + ("no echomq figure" if not ours else "no peer figure"),
                         f">= {target:g}x fastest peer", None))
            continue
        best = max(theirs, key=theirs.get)
        ratio = med(ours) / theirs[best]
        rows.append((label, f"{med(ours):,.0f} vs {best} {theirs[best]:,.0f} = {ratio:.2f}x",
                     f">= {target:g}x fastest peer", ratio >= target))
    figures = per_job(res, "echomq", 4)
    rows.append(("round trips per drained job, c4",
                 f"{figures[1]:.2f}" if figures else "skipped: no counting drain",
                 "<= 0.5", figures[1] <= 0.5 if figures else None))
    ours, bare = res.enqueue.get("echomq"), res.evalsha
    rows.append(("enqueue 1-by-1 / bare EVALSHA",
                 f"{med(ours):,.0f} / {med(bare):,.0f} = {med(ours) / med(bare):.2f}x"
                 if ours and bare else "skipped: no figure", ">= 0.85x",
                 med(ours) / med(bare) >= 0.85 if ours and bare else None))
    ours, rq = res.bulk.get("echomq"), res.bulk.get("rq")
    if ours and rq:
        rows.append(("enqueue_many / RQ enqueue_many",
                     f"{med(ours):,.0f} / {med(rq):,.0f} = {med(ours) / med(rq):.2f}x",
                     ">= 2x", med(ours) / med(rq) >= 2))
    else:
        missing = "echomq" if not ours else "rq"
        why = res.skipped.get(("bulk", missing)) or res.skipped.get(("setup", missing)) \
            or f"no {missing} figure"
        rows.append(("enqueue_many / RQ enqueue_many", "skipped: " + why.splitlines()[0],
                     ">= 2x", None))
    ours, celery = res.late.get("echomq"), res.late.get("celery")
    rows.append(("lateness p99 vs Celery's p99 (ms)",
                 f"{percentile(ours, 99)} vs {percentile(celery, 99)}"
                 if ours and celery else "skipped: no figure", "<= Celery's",
                 percentile(ours, 99) <= percentile(celery, 99) if ours and celery else None))
    rows.append(("lateness max (ms)", f"{max(ours)}" if ours else "skipped: no figure",
                 "<= 10", max(ours) <= 10 if ours else None))
    early = sum(1 for x in ours if x < 0) if ours else None
    rows.append(("jobs started early", f"{early} of {len(ours)}" if ours else "skipped",
                 "0", early == 0 if ours else None))
    for queues in (1, 10):
        rate = res.idle.get(queues)
        rows.append((f"idle commands/s per queue, {queues} queue(s)",
                     f"{rate / queues:.2f}" if rate is not None else "skipped",
                     "<= 2", rate / queues <= 2 if rate is not None else None))
    rows.append(("memory per scheduled job, 100 B payload",
                 f"{res.memory[0]:.0f} B" if res.memory else "skipped", "<= 400 B",
                 res.memory[0] <= 400 if res.memory else None))
    return rows


#: The section each "Done when" line's figure comes from, in verdicts()'s order.
VERDICT_SECTIONS = ("drain", "drain", "count", "drain", "bulk", "late", "late", "late", "idle",
                    "idle", "memory")


def print_verdicts(res: Results) -> None:
    print("\nIssue 11, \"Done when\" (this run)")
    for section, (label, measured, target, passed) in zip(VERDICT_SECTIONS, verdicts(res)):
        if section not in res.sections:
            measured = f"not run (--sections has no {section})"
        mark = "n/a" if passed is None else ("PASS" if passed else "FAIL")
        print(f"  {label:40}{measured:>36}  target {target:21}{mark}")
