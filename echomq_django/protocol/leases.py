"""Leases: a consumer's side of the protocol (claim, ack, retry, snooze, dead, extend, release).

:class:`Leases` is mixed into :class:`~echomq_django.protocol.jobs.Jobs`;
use it through ``Jobs(conn)``. Each method checks its arguments with
:mod:`echomq_django.rules` first (nothing is written on bad input) and runs
one atomic script of ``lua/jobs/`` on the server clock. A lease is fenced by
its token (docs/protocol.md, "claim", "Fencing tokens", "ack").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from .. import rules
from ..exceptions import StaleTokenError
from ..rules import check_int, check_job_id, check_str, check_text
from . import scripts
from .defaults import DEFAULT_DEAD_MAX, DEFAULT_DEAD_TTL_MS, DEFAULT_KEEP_MS
from .keyspace import STATS_TTL_MS, WAKE_CAP, Keyspace
from .records import Claim, Finish, Renewal
from .tokens import new_token

__all__ = ["Leases"]


class Leases:
    """The lease half of :class:`~echomq_django.protocol.jobs.Jobs` (needs ``self.conn``)."""

    conn: Any

    def claim(self, queue: str, consumer: str, lease_ms: int,
              token: str | None = None) -> Claim | None:
        """Lease the next ready job for ``lease_ms`` (server clock): one
        :meth:`claim_many` of one. Returns a :class:`Claim` or None."""
        claims, _ = self.claim_many(queue, consumer, lease_ms, 1, token=token)
        return claims[0] if claims else None

    def claim_many(self, queue: str, consumer: str, lease_ms: int, count: int,
                   token: str | None = None) -> tuple[list[Claim], int | None]:
        """Lease up to ``count`` (1..1000) ready jobs for ``lease_ms`` in one
        script, lanes served round-robin within the queue's limits
        (protocol.md, "claim", "Lanes", "Limits").

        ``token`` is the batch's token (default: a fresh one from
        :func:`~echomq_django.protocol.tokens.new_token`; never reuse one); the
        i-th job is fenced by ``f"{token}.{i}"``. Repeating a claim with the
        same token, e.g. after a lost reply, answers the same leases: all
        those the token still holds, even more than a smaller ``count`` asks.

        Returns ``(claims, wait_ms)``: the :class:`Claim` s (attempts + 1 each;
        none when nothing is ready, the queue is paused or at a limit) and,
        when claiming stopped for want of a rate-limit token, how long until
        the next one comes due (ms on the server clock; else None).
        """
        ks = Keyspace(queue)
        check_str("consumer", consumer)
        check_int("lease_ms", lease_ms, 1)
        check_int("count", count, 1, 1000)
        token = new_token() if token is None else check_str("token", token)
        reply = scripts.run(self.conn, "jobs/claim",
                            [ks.pending, ks.active, ks.claims, ks.wake, ks.beat, ks.paused],
                            [ks.base, consumer, lease_ms, WAKE_CAP, token, count])
        now, next_ms = int(reply[0]), int(reply[1])
        return _claims(queue, now, reply[2:]), (None if next_ms == -1 else max(0, next_ms - now))

    def ack(self, queue: str, job_id: str, token: str, result: Any = None,
            keep_ms: int = DEFAULT_KEEP_MS) -> str:
        """Complete the job held by ``token``; keep the row ``keep_ms``, then expire it.

        ``result`` must be JSON-serialisable (stored as JSON text). Returns
        ``"done"``, or ``"cancelled"`` when a cancel was requested while it ran
        (protocol.md, "ack"). Repeating an ack whose reply was lost answers
        the recorded outcome. Raises StaleTokenError when ``token`` no longer
        holds the lease (nothing changes); TypeError for a non-JSON result
        (PayloadError for one nested deeper than 100 levels or containing itself);
        ValueError for a str in it with a lone surrogate (naming where).
        """
        ks = Keyspace(queue)
        check_job_id(job_id)
        text = "" if result is None else rules.json_text("result", result)
        check_int("keep_ms", keep_ms, 1)
        _, state = scripts.run(self.conn, "jobs/ack", [ks.job(job_id), ks.active, ks.claims],
                               [job_id, check_str("token", token), text, keep_ms, ks.base,
                                STATS_TTL_MS])
        return state

    def retry(self, queue: str, job_id: str, token: str, delay_ms: int, error: str = "",
              keep_ms: int = DEFAULT_KEEP_MS) -> str:
        """Re-park the job held by ``token`` on ``schedule`` at server now + ``delay_ms``.

        Returns ``"scheduled"``, or ``"cancelled"`` when a cancel was requested
        while it ran (kept ``keep_ms``). Raises StaleTokenError when ``token``
        no longer holds the lease (nothing changes).
        """
        ks = Keyspace(queue)
        check_job_id(job_id)
        check_int("delay_ms", delay_ms, 0)
        check_int("keep_ms", keep_ms, 1)
        _, state = scripts.run(
            self.conn, "jobs/retry", [ks.job(job_id), ks.active, ks.claims, ks.schedule, ks.beat],
            [job_id, check_str("token", token), delay_ms, check_text("error", str(error)), ks.base,
             STATS_TTL_MS, keep_ms])
        return state

    def snooze(self, queue: str, job_id: str, token: str, delay_ms: int,
               keep_ms: int = DEFAULT_KEEP_MS) -> str:
        """Put the job held by ``token`` back on ``schedule`` at server now +
        ``delay_ms`` without spending an attempt (seed 002's ``Jobs.delay``):
        ``attempts`` goes back down, ``snoozes`` up.

        Returns ``"scheduled"`` or ``"cancelled"``. Raises StaleTokenError when
        ``token`` no longer holds the lease (nothing changes).
        """
        ks = Keyspace(queue)
        check_job_id(job_id)
        check_int("delay_ms", delay_ms, 0)
        check_int("keep_ms", keep_ms, 1)
        _, state = scripts.run(self.conn, "jobs/snooze",
                               [ks.job(job_id), ks.active, ks.claims, ks.schedule, ks.beat],
                               [job_id, check_str("token", token), delay_ms, keep_ms])
        return state

    #: The seed's name for snooze.
    delay = snooze

    def progress(self, queue: str, job_id: str, token: str, percent: int,
                 message: str = "") -> bool:
        """Store a running job's progress (``percent`` 0..100, optional message).

        Returns True when a cancel has been requested for the job. Raises
        StaleTokenError when ``token`` no longer holds the lease; ValueError
        for a percent outside 0..100.
        """
        ks = Keyspace(queue)
        check_job_id(job_id)
        check_int("percent", percent, 0, 100)
        check_text("message", message)
        return scripts.run(self.conn, "jobs/progress", [ks.job(job_id)],
                           [job_id, check_str("token", token), percent, message]) == 1

    def save_metadata(self, queue: str, job_id: str, token: str, metadata: Mapping) -> bool:
        """Store a running job's metadata, a JSON object (the row's
        ``metadata`` field; docs/protocol.md, "metadata"), replacing what was
        there. Returns True when a cancel has been requested for the job.

        Raises StaleTokenError when ``token`` no longer holds the lease;
        TypeError when ``metadata`` is not a dict or not JSON (naming it).
        """
        ks = Keyspace(queue)
        check_job_id(job_id)
        if not isinstance(metadata, dict):
            raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
        text = rules.json_text("metadata", metadata)
        return scripts.run(self.conn, "jobs/metadata", [ks.job(job_id)],
                           [job_id, check_str("token", token), text]) == 1

    def cancel_requested(self, queue: str, job_id: str) -> bool:
        """True when a cancel was requested for the (running) job."""
        return scripts.decode(self.conn.hget(Keyspace(queue).job(check_job_id(job_id)),
                                             "cancel_requested")) == "1"

    def dead(self, queue: str, job_id: str, token: str, reason: str, error: str = "",
             dead_ttl_ms: int = DEFAULT_DEAD_TTL_MS, dead_max: int = DEFAULT_DEAD_MAX,
             keep_ms: int = DEFAULT_KEEP_MS) -> str:
        """End the job held by ``token`` in the dead-letter set with ``reason``.

        Dead letters are kept ``dead_ttl_ms`` and at most ``dead_max`` of them
        (the oldest go first). Returns ``"dead"``, or ``"cancelled"`` when a
        cancel was requested while it ran. Raises StaleTokenError when
        ``token`` no longer holds the lease.
        """
        ks = Keyspace(queue)
        check_job_id(job_id)
        check_int("dead_ttl_ms", dead_ttl_ms, 1)
        check_int("dead_max", dead_max, 1)
        check_int("keep_ms", keep_ms, 1)
        _, state = scripts.run(
            self.conn, "jobs/dead", [ks.job(job_id), ks.active, ks.claims, ks.dead],
            [job_id, check_str("token", token), check_str("reason", reason),
             check_text("error", str(error)), ks.base, dead_ttl_ms, dead_max, STATS_TTL_MS,
             keep_ms])
        return state

    def extend(self, queue: str, job_id: str, token: str, lease_ms: int) -> int:
        """Push the lease held by ``token`` to server now + ``lease_ms``: one
        :meth:`extend_many` of one.

        Returns the new deadline (server ms). Raises StaleTokenError when
        ``token`` no longer holds the lease (nothing changes).
        """
        (renewal,) = self.extend_many(queue, [(job_id, token, lease_ms)])
        if renewal.deadline_ms is None:
            raise StaleTokenError(renewal.stale)
        return renewal.deadline_ms

    def extend_lock(self, queue: str, job_id: str, token: str, lease_ms: int) -> int:
        """The source documents' name for the lease checkpoint: :meth:`extend`."""
        return self.extend(queue, job_id, token, lease_ms)

    def extend_many(self, queue: str, leases: Sequence[tuple[str, str, int]]) -> list[Renewal]:
        """Renew every lease in ``leases`` (``(job_id, token, lease_ms)`` each,
        at most 1000) to server now + its ``lease_ms``, and read each job's
        cancel flag, in one script (docs/protocol.md, "extend"). A consumer's
        heartbeat calls it once per queue.

        Returns one :class:`Renewal` per lease, in order: the new deadline
        (server ms) and whether a cancel was requested, or ``deadline_ms``
        None and the reason in ``stale`` when the token no longer holds that
        lease (that one changes nothing). Raises ValueError or TypeError for
        ``leases`` that is not a list of such tuples, or a bad id, token or
        lease_ms, naming the entry (``leases[3]: ...``; nothing written).
        """
        ks = Keyspace(queue)
        leases = _entries("leases", leases, ("job_id", "token", "lease_ms"))
        keys, args = [ks.active, ks.beat], []
        for index, (job_id, token, lease_ms) in enumerate(leases):
            with _naming("leases", index):
                keys.append(ks.job(check_job_id(job_id)))
                args += [job_id, check_str("token", token), check_int("lease_ms", lease_ms, 1)]
        if not leases:
            return []
        return [Renewal(int(entry[0]), entry[1] == 1, "") if int(entry[0]) >= 0
                else Renewal(None, False, entry[2])
                for entry in scripts.run(self.conn, "jobs/extend", keys, args)]

    def release(self, queue: str, job_id: str, token: str,
                keep_ms: int = DEFAULT_KEEP_MS) -> str:
        """Hand the job held by ``token`` back to ``pending``, giving back its
        attempt: one :meth:`release_many` of one.

        Returns ``"pending"``, or ``"cancelled"`` when a cancel was requested
        (the job ends cancelled, kept ``keep_ms``, instead of running again).
        Raises StaleTokenError when ``token`` no longer holds the lease.
        """
        (state,) = self.release_many(queue, [(job_id, token)], keep_ms=keep_ms)
        if isinstance(state, StaleTokenError):
            raise state
        return state

    def release_many(self, queue: str, leases: Sequence[tuple[str, str]],
                     keep_ms: int = DEFAULT_KEEP_MS) -> list[str | StaleTokenError]:
        """Hand every job of ``leases`` (``(job_id, token)`` each, at most
        1000) back to its lane in one script, giving back the attempt each was
        on: a consumer shutting down before its handlers finished
        (docs/protocol.md, "release").

        Returns one entry per lease, in order: ``"pending"``, ``"cancelled"``
        (a cancel was requested: it ends cancelled, kept ``keep_ms``), or a
        StaleTokenError (not raised) when the token no longer holds that
        lease. Raises ValueError or TypeError for ``leases`` that is not a
        list of such tuples, or a bad id or token, naming the entry
        (``leases[3]: ...``; nothing written).
        """
        ks = Keyspace(queue)
        leases = _entries("leases", leases, ("job_id", "token"))
        check_int("keep_ms", keep_ms, 1)
        keys, args = [ks.active, ks.claims, ks.pending, ks.wake], [WAKE_CAP, keep_ms]
        for index, (job_id, token) in enumerate(leases):
            with _naming("leases", index):
                keys.append(ks.job(check_job_id(job_id)))
                args += [job_id, check_str("token", token)]
        if not leases:
            return []
        return [{1: "pending", 2: "cancelled"}.get(int(entry[0])) or StaleTokenError(entry[1])
                for entry in scripts.run(self.conn, "jobs/release", keys, args)]

    def finish_many(self, queue: str, outcomes: Sequence[Finish], *, consumer: str = "",
                    lease_ms: int = 1, count: int = 0, token: str | None = None,
                    keep_ms: int = DEFAULT_KEEP_MS, dead_ttl_ms: int = DEFAULT_DEAD_TTL_MS,
                    dead_max: int = DEFAULT_DEAD_MAX
                    ) -> tuple[list[str], list[Claim], int | None]:
        """Record ``outcomes`` (:class:`Finish` each, at most 1000) of leases of
        ``queue`` and then claim up to ``count`` (0..1000) jobs for
        ``consumer`` for ``lease_ms``, in one script (docs/protocol.md,
        "finish"). Each outcome follows its single call's rule (:meth:`ack`,
        :meth:`retry`, :meth:`snooze`, :meth:`dead`); the claim follows
        :meth:`claim_many`'s, after the outcomes freed their capacity, with
        ``token`` as its batch token (a fresh one by default). Repeating the
        call after a lost reply answers the same.

        Returns ``(states, claims, wait_ms)``: per outcome, in order, the
        state its single call returns (``"done"``, ``"scheduled"``,
        ``"dead"``, ``"cancelled"``) or ``"stale"`` when its token no longer
        holds the lease (that outcome changes nothing); the claims and
        wait_ms as :meth:`claim_many`. Raises ValueError or TypeError naming
        the outcome's index and argument when one is malformed (not a
        :class:`Finish`, a bad job id, a result that is not JSON, a bad delay,
        an empty reason; nothing is written).
        """
        ks = Keyspace(queue)
        outcomes = _entries("outcomes", outcomes)
        check_int("count", count, 0, 1000)
        check_int("lease_ms", lease_ms, 1)
        check_int("keep_ms", keep_ms, 1)
        check_int("dead_ttl_ms", dead_ttl_ms, 1)
        check_int("dead_max", dead_max, 1)
        if count:
            check_str("consumer", consumer)
        token = (new_token() if token is None else check_str("token", token)) if count else ""
        keys = [ks.pending, ks.active, ks.claims, ks.wake, ks.beat, ks.paused, ks.schedule,
                ks.dead]
        args: list[Any] = [ks.base, consumer, lease_ms, WAKE_CAP, token, count, keep_ms,
                           dead_ttl_ms, dead_max, STATS_TTL_MS]
        for index, outcome in enumerate(outcomes):
            args += _outcome_args(index, outcome)
            keys.append(ks.job(outcome.job_id))
        reply = scripts.run(self.conn, "jobs/finish", keys, args)
        now, next_ms, recorded = int(reply[0]), int(reply[1]), reply[2]
        claims = _claims(queue, now, reply[3:])
        return ([entry[1] for entry in recorded], claims,
                None if next_ms == -1 else max(0, next_ms - now))


def _entries(name: str, value: Any, fields: tuple[str, ...] = ()) -> list:
    """``value`` (a list, tuple or other iterable, never a str, bytes or
    mapping) as a list of at most 1000 entries; with ``fields``, each entry a
    tuple or list of that many values. TypeError or ValueError naming
    ``name`` and the entry's index otherwise."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a list, got {type(value).__name__}")
    entries = list(value)
    check_int(name, len(entries), 0, 1000)
    for index, entry in enumerate(entries):
        if fields and not (isinstance(entry, (tuple, list)) and len(entry) == len(fields)):
            raise TypeError(f"{name}[{index}] must be a tuple ({', '.join(fields)}), got "
                            f"{entry!r}"[:300])
    return entries


@contextmanager
def _naming(name: str, index: int):
    """Prefix a TypeError or ValueError raised inside with ``name[index]: ``."""
    try:
        yield
    except (TypeError, ValueError) as err:
        raise type(err)(f"{name}[{index}]: {err}") from None


def _claims(queue: str, now: int, entries: list) -> list[Claim]:
    """The jobs of a claim's reply (claim's and finish's) as :class:`Claim` s."""
    return [Claim(queue, job_id, job_token, payload, int(attempts), int(deadline), now,
                  int(snoozes), group or None)
            for job_id, job_token, payload, attempts, deadline, snoozes, group in entries]


_OPS = ("ack", "retry", "snooze", "dead")


def _outcome_args(index: int, outcome: Finish) -> list[Any]:
    """finish's six arguments for one outcome, checked as its single call
    checks them; errors name the outcome's index."""
    if not isinstance(outcome, Finish):
        raise TypeError(f"outcomes[{index}] must be a Finish, got {type(outcome).__name__}")
    if outcome.op not in _OPS:
        raise ValueError(f"outcomes[{index}].op must be one of {', '.join(_OPS)}, "
                         f"got {outcome.op!r}")
    try:
        check_job_id(outcome.job_id)
        token = check_str("token", outcome.token)
        if outcome.op == "ack":
            if outcome.result_text is not None:
                text = check_text("result_text", outcome.result_text)
            else:
                text = "" if outcome.result is None else rules.json_text("result",
                                                                          outcome.result)
            return ["ack", outcome.job_id, token, text, "", ""]
        if outcome.op == "dead":
            return ["dead", outcome.job_id, token, check_str("reason", outcome.reason),
                    check_text("error", str(outcome.error)),
                    check_text("error_class", outcome.error_class)]
        delay_ms = check_int("delay_ms", outcome.delay_ms, 0)
        if outcome.op == "retry":
            return ["retry", outcome.job_id, token, delay_ms,
                    check_text("error", str(outcome.error)),
                    check_text("error_class", outcome.error_class)]
        return ["snooze", outcome.job_id, token, delay_ms, "", ""]
    except (TypeError, ValueError) as err:
        raise type(err)(f"outcomes[{index}]: {err}") from None
