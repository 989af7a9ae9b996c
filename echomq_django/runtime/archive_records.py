"""The archive's database side: a job row as a ``JobRecord``, the batch
insert, and retention (docs/archive.md). The archiver
(:mod:`echomq_django.runtime.archiver`) reads the bus; this module only
touches the database.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from typing import Any

from django.db import DataError, connections, router

from ..api import payload as envelope
from ..models import JobRecord
from ..protocol.records import JobRow

log = logging.getLogger("echomq.archive")

__all__ = ["record_of", "bulk_insert", "prune", "FINAL_STATES", "message_of"]

#: The states a job ends in; a row in another state runs again.
FINAL_STATES = frozenset({"done", "dead", "cancelled"})
#: The fields a second archive of the same job rewrites (a dead letter retried
#: from the admin that ends again: its record says how it ended last).
_UPDATED = ["lane", "function", "args", "kwargs", "state", "reason", "attempts", "errors",
            "result", "enqueued_at", "started_at", "finished_at", "worker"]
#: Rows deleted per DELETE of retention, and most DELETEs per retention run.
PRUNE_CHUNK = 5_000
PRUNE_ROUNDS = 20


def _at(ms: int | None) -> dt.datetime | None:
    """Server ms as an aware UTC datetime (None stays None)."""
    return None if ms is None else dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)


def message_of(traceback: str) -> str:
    """An error's one-line message: the traceback's last non-blank line
    (``"ValueError: bad input"``), ``""`` for an empty text."""
    lines = [line for line in traceback.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _call(text: str) -> tuple[str, list, dict]:
    """(function, args, kwargs) of a payload: the ``@job`` envelope's, or for
    a payload that is not one (a raw ``Jobs.enqueue``), ``("", [value], {})``
    with the JSON value (or the text, if it is not JSON)."""
    try:
        function, args, kwargs, _ = envelope.decode(text)
        return function, args, kwargs
    except ValueError:
        pass
    try:
        return "", [json.loads(text)], {}
    except ValueError:
        return "", [text], {}


def record_of(row: JobRow) -> dict | None:
    """The ``JobRecord`` fields (a dict, field name -> Python value) of an
    ended job's row, or None when the row is not in a final state (done,
    dead, cancelled): the job was revived and its next end brings its own
    event. ``started_at`` is when attempt 1 began, ``worker`` who ran the
    last attempt, and each error's ``message`` its traceback's last line."""
    if row.state not in FINAL_STATES:
        return None
    function, args, kwargs = _call(row.payload)
    try:
        result = row.result_value
    except ValueError:
        result = row.result
    errors = [{"attempt": e.attempt, "class": e.error_class, "message": message_of(e.traceback),
               "traceback": e.traceback} for e in row.errors]
    worker = row.workers[-1] if row.workers else (row.consumer or "")
    return {"job_id": row.job_id, "queue": row.queue, "lane": row.group or "",
            "function": function[:300], "args": args, "kwargs": kwargs, "state": row.state,
            "reason": row.reason or "", "attempts": row.attempts, "errors": errors,
            "result": result, "enqueued_at": _at(row.enqueued_at_ms),
            "started_at": _at(row.first_started_at_ms or row.started_at_ms),
            "finished_at": _at(row.finished_at_ms), "worker": worker[:200]}


#: The columns the fast path writes, in order.
_COLUMNS = ["job_id", "queue", *_UPDATED, "archived_at"]
_JSON = frozenset({"args", "kwargs", "errors", "result"})
_TIMES = frozenset({"enqueued_at", "started_at", "finished_at", "archived_at"})


def _upsert_sql(conn) -> str:
    """INSERT ... ON CONFLICT (queue, job_id) DO UPDATE: the same text on
    PostgreSQL and SQLite (>= 3.24)."""
    quote = conn.ops.quote_name
    table = quote(JobRecord._meta.db_table)
    cols = ", ".join(quote(JobRecord._meta.get_field(c).column) for c in _COLUMNS)
    marks = ", ".join(["%s"] * len(_COLUMNS))
    sets = ", ".join(f"{quote(c)} = excluded.{quote(c)}" for c in _UPDATED)
    return (f"INSERT INTO {table} ({cols}) VALUES ({marks}) "
            f"ON CONFLICT ({quote('queue')}, {quote('job_id')}) DO UPDATE SET {sets}")


def bulk_insert(records: list[dict]) -> None:
    """Insert ``records`` (:func:`record_of`'s dicts); a record whose
    ``(queue, job_id)`` exists already is rewritten (a redelivered event
    changes nothing; a dead letter retried from the admin that ends again is
    recorded as it ended last). On PostgreSQL and SQLite one executemany of
    an upsert, in one transaction; elsewhere ``bulk_create`` (rewriting where
    the database can, else leaving the first record). Raises DatabaseError
    (nothing of the failed batch is kept)."""
    from django.db import transaction

    latest = {(r["queue"], r["job_id"]): r for r in records}   # one statement, one row each
    alias = router.db_for_write(JobRecord)
    conn = connections[alias]
    now = dt.datetime.now(dt.timezone.utc)
    if conn.vendor in ("postgresql", "sqlite"):
        postgres = conn.vendor == "postgresql"

        def value(record, column):
            v = now if column == "archived_at" else record[column]
            if column in _JSON:
                if v is None and column == "result":
                    return None
                text = json.dumps(v)
                # PostgreSQL's text and jsonb hold no NUL: U+FFFD stands in.
                return text.replace("\\u0000", "\\ufffd") if postgres else text
            if column in _TIMES:
                return conn.ops.adapt_datetimefield_value(v)
            if postgres and isinstance(v, str):
                return v.replace("\x00", "\ufffd")
            return v

        rows = []
        for n, record in enumerate(latest.values()):
            if n % 16 == 15:
                time.sleep(0)   # yield the GIL to the consumers' threads (archiver.YIELD_EVERY)
            rows.append([value(record, c) for c in _COLUMNS])
        try:
            with transaction.atomic(using=alias), conn.cursor() as cursor:
                cursor.executemany(_upsert_sql(conn), rows)
        except DataError:
            # A record the database refuses must not hold the queue's archive
            # back: the others are written one by one and it is set aside.
            _insert_one_by_one(conn, alias, rows)
        return
    objs = [JobRecord(**r) for r in latest.values()]
    if conn.features.supports_update_conflicts_with_target:
        JobRecord.objects.bulk_create(objs, batch_size=500, update_conflicts=True,
                                      unique_fields=["queue", "job_id"], update_fields=_UPDATED)
    else:
        JobRecord.objects.bulk_create(objs, batch_size=500, ignore_conflicts=True)


def _insert_one_by_one(conn: Any, alias: str, rows: list[list]) -> None:
    """Each row in a savepoint of its own; one the database refuses
    (DataError) is logged and skipped."""
    from django.db import transaction

    sql = _upsert_sql(conn)
    with transaction.atomic(using=alias):
        for row in rows:
            try:
                with transaction.atomic(using=alias), conn.cursor() as cursor:
                    cursor.execute(sql, row)
            except DataError as err:
                log.error("archive: the database refused the record of job %s on queue %s "
                          "(%s); it is not archived", row[0], row[1], err)


def _delete_ids(ids: list[Any]) -> int:
    return JobRecord.objects.filter(pk__in=ids).delete()[0] if ids else 0


def prune(cutoff_ms: int, most: int) -> int:
    """Retention: delete the records that finished before ``cutoff_ms``
    (Unix ms) and the oldest (by ``finished_at``) beyond ``most``, at most
    PRUNE_CHUNK x PRUNE_ROUNDS rows per call, so one call never holds the
    table long (the next run goes on). Returns how many were deleted.
    Raises DatabaseError."""
    deleted, rounds = 0, 0
    old = JobRecord.objects.filter(finished_at__lt=_at(cutoff_ms)).order_by("finished_at", "id")
    while rounds < PRUNE_ROUNDS:
        rounds += 1
        done = _delete_ids(list(old.values_list("pk", flat=True)[:PRUNE_CHUNK]))
        deleted += done
        if done < PRUNE_CHUNK:
            break
    while rounds < PRUNE_ROUNDS:
        rounds += 1
        excess = JobRecord.objects.count() - most
        if excess <= 0:
            break
        oldest = JobRecord.objects.order_by("finished_at", "id").values_list("pk", flat=True)
        deleted += _delete_ids(list(oldest[:min(excess, PRUNE_CHUNK)]))
    return deleted
