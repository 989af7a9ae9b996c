"""The consumer's wait for work: BLPOP on its queues' wake lists.

Every script that makes work ready pushes a marker onto its queue's wake list
(``emq:{q}:wake``, docs/protocol.md, "Wake markers"). An idle consumer blocks
on the wake lists of every queue it serves and on a stop list of its own that
shutdown pushes to, so a queue with work wakes it at once and stopping never
waits out a timeout.

One BLPOP may only name keys of one cluster slot. On one server (or when all
the queues share a slot) a single BLPOP names them all. On a cluster the
queues are grouped by slot, and each group is waited on by a thread of its own
(one blocking connection each, on the node owning the slot) with a stop list in
that slot; what the threads pop reaches :meth:`WakeLists.wait` through a local
queue. Markers popped while the consumer was busy wait there, as they would
have waited on the server.
"""

from __future__ import annotations

import logging
import queue as queue_mod
import threading

from ..connection import block_timeout_s
from ..connection.resilience import Backoff, Outage, passing
from ..connection.topology import by_slot, is_cluster
from ..protocol.keyspace import Keyspace
from ..protocol.presence import signal_stop

__all__ = ["WakeLists"]

log = logging.getLogger("echomq.consumer")

#: What the waiter threads put in the local queue for a stop marker.
_STOP = object()


class WakeLists:
    """Waits on the wake lists of ``queues`` (in order) for the consumer
    ``name``; ``stop`` ends the waiter threads (cluster only); ``outage``
    hears of a waiter thread's connection errors."""

    def __init__(self, conn, queues: list[str], name: str, *, stop: threading.Event,
                 outage: Outage, idle_block_s: float) -> None:
        self.conn = conn
        self.stop = stop
        self.outage = outage
        self.idle_block_s = idle_block_s
        self._queue_of: dict = {}
        wakes = [Keyspace(q).wake for q in queues]
        groups = by_slot(wakes) if is_cluster(conn) else [wakes]
        #: The BLPOP key lists, one per slot: the wake lists, then the stop list.
        self.groups: list[list[str]] = []
        for group in groups:
            first = next(q for q in queues if Keyspace(q).wake == group[0])
            self.groups.append([*group, Keyspace(first).stop(name)])
        for q in queues:
            self._queue_of[Keyspace(q).wake] = self._queue_of[Keyspace(q).wake.encode()] = q
        #: Each slot's stop list: shutdown pushes a marker onto every one.
        self.stop_keys = [group[-1] for group in self.groups]
        self._inbox: queue_mod.Queue | None = None
        self._lock = threading.Lock()

    def wait(self, timeout_s: float) -> tuple[bool, str | None]:
        """Block up to ``timeout_s`` (> 0; capped under the client's socket
        timeout) for a marker. Returns ``(woken, queue)``: woken is False when
        the time ran out; queue is the queue whose marker came, or None for a
        stop marker. On one slot, raises what BLPOP raises (redis errors);
        on several, a waiter thread's errors go to ``outage`` and the wait
        simply times out."""
        timeout_s = block_timeout_s(self.conn, timeout_s)
        if len(self.groups) == 1:
            popped = self.conn.blpop(self.groups[0], timeout=timeout_s)
            return (True, self._queue_of.get(popped[0])) if popped else (False, None)
        inbox = self._start()
        try:
            item = inbox.get(timeout=timeout_s)
        except queue_mod.Empty:
            return False, None
        return True, (None if item is _STOP else item)

    def signal_stop(self) -> None:
        """Wake every blocked wait at once (never raises)."""
        signal_stop(self.conn, self.stop_keys, 1)

    def _start(self) -> queue_mod.Queue:
        inbox = self._inbox
        if inbox is not None:
            return inbox
        with self._lock:
            if self._inbox is None:
                inbox = queue_mod.Queue()
                for index, keys in enumerate(self.groups):
                    threading.Thread(target=self._waiter, args=(keys, inbox),
                                     name=f"echomq-wake-{index}", daemon=True).start()
                self._inbox = inbox
        return self._inbox

    def _waiter(self, keys: list[str], inbox: queue_mod.Queue) -> None:
        backoff = Backoff()
        stop_key = keys[-1]
        while not self.stop.is_set():
            try:
                popped = self.conn.blpop(keys, timeout=block_timeout_s(self.conn,
                                                                      self.idle_block_s))
            except Exception as err:  # noqa: BLE001 - a lost node must not end the wait
                if passing(err):
                    self.outage.failed(err)
                else:
                    log.exception("waiting on %s failed", ", ".join(keys))
                self.stop.wait(backoff.next_s())
                continue
            backoff.reset()
            if popped:
                key = popped[0].decode() if isinstance(popped[0], bytes) else popped[0]
                inbox.put(_STOP if key == stop_key else self._queue_of[key])
