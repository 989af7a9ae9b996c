"""The job page: every field of one job's row, its progress, every attempt
with its worker and error, its payload and result, and its timeline
(docs/admin.md, "Job detail"). Permissions and the live refresh as the other
pages (:mod:`.views`)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.http import Http404

from .. import rules
from ..connection import get_connection
from ..protocol.records import JobRow
from . import reads
from .present import fmt_ms, lane_label, rel, span
from .views import _render, lane_url, queue_or_404, require_view, set_url

__all__ = ["Attempt", "attempts", "job"]


@dataclass(frozen=True)
class Attempt:
    """One attempt of a job as its page lists it: ``number`` (from 1), the
    ``worker`` that ran it ("" when not recorded), ``outcome`` (``failed``,
    ``running``, ``done``, ``dead``, ``cancelled`` or ``no error recorded``:
    a stalled, released or snoozed attempt, or one whose outcome is the
    row's and not kept per attempt), and for a failed one its
    ``error_class`` (dotted path; "" when the failure named none),
    ``message`` (the traceback's last line that is not blank) and
    ``traceback``."""

    number: int
    worker: str
    outcome: str
    error_class: str = ""
    message: str = ""
    traceback: str = ""


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def attempts(row: JobRow) -> list[Attempt]:
    """Every attempt of ``row``, first to last: the claims it counts
    (``attempts``), the workers recorded (``worker.<n>``) and the errors
    kept (``error.<n>``, ``error_class.<n>``), whichever reach furthest."""
    errors = {e.attempt: e for e in row.errors}
    last = max([row.attempts, len(row.workers), *errors], default=0)
    out = []
    for n in range(1, last + 1):
        worker = row.workers[n - 1] if n <= len(row.workers) else ""
        error = errors.get(n)
        if error is not None:
            out.append(Attempt(n, worker, "failed", error.error_class,
                               _last_line(error.traceback), error.traceback))
            continue
        outcome = "no error recorded"
        if n == last:
            outcome = {"active": "running", "done": "done", "dead": "dead",
                       "cancelled": "cancelled"}.get(row.state, outcome)
        out.append(Attempt(n, worker, outcome))
    return out


def job(request, model_admin, queue: str, job_id: str):
    """Every field of one job's row, its payload pretty-printed and its timeline.
    404 for an id that breaks the job-id rule: no job can have it."""
    require_view(request, model_admin)
    queue = queue_or_404(queue)
    try:
        rules.check_job_id(job_id)
    except ValueError:
        raise Http404(f"no job {job_id!r}: not a job id ({rules.JOB_ID_RULE})") from None
    detail = reads.job_detail(get_connection(), queue, job_id)
    if detail is None:
        raise Http404(f"no job {job_id} in queue {queue} (never existed, or expired)")
    row, now = detail.row, detail.now_ms
    try:
        payload = json.dumps(json.loads(row.payload), indent=2, sort_keys=True,
                             ensure_ascii=False)
    except ValueError:
        payload = row.payload
    try:
        result = json.dumps(json.loads(row.result), indent=2, ensure_ascii=False) if row.result else ""
    except ValueError:
        result = row.result
    # In time order: a retried job failed before its last claim started. Equal
    # times keep the order of a job's life (sorted is stable).
    events = sorted(((label, ms) for label, ms in (
        ("enqueued", row.enqueued_at_ms),
        ("due (run-at)", row.run_at_ms),
        ("started (last claim)", row.started_at_ms),
        ("last failure", row.failed_at_ms),
        ("lease deadline", row.lease_until_ms),
        ("finished", row.finished_at_ms),
    ) if ms is not None), key=lambda event: event[1])
    timeline = [(label, fmt_ms(ms), rel(ms, now)) for label, ms in events]
    skip = {"payload", "result", "last_error", "workers", "errors"}
    fields = sorted((k, v) for k, v in {
        **{f: getattr(row, f) for f in row.__dataclass_fields__
           if f not in ("queue", "job_id", "extra")},
        **row.extra}.items() if v is not None and k not in skip)
    return _render(request, model_admin, "admin/echomq_django/job.html",
                   "admin/echomq_django/_job.html", f"Job {job_id}", {
                       "queue": queue, "job_id": job_id, "row": row, "detail": detail,
                       "attempts": attempts(row),
                       "progress_at": rel(row.progress_at_ms, now) if row.progress_at_ms else "",
                       "payload": payload, "result": result, "timeline": timeline,
                       "fields": fields,
                       "sets": [(s, lane_url(queue, row.group) if s == "pending"
                                 else set_url(queue, s),
                                 fmt_ms(score) if s != "pending" else "")
                                for s, score in detail.sets.items()],
                       "lane": lane_label(row.group),
                       "lane_url": lane_url(queue, row.group),
                       "ttl": span(detail.ttl_ms) if detail.ttl_ms is not None else "",
                       "now": fmt_ms(now),
                   })
