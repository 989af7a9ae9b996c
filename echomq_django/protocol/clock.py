"""The server clock, read from Python: every "now" EchoMQ uses is the server's.

Scripts read ``TIME`` themselves (``lua/includes/now.lua``); Python reads it
here, when it must compute something the server cannot (a cron occurrence, a
page's "in 3 min"). Nothing in EchoMQ compares a host clock with a stored time.

Minting an id needs the server's now too (its time part orders the queue), but
a round trip per id is too dear, so :func:`mint_now_ms` estimates it: this
host's wall clock plus an offset measured against ``TIME`` and kept per client
and process by a :class:`ServerClock` (docs/protocol.md, "Ordering"). The
offset is measured with a few round trips (the one with the shortest round
trip wins; the server's reading is set against the local midpoint), aged on
the monotonic clock and measured again, lazily at the next mint, after
:data:`REFRESH_S` seconds or as soon as the wall clock has stepped against the
monotonic one by :data:`STEP_NS` or more. Error bound: half the winning
round trip, plus whatever the host's wall clock drifts against the server's
within :data:`REFRESH_S` (NTP slews at most 500 ppm: 30 ms), plus a step
smaller than :data:`STEP_NS`. A forked child measures afresh
(``os.register_at_fork``).

On a cluster every node has its own clock, and a queue's scripts read the
clock of the node owning the queue's slot: so does Python. The functions
here take the ``queue`` whose clock they read; on a cluster ``TIME`` runs
there (in a one-line script keyed by the queue, :func:`time_command`), and a
:class:`ServerClock` is kept per node. Without a queue a cluster reads the
node holding the worker registry (``emq:{~}``). On one server (or a
Sentinel's primary) the queue changes nothing (docs/protocol.md, "Cluster").
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any

__all__ = ["REFRESH_S", "SAMPLES", "STEP_NS", "ServerClock", "known_now_ms", "mint_now_ms",
           "server_now_ms", "time_command", "time_reply_ms"]

#: Seconds (monotonic) an offset is used before it is measured again.
REFRESH_S = 60.0
#: Round trips per measurement; the shortest one's reading is kept.
SAMPLES = 3
#: A change of the wall clock against the monotonic one this large (ns)
#: since the measurement is a step: the offset is measured again at once.
STEP_NS = 20_000_000


def time_reply_ms(reply: Any) -> int:
    """A ``TIME`` reply (``(seconds, microseconds)``, bytes, str or int) as Unix ms."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


#: TIME inside a script, so that a cluster runs it on the node owning the key.
TIME_LUA = "#!lua flags=no-writes,allow-stale\nreturn redis.call('TIME')"


def _slot_key(queue: str | None) -> str:
    from .keyspace import GLOBAL_BASE, Keyspace

    return GLOBAL_BASE if queue is None else Keyspace(queue).base


def time_command(target, queue: str | None = None) -> Any:
    """Send ``TIME`` on ``target`` (a client, or queue it on a pipeline): on a
    cluster (or a cluster pipeline) as a one-line script keyed by ``queue``'s
    slot (the registry's when None), which runs on the node owning it; else
    the plain command. The reply reads with :func:`time_reply_ms`."""
    from ..connection.topology import is_cluster, keyed_command

    if is_cluster(target):
        key = _slot_key(queue)
        return keyed_command(target, key, "EVAL", TIME_LUA, 1, key)
    return target.time()


def server_now_ms(conn, queue: str | None = None) -> int:
    """The server's ``TIME`` in Unix ms (one command), on the node owning
    ``queue`` when ``conn`` is a cluster."""
    return time_reply_ms(time_command(conn, queue))


class ServerClock:
    """The server's now, estimated as ``time.time_ns()`` + a kept offset.

    ``refresh_s``: seconds (monotonic) before the offset is measured again;
    ``samples``: round trips per measurement (the shortest wins). Thread-safe;
    never starts a thread: a stale offset is measured again by the call that
    finds it stale (the module doc has the rules and the error bound).
    """

    def __init__(self, refresh_s: float = REFRESH_S, samples: int = SAMPLES,
                 queue: str | None = None) -> None:
        if samples < 1:
            raise ValueError(f"samples must be >= 1, got {samples}")
        self.refresh_ns = int(refresh_s * 1e9)
        self.samples = samples
        self.queue = queue  # whose node's clock, on a cluster
        self._lock = threading.Lock()
        # (offset: server ns - local wall ns, time.monotonic_ns() at the
        # measurement, time.time_ns() - time.monotonic_ns() then), or None:
        # one tuple, replaced whole, so a reader needs no lock.
        self._kept: tuple[int, int, int] | None = None
        self.round_trip_ns: int | None = None  # the winning round trip

    def now_ms(self, conn) -> int:
        """The server's now in Unix ms, measuring the offset first on ``conn``
        (``samples`` ``TIME`` commands) when there is none yet or it is stale.

        Raises whatever ``TIME`` raises (``redis.RedisError``).
        """
        wall, mono = time.time_ns(), time.monotonic_ns()
        kept = self._kept
        if (kept is not None and mono - kept[1] < self.refresh_ns
                and abs(wall - mono - kept[2]) < STEP_NS):
            return (wall + kept[0]) // 1_000_000
        offset = self.measure(conn)
        return (time.time_ns() + offset) // 1_000_000

    def known_ms(self) -> int | None:
        """The server's now in Unix ms from the last measurement, however old,
        without a round trip; None when there is none (or the wall clock
        stepped since)."""
        kept = self._kept
        wall, mono = time.time_ns(), time.monotonic_ns()
        if kept is None or abs(wall - mono - kept[2]) >= STEP_NS:
            return None
        return (wall + kept[0]) // 1_000_000

    def measure(self, conn) -> int:
        """Measure the offset now (``samples`` round trips on ``conn``), keep
        it and return it in ns (server minus local wall clock)."""
        best = None
        for _ in range(self.samples):
            mono0, wall0 = time.monotonic_ns(), time.time_ns()
            seconds, micros = time_command(conn, self.queue)
            mono1 = time.monotonic_ns()
            # The round trip is timed on the monotonic clock (the wall clock
            # may step); the server read TIME somewhere inside it, at the
            # midpoint give or take half of it.
            trip = mono1 - mono0
            if best is None or trip < best[0]:
                server_ns = (int(seconds) * 1_000_000 + int(micros)) * 1000
                best = (trip, server_ns - (wall0 + trip // 2), wall0 - mono0)
        trip, offset, anchor = best
        with self._lock:
            self._kept = (offset, time.monotonic_ns(), anchor)
            self.round_trip_ns = trip
        return offset


# Per client object, per process: {node name: ServerClock} ("" for a client
# that is not a cluster). A client's servers are fixed, and the weak keys let a
# dropped client take its clocks with it.
_clocks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_clocks_lock = threading.Lock()


def _node_name(conn, queue: str | None) -> str:
    from ..connection.topology import node_for

    node = node_for(conn, _slot_key(queue))
    return "" if node is None else node.name


def _clock(conn, queue: str | None) -> ServerClock:
    try:
        kept = _clocks.get(conn)
        # A client that is not a cluster has one clock, kept under "": found
        # without asking which node owns the queue (the mint's hot path).
        clock = None if kept is None else kept.get("")
        if clock is not None:
            return clock
        node = _node_name(conn, queue)
        clock = None if kept is None else kept.get(node)
        if clock is None:
            with _clocks_lock:
                kept = _clocks.setdefault(conn, {})
                clock = kept.get(node)
                if clock is None:
                    clock = kept[node] = ServerClock(queue=queue)
    except TypeError:  # a client that takes no weak reference: measure each time
        clock = ServerClock(samples=1, queue=queue)
    return clock


def mint_now_ms(conn, queue: str | None = None) -> int:
    """The mint clock: the server's now in Unix ms as this process estimates
    it for ``conn`` (on a cluster, for the node owning ``queue``)
    (:class:`ServerClock`), without a round trip unless the offset must be
    measured. For ids' time parts; a script that needs the exact now reads
    ``TIME`` itself.

    Raises whatever ``TIME`` raises (``redis.RedisError``).
    """
    return _clock(conn, queue).now_ms(conn)


def known_now_ms(conn, queue: str | None = None) -> int | None:
    """:func:`mint_now_ms` without ever touching the server: the estimate
    from the last measurement for ``conn`` (and ``queue``'s node on a
    cluster), however old, or None when this process never measured it (an
    outbox enqueue then uses the host clock)."""
    try:
        kept = _clocks.get(conn)
    except TypeError:
        return None
    clock = None if kept is None else kept.get(_node_name(conn, queue))
    return None if clock is None else clock.known_ms()


def _reset_after_fork() -> None:
    # The child's clients are new (the connection cache is dropped at fork);
    # a fresh lock replaces one a parent thread may have held at the fork.
    global _clocks, _clocks_lock
    _clocks = weakref.WeakKeyDictionary()
    _clocks_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)
