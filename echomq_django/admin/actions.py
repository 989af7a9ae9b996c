"""What staff can do to a queue from the admin, each one atomic script.

Usage::

    from echomq_django.admin.actions import Actions
    acts = Actions(conn)
    acts.run_now("mail", job_id)        # "moved": scheduled -> pending now
    acts.retry_dead("mail", job_id)     # "moved": dead -> pending, attempts 0
    acts.retry_all_dead("mail")         # how many went back to pending
    acts.purge_dead("mail")             # how many dead letters were removed

The single-job actions run ``lua/admin/run_now.lua``, ``retry_dead.lua``
and ``delete.lua``. The bulk ones run ``retry_all_dead.lua`` and
``purge_dead.lua`` in batches of at most :data:`BATCH` letters per call
(STYLE principle 8), looping here until a batch comes back short; every call
after the first passes the first call's cutoff, so letters that die while the
loop runs are left for the next press. Pause, resume and cancel are the
protocol's own scripts (:class:`~echomq_django.protocol.jobs.Jobs`,
:class:`~echomq_django.protocol.queues.Queues`); the recurring actions are
:class:`~echomq_django.repeat.Repeat`'s. The admin's pages and
the effects of each action are described in ``docs/admin.md``.

Errors: ValueError for a bad queue name or a job id that breaks its rule
(:func:`echomq_django.rules.check_job_id`: 1-200 characters of
``[A-Za-z0-9._-]``), TypeError for one that is not a str, each before
anything is sent; NoSuchJobError from :meth:`Actions.cancel` for a missing row;
LookupError from :meth:`Actions.run_repeat_now` for a missing schedule;
``redis.RedisError`` for server failures.

Signals emitted: none.
"""

from __future__ import annotations

from .. import rules
from ..api.admission import forget_outbox_entry
from ..protocol import scripts
from ..protocol.jobs import DEFAULT_KEEP_MS, Jobs
from ..protocol.keyspace import WAKE_CAP, Keyspace
from ..protocol.queues import Queues
from ..repeat.registry import Repeat

__all__ = ["Actions", "BATCH"]

#: Most dead letters one bulk script call touches.
BATCH = 1000

_RUN_NOW = {1: "moved", 0: "not scheduled", 2: "gone"}
_RETRY_DEAD = {1: "moved", 0: "not dead", 2: "gone"}
_DELETE = {1: "deleted", 0: "not found", 2: "running"}


class Actions:
    """The admin's actions on one redis-py connection. Thread-safe as redis-py is."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.jobs = Jobs(conn)
        self.queues = Queues(conn)

    def run_now(self, queue: str, job_id: str) -> str:
        """Release the scheduled job ``job_id`` to pending now (as promote would).

        Returns ``"moved"``; ``"not scheduled"`` when it is not in schedule
        (nothing changes); ``"gone"`` when schedule held the id but its row had
        expired (the member is dropped).
        """
        return _RUN_NOW[self._move("admin/run_now", "schedule", queue, job_id)]

    def retry_dead(self, queue: str, job_id: str) -> str:
        """Put the dead letter ``job_id`` back on pending with attempts and stalls
        at 0, its reason dropped and its expiry removed (last_error is kept).

        Returns ``"moved"``; ``"not dead"`` (nothing changes); ``"gone"`` when
        the letter's row had expired (the member is dropped).
        """
        return _RETRY_DEAD[self._move("admin/retry_dead", "dead", queue, job_id)]

    def _move(self, script: str, source: str, queue: str, job_id: str) -> int:
        """Run a script that moves one job from the set ``source`` to pending."""
        ks = Keyspace(queue)
        rules.check_job_id(job_id)
        return int(scripts.run(self.conn, script,
                               [ks.job(job_id), getattr(ks, source), ks.pending, ks.wake],
                               [job_id, WAKE_CAP]))

    def delete(self, queue: str, job_id: str) -> str:
        """Delete a job that is not running: its row and its member in pending,
        schedule and dead.

        Returns ``"deleted"``; ``"not found"`` (nothing changes); ``"running"``
        when the job is active (nothing changes: cancel it instead). A deleted
        job's outbox entry, if it has one, is deleted too.
        """
        ks = Keyspace(queue)
        rules.check_job_id(job_id)
        code = scripts.run(self.conn, "admin/delete",
                           [ks.job(job_id), ks.pending, ks.schedule, ks.dead], [job_id])
        if int(code) == 1:
            forget_outbox_entry(queue, job_id)   # or the relay would admit it again
        return _DELETE[int(code)]

    def retry_all_dead(self, queue: str) -> int:
        """Put every dead letter back on pending (attempts reset), :data:`BATCH`
        per script call; return how many went back. Letters whose rows had
        expired are dropped from dead and not counted."""
        ks = Keyspace(queue)
        revived, cutoff = 0, ""
        while True:
            moved, taken, cutoff = scripts.run(
                self.conn, "admin/retry_all_dead", [ks.dead, ks.pending, ks.wake],
                [ks.base, BATCH, cutoff, WAKE_CAP])
            revived += int(moved)
            if int(taken) < BATCH:
                return revived

    def purge_dead(self, queue: str) -> int:
        """Remove every dead letter and its row, :data:`BATCH` per script call;
        return how many were removed."""
        ks = Keyspace(queue)
        removed, cutoff = 0, ""
        while True:
            taken, cutoff = scripts.run(self.conn, "admin/purge_dead", [ks.dead],
                                        [ks.base, BATCH, cutoff])
            removed += int(taken)
            if int(taken) < BATCH:
                return removed

    # -- the protocol's own scripts ---------------------------------------

    def cancel(self, queue: str, job_id: str, keep_ms: int = DEFAULT_KEEP_MS) -> str:
        """:meth:`Jobs.cancel`: ``"cancelled"``, ``"flagged"`` or ``"finished"``."""
        return self.jobs.cancel(queue, job_id, keep_ms)

    def pause(self, queue: str) -> bool:
        """:meth:`Queues.pause`: False when the queue was paused already."""
        return self.queues.pause(queue)

    def resume(self, queue: str) -> bool:
        """:meth:`Queues.resume`: False when the queue was not paused."""
        return self.queues.resume(queue)

    def run_repeat_now(self, queue: str, name: str) -> str:
        """:meth:`Repeat.run_now`: mint one occurrence now; return its job id."""
        return Repeat(self.conn).run_now(queue, name)

    def remove_repeat(self, queue: str, name: str) -> bool:
        """:meth:`Repeat.remove`: False when there was no such schedule."""
        return Repeat(self.conn).remove(queue, name)
