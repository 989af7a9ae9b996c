"""Riding out a server that drops connections, fills up or restarts.

Two tools for every loop runechomq runs (docs/protocol.md, "Faults"):

- :func:`persist` repeats a call that failed for a reason that passes (a lost
  connection, a timeout, ``OOM`` under ``maxmemory`` with noeviction, a
  server still ``LOADING``, a ``BUSY`` script, a ``READONLY`` replica during
  failover) with capped exponential backoff and jitter, until a deadline.
  Every script it repeats is safe to repeat: a finish answers the outcome it
  recorded, a claim answers the lease its token holds.
- :class:`Outage` logs one line when the server becomes unavailable (its URL
  without a password) and one when it is available again, however many
  threads notice, instead of a traceback per failed call.

And one for callers outside runechomq: :func:`repeat_lost` repeats an
idempotent admission whose connection dropped under it, so an enqueue whose
reply was lost is neither lost nor doubled.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from typing import Callable, TypeVar

import redis

__all__ = ["Outage", "persist", "passing", "Backoff", "repeat_lost", "LOST_REPLY_TRIES",
           "SERVER_ERRORS"]

T = TypeVar("T")

log = logging.getLogger("echomq.connection")

#: What a call to the server raises when it fails: redis-py's errors, and its
#: ``RedisClusterException``, which is not one of them (a cluster no node of
#: which answers raises it: "Redis Cluster cannot be connected").
SERVER_ERRORS = (redis.RedisError, redis.exceptions.RedisClusterException)

#: Server error codes that pass on their own (the first word of the reply).
PASSING_CODES = frozenset({"OOM", "LOADING", "BUSY", "READONLY", "MASTERDOWN", "TRYAGAIN",
                           "CLUSTERDOWN", "NOREPLICAS"})
#: What ends redis-py's prefix of an error in a pipeline ("Command # 1 (TIME)
#: of pipeline caused error: "), before the server's own reply.
PIPELINE_PREFIX_END = " of pipeline caused error: "
#: The classes redis-py turns some of those replies into (the code is then
#: dropped from the message).
_PASSING_CLASSES = tuple(getattr(redis.exceptions, name) for name in (
    "ConnectionError", "TimeoutError", "OutOfMemoryError", "BusyLoadingError",
    "ReadOnlyError", "MasterDownError", "TryAgainError", "ClusterDownError")
    if hasattr(redis.exceptions, name))


def passing(err: BaseException) -> bool:
    """True for a failure that passes on its own (see the module doc)."""
    if isinstance(err, _PASSING_CLASSES):
        return True
    if isinstance(err, redis.exceptions.RedisClusterException):
        # No node of the cluster answered (redis-py's word for a cluster that
        # is away); its other errors are ours (a command across slots).
        return "cannot be connected" in str(err)
    if isinstance(err, redis.ResponseError):
        # A pipeline's error reads "Command # 1 (TIME) of pipeline caused
        # error: BUSY ...": the server's reply follows the colon.
        text = str(err).partition(PIPELINE_PREFIX_END)[2] or str(err)
        code = getattr(err, "status_code", None) or text.split(" ", 1)[0]
        return code in PASSING_CODES
    return False


class Backoff:
    """Capped exponential delays with full jitter: 50 ms, 100 ms, ... ``cap_s``."""

    def __init__(self, first_s: float = 0.05, cap_s: float = 2.0) -> None:
        self.first_s, self.cap_s = first_s, cap_s
        self._next = first_s

    def next_s(self) -> float:
        """The next delay, in seconds."""
        delay, self._next = self._next, min(self._next * 2, self.cap_s)
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self._next = self.first_s


class Outage:
    """Whether the server is reachable, as this process last saw it; logs the
    changes once. Thread-safe.

    A dropped connection that the next attempt repairs (a ``CLIENT KILL``, a
    proxy's idle timeout) is not an outage and is not logged; failures that go
    on for :data:`QUIET_S` are, once, and their end once: the first success
    once no failure has come for ``hold_s`` (0: the first success). On a
    cluster runechomq holds for :data:`HOLD_S`, which keeps a partial outage
    one outage (a node down while the others answer: calls to it fail every
    backoff, calls to the others succeed in between).
    """

    #: How long failures must go on before they are logged as an outage (s).
    QUIET_S = 0.5
    #: How long after its last failure a logged outage ends on a cluster (s);
    #: above the Backoff cap, the longest a failing caller waits to try again.
    HOLD_S = 2.5

    def __init__(self, where: str = "the server", hold_s: float = 0.0) -> None:
        self.where = where
        self.hold_s = hold_s
        self._lock = threading.Lock()
        self._since: float | None = None
        self._first: BaseException | None = None
        self._logged = False
        self._last = 0.0                       # the latest failure (monotonic)
        self._recovered: float | None = None   # the first success after it

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, err: BaseException) -> None:
        """A call failed for a passing reason; log it if this is an outage."""
        now = time.monotonic()
        with self._lock:
            self._last, self._recovered = now, None
            if self._since is None:
                self._since, self._first = now, err
                return
            if self._logged or now - self._since < self.QUIET_S:
                return
            self._logged = True
            first = self._first
        log.warning("%s is unavailable (%s: %s); retrying with backoff", self.where,
                    type(first).__name__, first)

    def ok(self) -> None:
        """A call succeeded; log it if this ends an outage."""
        if self._since is None:
            return
        now = time.monotonic()
        with self._lock:
            since, logged = self._since, self._logged
            if since is None:
                return
            if logged:
                if self._recovered is None:
                    self._recovered = now
                if now - self._last < self.hold_s:
                    return
            recovered = self._recovered or now
            self._since, self._first, self._logged, self._recovered = None, None, False, None
        if logged:
            log.warning("%s is available again after %.1f s", self.where, recovered - since)


def persist(call: Callable[[], T], *, deadline: float, outage: Outage,
            backoff: Backoff | None = None) -> T:
    """Return ``call()``, repeating it while it fails for a passing reason and
    the monotonic ``deadline`` (``time.monotonic()`` seconds) allows.

    Raises the last error when it does not pass or the deadline comes first;
    a cluster that no node answered (redis-py's ``RedisClusterException``,
    which is not a ``redis.RedisError``) as a ``redis.ConnectionError``, as
    callers catch a lost connection.
    """
    backoff = backoff or Backoff()
    while True:
        try:
            result = call()
        except SERVER_ERRORS as err:
            delay_s = backoff.next_s()
            if not passing(err) or time.monotonic() + delay_s > deadline:
                if isinstance(err, redis.RedisError) or not passing(err):
                    raise
                raise redis.ConnectionError(str(err)) from err
            outage.failed(err)
            time.sleep(delay_s)
            continue
        outage.ok()
        return result


#: How often :func:`repeat_lost` sends a call in all.
LOST_REPLY_TRIES = 3


def repeat_lost(call: Callable[[], T], tries: int = LOST_REPLY_TRIES) -> T:
    """Return ``call()``, sending it again (up to ``tries`` times in all, 50
    and 100 ms apart) when the connection dropped or timed out under it: the
    reply may be lost after the server acted, so only an idempotent call may
    come here (an admission with its id: a repeat answers ``duplicate``).
    Other errors, OOM included, are raised at once: the caller decides.

    Raises the last ConnectionError or TimeoutError when every try failed (a
    cluster that no node answered, as redis-py's ``RedisClusterException``
    says while it reads the slot map again, is such a ConnectionError).
    """
    for attempt in range(tries):
        try:
            return call()
        except (redis.ConnectionError, redis.TimeoutError,
                redis.exceptions.RedisClusterException) as err:
            lost = isinstance(err, (redis.ConnectionError, redis.TimeoutError))
            if not lost and not passing(err):
                raise
            if attempt == tries - 1:
                if lost:
                    raise
                raise redis.ConnectionError(str(err)) from err
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")
