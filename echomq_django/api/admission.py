"""How an enqueue reaches the bus: at once, when the caller's transaction
commits, or through the durable outbox (docs/durability.md).

Every front door (``JobFunction.enqueue*``, the django.tasks backend) builds
its jobs as :meth:`Jobs.enqueue_many <echomq_django.protocol.jobs.Jobs.enqueue_many>`
items, each with a fresh id, and hands them to :func:`admit` with a
:class:`Route`:

- **outbox** (``ECHOMQ["OUTBOX"]`` covers the queue, or ``outbox=True``): each
  job becomes an ``OutboxEntry`` row in the caller's transaction on database
  ``using``; after the commit this process tries to admit them at once, and
  the relay in runechomq admits whatever is left (Redis down, a crash),
  keeps each row until its job has ended and admits it again if the server
  loses it. The answer is ``deferred``. Nothing here needs the server.
- **on commit** (``ECHOMQ["ENQUEUE_ON_COMMIT"]``, default True, or
  ``on_commit=True``) inside ``transaction.atomic(using=...)``: admitted by
  ``transaction.on_commit``, never if the transaction rolls back; ``deferred``.
- otherwise at once, the answer being the admission's (``enqueued``,
  ``scheduled``). An admission whose connection drops is sent again
  (:func:`~echomq_django.connection.resilience.repeat_lost`).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import redis
from django.db import DEFAULT_DB_ALIAS, transaction

from .. import durability, signals
from ..conf import get_config
from ..connection.resilience import LOST_REPLY_TRIES, repeat_lost
from ..connection.topology import node_for, with_timeout
from ..protocol.jobs import Jobs
from ..protocol.keyspace import Keyspace
from ..protocol.records import Outcome

__all__ = ["Route", "admit", "announce", "deliver_entries", "mint_ms"]

log = logging.getLogger("echomq.outbox")


@dataclass(frozen=True)
class Route:
    """Per-call overrides of how an enqueue travels: ``on_commit`` and
    ``outbox`` (None: the setting), ``using`` (the database alias whose
    transaction counts and where outbox rows go; None: ``default``)."""

    on_commit: bool | None = None
    outbox: bool | None = None
    using: str | None = None

    @property
    def alias(self) -> str:
        return self.using or DEFAULT_DB_ALIAS


DEFAULT_ROUTE = Route()


def mint_ms(conn: Any, outbox: bool, queue: str | None = None) -> int:
    """The time part of a new id: the server's clock as this process knows it
    (:func:`~echomq_django.protocol.clock.mint_now_ms`); for an outbox job,
    without a round trip: the last measured offset however old, or this
    host's clock when there is none (the id still sorts, off by the clocks'
    difference). On a cluster, the clock of the node owning ``queue``."""
    from ..protocol.clock import known_now_ms, mint_now_ms

    if not outbox:  # a read: sent again if the connection drops under it
        return repeat_lost(lambda: mint_now_ms(conn, queue))
    # The outbox never waits on the server: the last measured offset,
    # however old, or this host's clock.
    known = known_now_ms(conn, queue)
    return known if known is not None else int(time.time() * 1000)


def uses_outbox(queue: str, route: Route) -> bool:
    """Whether jobs of ``queue`` sent by ``route`` go through the outbox."""
    if route.outbox is not None:
        return route.outbox
    return durability.outbox_covers(get_config().outbox, queue)


def admit(jobs: Jobs, queue: str, items: Sequence[dict], route: Route = DEFAULT_ROUTE,
          single: Callable[[], Outcome] | None = None) -> list[Outcome]:
    """Admit ``items`` (``Jobs.enqueue_many`` items, ids minted) to ``queue``
    by ``route``; returns one Outcome per item. ``single``: the one-job
    admission to send for a lone item at once (the single scripts).

    Raises what the admission raises when it is sent at once (the database's
    errors for an outbox write); a deferred admission's errors surface when
    the transaction commits (Django's on_commit)."""
    if uses_outbox(queue, route):
        _write_outbox(queue, items, route.alias)
        return [Outcome.DEFERRED] * len(items)
    on_commit = get_config().enqueue_on_commit if route.on_commit is None else route.on_commit
    if on_commit and transaction.get_connection(route.alias).in_atomic_block:
        transaction.on_commit(lambda: _send(jobs, queue, items, single), using=route.alias)
        return [Outcome.DEFERRED] * len(items)
    return _send(jobs, queue, items, single)


def _send(jobs: Jobs, queue: str, items: Sequence[dict],
          single: Callable[[], Outcome] | None) -> list[Outcome]:
    """Admit now; a repeat after a lost reply answers ``duplicate`` for a job
    the first try admitted, which is told as what it became. The ids are
    fresh, so a ``duplicate`` can only be such a repeat, ours
    (``repeat_lost``) or the client's own (redis-py's cluster pipeline sends
    the commands a dropped connection failed again, one by one)."""
    if single is not None and len(items) == 1:
        outcomes = [repeat_lost(single)]
    else:
        outcomes = repeat_lost(lambda: jobs.enqueue_many(queue, items))
    outcomes = [_as_admitted(jobs, queue, item["job_id"], outcome)
                for item, outcome in zip(items, outcomes)]
    announce(queue, items, outcomes)
    return outcomes


def announce(queue: str, items: Sequence[dict], outcomes: Sequence[Outcome]) -> None:
    """Send ``job_enqueued`` (docs/observability.md) for each item the bus
    took (``enqueued`` or ``scheduled``; a ``duplicate`` was on the bus
    already). Its path is read from the payload only when someone listens."""
    if not signals.listened(signals.job_enqueued):
        return
    from .payload import decode

    for item, outcome in zip(items, outcomes):
        if outcome not in (Outcome.ENQUEUED, Outcome.SCHEDULED):
            continue
        try:
            path = decode(str(item["payload"]))[0]
        except ValueError:
            path = "?"
        signals.send(signals.job_enqueued, Jobs, queue=queue, job_id=item["job_id"],
                     path=path, outcome=outcome.value, group=item.get("group") or None,
                     priority=item.get("priority") or 0, delay_ms=item.get("delay_ms"),
                     run_at_ms=item.get("run_at_ms"))


def _as_admitted(jobs: Jobs, queue: str, job_id: str, outcome: Outcome) -> Outcome:
    """A fresh id answers ``duplicate`` only to a repeat whose first try went
    through (its reply lost): it was admitted, pending or scheduled."""
    if outcome != Outcome.DUPLICATE:
        return outcome
    row = jobs.get(queue, job_id)
    return Outcome.SCHEDULED if row is not None and row.state == "scheduled" else Outcome.ENQUEUED


def _write_outbox(queue: str, items: Sequence[dict], alias: str) -> None:
    """One OutboxEntry per item in the caller's transaction on ``alias``, and
    after its commit an attempt to admit them at once."""
    from ..models import OutboxEntry

    OutboxEntry.objects.using(alias).bulk_create([OutboxEntry(
        job_id=item["job_id"], queue=queue, payload=str(item["payload"]),
        group=item.get("group"), priority=item.get("priority", 0),
        delay_ms=item.get("delay_ms"), run_at_ms=item.get("run_at_ms")) for item in items])
    ids = [item["job_id"] for item in items]
    transaction.on_commit(lambda: _deliver_soon(alias, queue, ids), using=alias)


#: After the server failed an immediate delivery, this process leaves the
#: outbox to the relay for this long (s): an enqueue never waits on a server
#: that is away.
QUIET_AFTER_FAILURE_S = 1.0
_away_until = 0.0


def _deliver_soon(alias: str, queue: str, job_ids: list[str]) -> None:
    """After the commit: admit these entries now, once, if the server
    answered lately; the relay admits them otherwise. Never raises (the rows
    are safe)."""
    global _away_until
    from ..connection import get_connection
    from ..models import OutboxEntry

    if time.monotonic() < _away_until:
        return
    try:
        with transaction.atomic(using=alias):
            entries = list(OutboxEntry.objects.using(alias).select_for_update(skip_locked=True)
                           .filter(job_id__in=job_ids))
            deliver_entries(Jobs(_quick_client(get_connection(), queue)), entries, alias,
                            tries=1)
    except Exception as err:  # noqa: BLE001 - the relay delivers what is left
        if isinstance(err, redis.RedisError):
            _away_until = time.monotonic() + QUIET_AFTER_FAILURE_S
        log.info("outbox: %d job(s) left for the relay (%s)", len(job_ids), err)


#: How long the send after a commit may wait on the server, s: a server that
#: accepts connections but does not answer costs an enqueue this, once per
#: QUIET_AFTER_FAILURE_S.
QUICK_TIMEOUT_S = 0.25
_quick: tuple[Any, dict] | None = None


def _quick_client(conn: Any, queue: str) -> Any:
    """A client to the server holding ``queue`` (on a cluster, the node owning
    its slot) whose calls give up after :data:`QUICK_TIMEOUT_S`; made once
    per client and node."""
    global _quick
    kept = _quick
    if kept is None or kept[0] is not conn:
        kept = _quick = (conn, {})
    key = Keyspace(queue).base
    node = node_for(conn, key)
    name = None if node is None else node.name
    quick = kept[1].get(name)
    if quick is None:
        quick = kept[1][name] = with_timeout(conn, QUICK_TIMEOUT_S, key)
    return quick


def deliver_entries(jobs: Jobs, entries: Sequence[Any], alias: str,
                    tries: int = LOST_REPLY_TRIES) -> int:
    """Admit ``entries`` (OutboxEntry rows, locked by the caller's
    transaction) with the idempotent batch enqueue, one call per queue, then
    mark them admitted in the queue's epoch (kept until the job ends; see
    :mod:`echomq_django.runtime.relay`); returns how many. An entry whose job
    is on the bus already answers ``duplicate`` (a delivery repeated after a
    crash is a no-op).

    Raises a redis error when the server cannot take them (nothing marked)."""
    from django.utils import timezone

    from ..models import OutboxEntry

    by_queue: dict[str, list[Any]] = {}
    for entry in entries:
        by_queue.setdefault(entry.queue, []).append(entry)
    already = 0
    now = timezone.now()
    for queue, group in by_queue.items():
        epoch = repeat_lost(lambda q=queue: queue_epoch(jobs.conn, q), tries)
        items = [_item(entry) for entry in group]
        outcomes = repeat_lost(lambda q=queue, i=items: jobs.enqueue_many(q, i), tries)
        already += sum(outcome == Outcome.DUPLICATE for outcome in outcomes)
        OutboxEntry.objects.using(alias).filter(pk__in=[e.pk for e in group]).update(
            admitted_at=now, epoch=epoch)
    if already:
        # A repeat after a crash, or two relays on a database without SKIP
        # LOCKED: harmless (the ids), and worth knowing.
        log.info("outbox: %d of %d entries were on the bus already", already, len(entries))
    return len(entries)


def queue_epoch(conn: Any, queue: str) -> str:
    """The queue's epoch (``emq:{q}:epoch``), set now if the server has none
    (first use, or the server lost its data): one ``SET NX GET``."""

    fresh = secrets.token_hex(8)
    old = conn.set(Keyspace(queue).epoch, fresh, nx=True, get=True)
    if old is None:
        return fresh
    return old.decode() if isinstance(old, bytes) else old


def _item(entry: Any) -> dict:
    item = {"job_id": entry.job_id, "payload": entry.payload, "group": entry.group,
            "priority": entry.priority}
    if entry.delay_ms is not None:
        item["delay_ms"] = entry.delay_ms
    elif entry.run_at_ms is not None:
        item["run_at_ms"] = entry.run_at_ms
    return item


def forget_outbox_entry(queue: str, job_id: str) -> None:
    """Delete ``job_id``'s outbox entry, if any (a job deleted in the admin is
    not admitted again). Never raises: a project without the outbox table has
    nothing to forget."""
    from django.db import router

    from ..models import OutboxEntry

    try:
        OutboxEntry.objects.using(router.db_for_write(OutboxEntry)).filter(
            queue=queue, job_id=job_id).delete()
    except Exception as err:  # noqa: BLE001 - no table, no database, no access: nothing kept
        log.debug("outbox: no entry of %s to forget (%s)", job_id, err)
