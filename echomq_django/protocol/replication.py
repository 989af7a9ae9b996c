"""Replicated admission: an enqueue answered only once replicas hold it
(``ECHOMQ["REPLICAS"]``; docs/deployment.md, "Sentinel").

Redis and Valkey replicate asynchronously: a primary answers a write before
its replicas have it, so a job admitted just before the primary dies can be
missing on the replica a Sentinel promotes. With :class:`Replicas` ``(min,
timeout_ms)`` the admission scripts are followed, in the same pipeline (one
round trip on one connection, as WAIT requires), by ``WAIT min timeout_ms``:
the server answers once ``min`` replicas have acknowledged every write of
that connection so far, or after ``timeout_ms`` with how many did.

Usage::

    from echomq_django.protocol.jobs import Jobs
    from echomq_django.protocol.replication import Replicas
    Jobs(conn, replicas=Replicas(1, 200)).enqueue("mail", job_id, payload)

What it promises, and what not: a job whose enqueue returned is held by at
least ``min`` replicas, so a failover that promotes one of them (a Sentinel
promotes the replica furthest along the primary's stream) keeps it. WAIT is
not consensus: the primary still answers a write no replica takes, and the
replicas are not fsynced. With ``min`` replicas away every enqueue raises
after ``timeout_ms``: this trades admissions for durability (run one replica
more than ``min``). Only admissions wait; a finish (ack, retry) that a
failover loses makes the job run again (at least once), never lost.

Errors: :class:`~echomq_django.exceptions.NotReplicatedError` when fewer
than ``min`` replicas confirmed: the jobs are on the primary (they may well
run) but were not acknowledged; :func:`check_replicas` raises TypeError or
ValueError for a bad setting.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import redis

from ..connection.topology import is_cluster
from ..exceptions import NotReplicatedError
from . import scripts

__all__ = ["Replicas", "check_replicas", "run_confirmed", "MAX_TIMEOUT_MS"]

#: The longest wait for replicas an admission may be given (ms).
MAX_TIMEOUT_MS = 60_000


class Replicas(NamedTuple):
    """How many replicas must hold an admission (``min``, >= 1) and how long
    the server waits for them (``timeout_ms``, 1..60000)."""

    min: int
    timeout_ms: int


def check_replicas(value: Any) -> Replicas | None:
    """``ECHOMQ["REPLICAS"]`` as a :class:`Replicas`: None stays None, a dict
    ``{"min": n, "timeout_ms": ms}`` is checked (TypeError or ValueError
    naming the rule)."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"min", "timeout_ms"}:
        raise TypeError('REPLICAS must be None or {"min": n, "timeout_ms": ms}, got '
                        f"{value!r}")
    low = {"min": 1, "timeout_ms": 1}
    high = {"min": 1_000, "timeout_ms": MAX_TIMEOUT_MS}
    for key in ("min", "timeout_ms"):
        item = value[key]
        if type(item) is not int:
            raise TypeError(f"REPLICAS['{key}'] must be an int, got {type(item).__name__}")
        if not low[key] <= item <= high[key]:
            raise ValueError(f"REPLICAS['{key}'] must be in {low[key]}..{high[key]}, got {item}")
    return Replicas(value["min"], value["timeout_ms"])


def run_confirmed(client: redis.Redis, name: str,
                  calls: Sequence[tuple[Sequence[str], Sequence[Any]]],
                  replicas: Replicas) -> list[Any]:
    """:func:`scripts.run_many <echomq_django.protocol.scripts.run_many>`
    (same arguments, replies and errors) with ``WAIT replicas.min
    replicas.timeout_ms`` after the calls in the same pipeline; raises
    NotReplicatedError when fewer replicas confirmed (after the script
    errors, which come first: a refused call wrote nothing).

    On a cluster the calls (all of one queue, so of one slot) and the WAIT go
    to the node owning the slot, on one of its connections: WAIT counts the
    replicas of that primary. A slot that moved meanwhile answers MOVED (or
    ASK) before any script runs: the slot map is read again and the calls
    sent once more."""
    then = ("WAIT", replicas.min, replicas.timeout_ms)
    if not is_cluster(client):
        replies, confirmed = scripts.run_pipelined(client, name, calls, then=then)
    else:
        key = calls[0][0][0]
        for attempt in range(2):
            node = client.get_redis_connection(client.get_node_from_key(key))
            try:
                replies, confirmed = scripts.run_pipelined(node, name, calls, then=then)
                break
            except redis.ResponseError as err:
                if attempt or not str(err).startswith(("MOVED ", "ASK ")):
                    raise
                client.nodes_manager.initialize()
    if confirmed < replicas.min:
        raise NotReplicatedError(
            f"{confirmed} of the {replicas.min} replica(s) ECHOMQ['REPLICAS'] asks for "
            f"confirmed the enqueue within {replicas.timeout_ms} ms: the job is on the "
            f"primary and may run, but a failover now may lose it")
    return replies
