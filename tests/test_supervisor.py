"""runechomq --processes: how the supervising parent replaces its children."""

from __future__ import annotations

import re
import threading
import time

import pytest

from echomq_django.protocol.keyspace import Keyspace
from tests.procs import runechomq, stop, wait_for

EXIT = re.compile(r"consumer process \d+ exited with 70; starting a new one"
                  r"(?: in ([0-9.]+) s)? \(slot (\d+)")


class Lines:
    """A process's output lines, each with the monotonic time it arrived."""

    def __init__(self, proc) -> None:
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc) -> None:
        for line in proc.stdout:
            self.lines.append((time.monotonic(), line))

    def matching(self, pattern):
        return [(at, m) for at, line in list(self.lines) if (m := pattern.search(line))]


@pytest.mark.slow
def test_a_child_that_keeps_dying_as_it_starts_is_restarted_at_a_growing_interval(
        redis_client, queue, worker_procs):
    # A corrupt wake list: each consumer's first idle wait fails with
    # WRONGTYPE, so every child exits with 70 moments after it starts.
    redis_client.set(Keyspace(queue).wake, "not a list")
    proc = runechomq(queue, "--processes", "2", "--concurrency", "1", "--without-metronome")
    worker_procs.append(proc)
    lines = Lines(proc)
    # Ready once a slot has waited out 0.5 s and 1 s and is told to wait 2 s.
    wait_for(lambda: any(m.group(1) == "2.0" for _, m in lines.matching(EXIT)), timeout=30)
    exits = lines.matching(EXIT)
    slot = next(m.group(2) for _, m in exits if m.group(1) == "2.0")
    mine = [(at, m.group(1)) for at, m in exits if m.group(2) == slot]
    # The slot's first exit is replaced at once, the next ones after 0.5 s,
    # 1 s, 2 s. Without the backoff, a dozen children a second would die.
    assert [delay for _, delay in mine] == [None, "0.5", "1.0", "2.0"], exits
    assert len(exits) <= 10, [m.group(0) for _, m in exits]
    # Measured: each gap between the slot's exits is at least the delay
    # announced before it (0.5 s, then 1 s).
    gaps = [later - earlier for (earlier, _), (later, _) in zip(mine, mine[1:])]
    assert gaps[1] >= 0.5 - 0.05 and gaps[2] >= 1.0 - 0.05, gaps
    code, _ = stop(proc)
    assert code == 0


@pytest.mark.parametrize("processes, error", [(0, ValueError), (1001, ValueError),
                                              ("2", TypeError)])
def test_processes_outside_its_range_is_refused_naming_it(processes, error):
    from echomq_django.runtime.supervisor import Options, Supervisor

    with pytest.raises(error, match="processes must be"):
        Supervisor(Options(queues=["default"], processes=processes))


@pytest.mark.slow
def test_a_sigterm_as_the_children_start_stops_every_one_of_them(queue, worker_procs):
    """SIGTERM the parent as soon as it says it runs: a child forked just
    then took the signal before its own stop Event existed, lost it, and was
    SIGKILLed after the grace (10 of 15 tries in a breaker's runs)."""
    import os
    import signal

    started = re.compile(r"runechomq: queues ")
    for _ in range(5):
        proc = runechomq(queue, "--processes", "2", "--concurrency", "1",
                         "--shutdown-grace-ms", "500")
        worker_procs.append(proc)
        lines = Lines(proc)
        wait_for(lambda: lines.matching(started), timeout=30, step=0.001)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(30)
        lines._thread.join(5)
        out = "".join(line for _, line in lines.lines)
        assert proc.returncode == 0, out[-3000:]
        assert "did not stop in time" not in out, out[-3000:]
