"""Every EchoMQ key name, built in one place.

All keys of one queue share the prefix ``emq:{<queue>}:``; the braces are a
Redis Cluster hash tag, so one queue lives in one hash slot and every script
can touch all of its keys. The names, what each holds and who writes it are
listed in ``docs/protocol.md`` ("Keys").
"""

from __future__ import annotations

from ..rules import check_key_text, check_queue_name


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
    @property
    def pending(self) -> str:
        """ZSET, score 0: ready jobs, served by ZPOPMIN in id (mint) order."""
        return self.base + "pending"

    @property
    def schedule(self) -> str:
        """ZSET, score run-at ms: scheduled jobs and retries waiting to be due."""
        return self.base + "schedule"

    @property
    def active(self) -> str:
        """ZSET, score lease deadline ms: claimed jobs; reap reads the expired head."""
        return self.base + "active"

    @property
    def dead(self) -> str:
        """ZSET, score ms of death: the dead-letter set."""
        return self.base + "dead"

    @property
    def repeat(self) -> str:
        """ZSET, score next-run ms: the recurring registry, one member per name."""
        return self.base + "repeat"

    # Plain keys.
    @property
    def claims(self) -> str:
        """HASH: fencing token -> job id of every held lease (a claim repeated
        with the same token answers the same lease)."""
        return self.base + "claims"

    @property
    def wake(self) -> str:
        """LIST of markers: idle consumers block on it (BLPOP); capped."""
        return self.base + "wake"

    @property
    def beat(self) -> str:
        """LIST of one marker: wakes the metronome when an instant earlier than
        its plan (:attr:`beat_at`) appears."""
        return self.base + "beat"

    @property
    def beat_at(self) -> str:
        """STRING, server ms: the instant a metronome plans to wake at, stored
        by the horizon it read and expiring shortly after that instant; a
        script marks :attr:`beat` only for an instant earlier than it
        (``lua/includes/beat.lua``)."""
        return self.base + "beat_at"

    @property
    def synced(self) -> str:
        """STRING, server ms of the last sync of the declared schedules into
        this queue's registry; the metronome re-syncs when it is gone."""
        return self.base + "synced"

    @property
    def paused(self) -> str:
        """STRING, present while the queue is paused: claim serves nothing."""
        return self.base + "paused"

    def stop(self, worker_id: str) -> str:
        """LIST: stop markers for one runechomq process's blocked waits on this
        queue (its idle consumers and metronome listener BLPOP it beside their
        wake or beat list), so a shutdown never waits out a blocking timeout.
        Pushed at shutdown with a short expiry."""
        return f"{self.base}stop:{worker_id}"

    def stats(self, kind: str, minute: int) -> str:
        """STRING counter of ``kind`` ("done" or "failed") in one minute
        (``minute`` = server ms // 60000); scripts INCR it and it expires on
        its own after STATS_TTL_MS."""
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

    # The lanes' bookkeeping (lua/includes/lanes.lua derives the same names).
    @property
    def lanes(self) -> str:
        """ZSET lane -> jobs waiting in it: every lane with work ('' = ungrouped)."""
        return self.base + "lanes"

    @property
    def lanes_total(self) -> str:
        """STRING: jobs waiting in every lane, the sum of :attr:`lanes`' scores
        (kept by the same two Lua functions; the admin's pending count)."""
        return self.base + "lanes_total"

    @property
    def ring(self) -> str:
        """ZSET lane -> turn: the ready lanes, served lowest turn first."""
        return self.base + "ring"

    @property
    def turn(self) -> str:
        """STRING: the ring's turn counter."""
        return self.base + "turn"

    @property
    def capped(self) -> str:
        """SET: lanes at their concurrency cap, with work waiting."""
        return self.base + "capped"

    @property
    def waiting(self) -> str:
        """ZSET lane -> ms its next token is due: rate-limited lanes."""
        return self.base + "waiting"

    @property
    def lane_active(self) -> str:
        """HASH lane -> jobs of that group running now."""
        return self.base + "lane_active"

    @property
    def limits(self) -> str:
        """HASH: the queue's limits (concurrency, lane_concurrency, rates)."""
        return self.base + "limits"

    @property
    def buckets(self) -> str:
        """HASH: token buckets, ``queue`` and ``g:<group>`` -> "<tokens>:<ms>"."""
        return self.base + "buckets"


#: How long a per-minute counter lives (ms): the admin charts the last hour.
STATS_TTL_MS = 2 * 3_600_000
#: Most wake markers kept on ``emq:{q}:wake``.
WAKE_CAP = 100

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
