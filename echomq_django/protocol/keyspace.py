"""Every EchoMQ key name, built in one place.

All keys of one queue share the prefix ``emq:{<queue>}:``; the braces are a
Redis Cluster hash tag, so one queue lives in one hash slot and every script
can touch all of its keys. The names, what each holds and who writes it are
listed in ``docs/protocol.md`` ("Keys").
"""

from __future__ import annotations

from ..rules import check_key_text, check_queue_name


class _Key:
    """A fixed key of every queue: on a :class:`Keyspace`, ``base + suffix``
    (a descriptor, so each name is one line and one rule)."""

    def __init__(self, suffix: str, doc: str) -> None:
        self.suffix = suffix
        self.__doc__ = " ".join(doc.split())

    def __get__(self, keyspace, owner=None):
        return self if keyspace is None else keyspace.base + self.suffix


class Keyspace:
    """The key names of one queue.

    ``Keyspace("mail").pending == "emq:{mail}:pending"``. Construction
    validates the queue name (TypeError for a non-str, ValueError for a str
    that breaks the rule), so nothing is written for a bad one.
    """

    __slots__ = ("queue", "base")

    def __init__(self, queue: str) -> None:
        self.queue = check_queue_name(queue)
        #: The queue's base root, ``emq:{<queue>}:``; scripts that discover job
        #: ids at run time derive row keys from it (see docs/protocol.md).
        self.base = f"emq:{{{queue}}}:"

    # Sorted sets: one structure, several readings of the score.
    pending = _Key("pending", """
        ZSET, score 0: ready jobs, served by ZPOPMIN in id (mint) order.""")

    schedule = _Key("schedule", """
        ZSET, score run-at ms: scheduled jobs and retries waiting to be due.""")

    active = _Key("active", """
        ZSET, score lease deadline ms: claimed jobs; reap reads the expired head.""")

    dead = _Key("dead", """ZSET, score ms of death: the dead-letter set.""")

    repeat = _Key("repeat", """
        ZSET, score next-run ms: the recurring registry, one member per name.""")

    # Plain keys.
    claims = _Key("claims", """
        HASH: fencing token -> job id of every held lease (a claim repeated with the same token
        answers the same lease).""")

    wake = _Key("wake", """LIST of markers: idle consumers block on it (BLPOP); capped.""")

    beat = _Key("beat", """
        LIST of one marker: wakes the metronome when an instant earlier than its plan
        (:attr:`beat_at`) appears.""")

    beat_at = _Key("beat_at", """
        STRING, server ms: the instant a metronome plans to wake at, stored by the horizon it read
        and expiring shortly after that instant; a script marks :attr:`beat` only for an instant
        earlier than it (``lua/includes/beat.lua``).""")

    synced = _Key("synced", """
        STRING, server ms of the last sync of the declared schedules into this queue's registry;
        the metronome re-syncs when it is gone.""")

    paused = _Key("paused", """STRING, present while the queue is paused: claim serves nothing.""")

    epoch = _Key("epoch", """
        STRING: a random token the outbox relay sets (SET NX) when it first admits to the queue;
        an outbox row remembers the epoch it was admitted in, so a row whose job is gone tells
        a job that ended and expired (same epoch) from a server that lost its data (the epoch
        is gone too): docs/durability.md, "Outbox".""")

    def stop(self, worker_id: str) -> str:
        """LIST: stop markers for one runechomq process's blocked waits on this
        queue (its idle consumers and metronome listener BLPOP it beside their
        wake or beat list), so a shutdown never waits out a blocking timeout.
        Pushed at shutdown with a short expiry."""
        return f"{self.base}stop:{worker_id}"

    def stats(self, kind: str, minute: int) -> str:
        """STRING counter of ``kind`` in one minute (``minute`` = server ms
        // 60000): ``done`` (acks), ``failed`` (every failed attempt, the
        last one of a dead job included) or ``dead`` (jobs that ended dead);
        scripts INCR it and it expires on its own after STATS_TTL_MS."""
        return f"{self.base}stats:{kind}:{minute}"

    def job(self, job_id: str) -> str:
        """HASH: the job's row (state, attempts, payload, token, times, errors)."""
        return f"{self.base}job:{job_id}"

    def repeat_record(self, name: str) -> str:
        """HASH: a recurring schedule's definition and bookkeeping."""
        return f"{self.base}repeat:{name}"

    def lane_pending(self, group: str | None) -> str:
        """ZSET, score -priority: a lane's jobs waiting, served highest priority
        first, then in mint order (the ungrouped lane is :attr:`pending`)."""
        return self.pending if not group else f"{self.base}g:{group}:pending"

    latency = _Key("latency", """
        ZSET, score minute (server ms // 60000), member ``<minute>:<latency_ms>``: the queue
        latency the metronome samples once a minute (``queues/sample_latency``), the last
        LATENCY_MINUTES minutes.""")

    # The lanes' bookkeeping (lua/includes/lanes.lua derives the same names).
    lanes = _Key("lanes", """
        ZSET lane -> jobs waiting in it: every lane with work ('' = ungrouped).""")

    lanes_total = _Key("lanes_total", """
        STRING: jobs waiting in every lane, the sum of :attr:`lanes`' scores (kept by the same two
        Lua functions; the admin's pending count).""")

    ring = _Key("ring", """ZSET lane -> turn: the ready lanes, served lowest turn first.""")

    turn = _Key("turn", """STRING: the ring's turn counter.""")

    capped = _Key("capped", """SET: lanes at their concurrency cap, with work waiting.""")

    waiting = _Key("waiting", """ZSET lane -> ms its next token is due: rate-limited lanes.""")

    lane_active = _Key("lane_active", """HASH lane -> jobs of that group running now.""")

    limits = _Key("limits", """HASH: the queue's limits (concurrency, lane_concurrency, rates).""")

    archive = _Key("archive", """
        STREAM of the archive's events, one per job that ends (``id``, ``state`` done, dead or
        cancelled, ``at`` server ms), capped at the limits hash's ``archive_max``; written only
        while that field is set (``lua/includes/archive.lua``), read by runechomq's archiver with
        the consumer group ARCHIVE_GROUP.""")

    buckets = _Key("buckets", """
        HASH: token buckets, ``queue`` and ``g:<group>`` -> "<tokens>:<ms>".""")


#: How long a per-minute counter lives (ms): the admin charts the last hour.
STATS_TTL_MS = 2 * 3_600_000
#: How many per-minute latency samples a queue keeps (``emq:{q}:latency``), and how
#: long the key lives after the last one (ms): the admin charts the last hour.
LATENCY_MINUTES = 60
LATENCY_TTL_MS = 2 * 3_600_000
#: Most wake markers kept on ``emq:{q}:wake``.
WAKE_CAP = 100
#: The consumer group that reads every queue's ``emq:{q}:archive`` stream.
ARCHIVE_GROUP = "archivers"

#: Keys shared by every queue live under a root whose tag no queue can have
#: ("~" is not a queue-name character), so they never collide with a queue.
GLOBAL_BASE = "emq:{~}:"
#: ZSET, score = last announcement (server ms): live runechomq processes.
WORKERS = GLOBAL_BASE + "workers"
#: ZSET, score = last announcement (server ms): queues live processes serve.
QUEUES = GLOBAL_BASE + "queues"


def worker(worker_id: str) -> str:
    """HASH: one runechomq process's announcement (host, pid, queues,
    concurrency, busy, started_at_ms, heartbeat_ms); expires when it stops
    announcing."""
    return f"{GLOBAL_BASE}worker:{worker_id}"


def rate_limit(key: str) -> str:
    """HASH: a rate limiter's token bucket, field ``bucket`` = "<tokens>:<ms>"
    (:class:`echomq_django.limits.RateLimiter`). ``rate_limit("chat-7") ==
    "emq:{rl:chat-7}"``: each limiter key is its own hash tag, so its own slot,
    and no queue's tag can be ``rl:...`` (":" is not a queue-name character).
    ``key`` is checked by :func:`echomq_django.rules.check_key_text` with
    ``in_tag`` (TypeError, ValueError naming ``key``)."""
    return f"emq:{{rl:{check_key_text('key', key, in_tag=True)}}}"
