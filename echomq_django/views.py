"""The admin dashboard's views: the overview, one set browser for every set,
the job detail and the actions (docs/admin.md).

They are mounted by :class:`echomq_django.admin.QueueAdmin` inside the admin
site, so ``admin_view`` sends anonymous users to the admin login and applies
CSRF protection; each view then checks the model permissions itself:
``view_queue`` to see (else 403), ``change_queue`` to act (else 403). GET
never changes state: actions accept POST only (405 otherwise), and the
destructive ones answer a first POST with a confirmation page.

A page asked for with ``?fragment=1`` returns only its live part (marked with
the ``X-EchoMQ-Live: 1`` header); ``static/echomq_django/live.js`` swaps it in
every couple of seconds.
"""

from __future__ import annotations

import datetime as dt
import json
from zoneinfo import ZoneInfo

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme

from . import dashboard
from .actions import Actions
from .conf import get_config
from .connection import get_connection
from .exceptions import NoSuchJobError

#: How often the pages refresh themselves (ms); the template hands it to live.js.
REFRESH_MS = 2000

_UTC = dt.timezone.utc


# -- presentation helpers -------------------------------------------------------


def fmt_ms(ms: int | None, zone=None) -> str:
    """A Unix ms instant as ``YYYY-MM-DD HH:MM:SS`` in ``zone`` (default: the
    current Django time zone); "" for None."""
    if ms is None:
        return ""
    when = dt.datetime.fromtimestamp(ms / 1000, _UTC)
    when = when.astimezone(zone) if zone is not None else timezone.localtime(when)
    return when.strftime("%Y-%m-%d %H:%M:%S")


def span(ms: int) -> str:
    """A duration in ms, short: ``850 ms``, ``42 s``, ``3 min 5 s``, ``2 h 4 min``, ``3 d 1 h``."""
    ms = abs(int(ms))
    if ms < 1000:
        return f"{ms} ms"
    s = ms // 1000
    if s < 60:
        return f"{s} s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m} min {s} s" if s else f"{m} min"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h} h {m} min" if m else f"{h} h"
    d, h = divmod(h, 24)
    return f"{d} d {h} h" if h else f"{d} d"


def rel(ms: int | None, now_ms: int) -> str:
    """``in 3 min`` or ``5 s ago`` relative to the server's now; "" for None."""
    if ms is None:
        return ""
    delta = ms - now_ms
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def _bars(values: list[int], width: float, height: float) -> tuple[list[dict], int]:
    peak = max(values, default=0)
    step = width / max(len(values), 1)
    bars = []
    for i, value in enumerate(values):
        h = 0 if not peak else max(1.0, value / peak * height) if value else 0
        bars.append({"x": round(i * step, 2), "y": round(height - h, 2), "w": round(step * 0.8, 2),
                     "h": round(h, 2), "value": value})
    return bars, peak


def activity_chart(q: dashboard.QueueSummary, now_ms: int) -> dict:
    """The last hour's done (up) and failed (down) per minute as SVG bar data."""
    half = 22
    first_minute = now_ms // 60_000 - len(q.done) + 1
    done, peak_done = _bars(q.done, 240, half)
    failed, peak_failed = _bars(q.failed, 240, half)
    minutes = []
    for i, (d, f) in enumerate(zip(done, failed)):
        label = fmt_ms((first_minute + i) * 60_000)[11:16]
        minutes.append({"x": d["x"], "w": d["w"], "done_y": d["y"], "done_h": d["h"],
                        "failed_y": half + 2, "failed_h": f["h"],
                        "title": f"{label}: {d['value']} done, {f['value']} failed"})
    return {"minutes": minutes, "total_done": sum(q.done), "total_failed": sum(q.failed),
            "peak_done": peak_done, "peak_failed": peak_failed, "mid": half + 1}


def schedule_histogram(q: dashboard.QueueSummary) -> dict:
    """The next hour's schedule per bucket as SVG bar data."""
    bars, peak = _bars(q.upcoming, 240, 44)
    minutes = dashboard.BUCKET_MS // 60_000
    for i, bar in enumerate(bars):
        bar["title"] = f"in {i * minutes}-{(i + 1) * minutes} min: {bar['value']} scheduled"
    return {"bars": bars, "peak": peak, "total": sum(q.upcoming), "bucket_min": minutes}


# -- plumbing -----------------------------------------------------------------------


def _require_view(request, model_admin) -> None:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied


def _queue_or_404(queue: str) -> str:
    try:
        return dashboard.check_queue(queue)
    except ValueError:
        raise Http404(f"no queue {queue!r}") from None


def _here(request) -> str:
    """This page's path and query without the live ``fragment`` flag."""
    query = request.GET.copy()
    query.pop("fragment", None)
    encoded = query.urlencode()
    return request.path + (f"?{encoded}" if encoded else "")


def _render(request, model_admin, template: str, fragment: str, title: str, context: dict):
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": opts,
        "app_label": opts.app_label,
        "title": title,
        "here": _here(request),
        "can_change": model_admin.has_change_permission(request),
        "refresh_ms": REFRESH_MS,
        "fragment_template": fragment,
        **context,
    }
    if request.GET.get("fragment"):
        response = TemplateResponse(request, fragment, context)
        response["X-EchoMQ-Live"] = "1"
        return response
    return TemplateResponse(request, template, context)


def set_url(queue: str, set_name: str) -> str:
    return reverse("admin:echomq_django_set", args=[queue, set_name])


def job_url(queue: str, job_id: str) -> str:
    return reverse("admin:echomq_django_job", args=[queue, job_id])


# -- pages ------------------------------------------------------------------------


def overview(request, model_admin):
    """Every queue's counts, paused flag, activity chart and schedule
    histogram, and the live runechomq processes. ``?queue=<name>`` opens a
    queue that is neither configured nor served (its pending page)."""
    _require_view(request, model_admin)
    wanted = request.GET.get("queue", "").strip()
    if wanted:
        try:
            dashboard.check_queue(wanted)
        except ValueError as err:
            messages.error(request, str(err))
            return HttpResponseRedirect(request.path)
        return HttpResponseRedirect(set_url(wanted, "pending"))
    data = dashboard.overview(get_connection(), get_config().queues)
    queues = [{
        "q": q,
        "chart": activity_chart(q, data.now_ms),
        "histogram": schedule_histogram(q),
        "paused_for": rel(q.paused_at_ms, data.now_ms) if q.paused else "",
    } for q in data.queues]
    workers = [{
        "w": w,
        "heartbeat_age": span(data.now_ms - w.heartbeat_ms) if w.heartbeat_ms else "",
        "up_for": span(data.now_ms - w.started_at_ms) if w.started_at_ms else "",
    } for w in data.workers]
    return _render(request, model_admin, "admin/echomq_django/overview.html",
                   "admin/echomq_django/_overview.html", "EchoMQ queues", {
                       "data": data, "queues": queues, "workers": workers,
                       "now": fmt_ms(data.now_ms), "sets": dashboard.SETS,
                   })


def _int_param(request, name: str, default: int, high: int) -> int:
    try:
        value = int(request.GET.get(name, default))
    except ValueError:
        return default
    return min(max(value, 1), high)


def set_view(request, model_admin, queue: str, set_name: str):
    """One page of one set (the same view and template for all five).
    ``?page=N`` pages by rank; ``?id=<job id>`` opens that job's detail."""
    _require_view(request, model_admin)
    queue = _queue_or_404(queue)
    if set_name not in dashboard.SETS:
        raise Http404(f"no set {set_name!r}")
    conn = get_connection()
    wanted = request.GET.get("id", "").strip()
    if wanted:
        if dashboard.job_exists(conn, queue, wanted):
            return HttpResponseRedirect(job_url(queue, wanted))
        messages.error(request, f"No job {wanted} in queue {queue} (never existed, or expired).")
        return HttpResponseRedirect(request.path)
    page = _int_param(request, "page", 1, 10**9)
    per_page = _int_param(request, "per_page", dashboard.PAGE_SIZE, dashboard.MAX_PAGE_SIZE)
    data = dashboard.set_page(conn, queue, set_name, page, per_page)
    now = data.now_ms
    rows = []
    for r in data.rows:
        if set_name == "repeat":
            e = r.entry
            zone = None
            if e is not None:
                try:
                    zone = ZoneInfo(e.tz)
                except (KeyError, ValueError):
                    zone = None
            rows.append({
                "r": r, "e": e,
                "next_local": fmt_ms(r.next_run_ms, zone) if zone else "",
                "next_utc": fmt_ms(r.next_run_ms, _UTC),
                "next_rel": rel(r.next_run_ms, now),
                "last_run": fmt_ms(e.last_run_ms) if e else "",
                "last_rel": rel(e.last_run_ms, now) if e else "",
                "every": span(e.every_ms) if e and e.every_ms else "",
            })
        else:
            rows.append({
                "r": r,
                "score": fmt_ms(r.score_ms) if set_name != "pending" else "",
                "score_rel": rel(r.score_ms, now) if set_name != "pending" else "",
                "enqueued": fmt_ms(r.enqueued_at_ms),
                "enqueued_rel": rel(r.enqueued_at_ms, now),
                "started_rel": rel(r.started_at_ms, now),
                "url": job_url(queue, r.job_id),
            })
    base = request.path
    pager = {
        "prev": f"{base}?page={page - 1}" if page > 1 else "",
        "next": f"{base}?page={page + 1}" if page < data.pages else "",
        "first": f"{base}?page=1" if page > 1 else "",
        "last": f"{base}?page={data.pages}" if page < data.pages else "",
        "from": data.first_index + 1 if data.rows else 0,
        "to": data.first_index + len(data.rows),
    }
    tabs = [{"name": s, "count": data.counts[s], "url": set_url(queue, s),
             "current": s == set_name} for s in dashboard.SETS]
    return _render(request, model_admin, "admin/echomq_django/set.html",
                   "admin/echomq_django/_set.html", f"{queue}: {set_name}", {
                       "queue": queue, "set_name": set_name, "data": data, "rows": rows,
                       "pager": pager, "tabs": tabs,
                       "paused_for": rel(data.paused_at_ms, now) if data.paused_at_ms else "",
                       "now": fmt_ms(now),
                   })


def job(request, model_admin, queue: str, job_id: str):
    """Every field of one job's row, its payload pretty-printed and its timeline."""
    _require_view(request, model_admin)
    queue = _queue_or_404(queue)
    detail = dashboard.job_detail(get_connection(), queue, job_id)
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
    timeline = [(label, fmt_ms(ms), rel(ms, now)) for label, ms in (
        ("enqueued", row.enqueued_at_ms),
        ("scheduled for", row.run_at_ms),
        ("started (last claim)", row.started_at_ms),
        ("last failure", row.failed_at_ms),
        ("lease deadline", row.lease_until_ms),
        ("finished", row.finished_at_ms),
    ) if ms is not None]
    skip = {"payload", "result", "last_error"}
    fields = sorted((k, v) for k, v in {
        **{f: getattr(row, f) for f in row.__dataclass_fields__
           if f not in ("queue", "job_id", "extra")},
        **row.extra}.items() if v is not None and k not in skip)
    return _render(request, model_admin, "admin/echomq_django/job.html",
                   "admin/echomq_django/_job.html", f"Job {job_id}", {
                       "queue": queue, "job_id": job_id, "row": row, "detail": detail,
                       "payload": payload, "result": result, "timeline": timeline,
                       "fields": fields,
                       "sets": [(s, fmt_ms(score) if s != "pending" else "")
                                for s, score in detail.sets.items()],
                       "ttl": span(detail.ttl_ms) if detail.ttl_ms is not None else "",
                       "now": fmt_ms(now),
                   })


# -- actions ------------------------------------------------------------------------

#: action name -> (needs, destructive, question for the confirmation page)
ACTIONS = {
    "run_now": ("job", False, ""),
    "retry": ("job", False, ""),
    "cancel": ("job", True, "Cancel job {target}? A pending or scheduled job never runs; "
                            "a running one is asked to stop."),
    "delete": ("job", True, "Delete job {target}? Its row and its place in every set are "
                            "removed for good."),
    "pause": ("", False, ""),
    "resume": ("", False, ""),
    "retry_all_dead": ("", True, "Retry every dead letter of queue {queue}? Each goes back "
                                 "to pending with its attempts reset."),
    "purge_dead": ("", True, "Purge every dead letter of queue {queue}? Their rows are "
                             "deleted for good."),
    "repeat_run_now": ("name", False, ""),
    "repeat_remove": ("name", True, "Remove the recurring schedule {target}? Jobs it "
                                    "already minted are kept."),
}


def action(request, model_admin, queue: str, name: str):
    """Run one action (POST with CSRF; change permission) and say what it did
    in an admin message; then go back to ``next`` (a local URL) or the queue.
    A destructive action's first POST renders the confirmation page; the
    second, with ``confirm=yes``, acts."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    _require_view(request, model_admin)
    if not model_admin.has_change_permission(request):
        raise PermissionDenied
    queue = _queue_or_404(queue)
    if name not in ACTIONS:
        raise Http404(f"no action {name!r}")
    needs, destructive, question = ACTIONS[name]
    target = request.POST.get(needs, "").strip() if needs else ""
    if needs and not target:
        messages.error(request, f"{name}: no {needs} given.")
        return _back(request, queue)
    if destructive and request.POST.get("confirm") != "yes":
        opts = model_admin.model._meta
        return TemplateResponse(request, "admin/echomq_django/confirm.html", {
            **model_admin.admin_site.each_context(request),
            "opts": opts, "app_label": opts.app_label, "title": "Are you sure?",
            "queue": queue, "action": name, "needs": needs, "target": target,
            "question": question.format(queue=queue, target=target),
            "next": _next(request, queue),
        })
    level, text = _do(Actions(get_connection()), name, queue, target)
    messages.add_message(request, level, text)
    return _back(request, queue)


def _do(acts: Actions, name: str, queue: str, target: str) -> tuple[int, str]:
    ok, warn = messages.SUCCESS, messages.WARNING
    if name == "run_now":
        outcome = acts.run_now(queue, target)
        return {"moved": (ok, f"Job {target} moved from schedule to pending; it runs next."),
                "not scheduled": (warn, f"Job {target} is not scheduled; nothing changed."),
                "gone": (warn, f"Job {target} had expired; its schedule entry was dropped.")
                }[outcome]
    if name == "retry":
        outcome = acts.retry_dead(queue, target)
        return {"moved": (ok, f"Job {target} moved from dead to pending with attempts reset."),
                "not dead": (warn, f"Job {target} is not dead; nothing changed."),
                "gone": (warn, f"Job {target} had expired; its dead entry was dropped.")
                }[outcome]
    if name == "cancel":
        try:
            outcome = acts.cancel(queue, target)
        except NoSuchJobError:
            return warn, f"No job {target}; nothing changed."
        return {"cancelled": (ok, f"Job {target} cancelled; it will not run."),
                "flagged": (ok, f"Job {target} is running; it was asked to stop."),
                "finished": (warn, f"Job {target} had finished already; nothing changed.")
                }[outcome]
    if name == "delete":
        outcome = acts.delete(queue, target)
        return {"deleted": (ok, f"Job {target} deleted."),
                "not found": (warn, f"No job {target}; nothing changed."),
                "running": (warn, f"Job {target} is running; cancel it instead. Nothing changed.")
                }[outcome]
    if name == "pause":
        return ((ok, f"Queue {queue} paused: consumers stop claiming; scheduled jobs are "
                     "still promoted.") if acts.pause(queue)
                else (warn, f"Queue {queue} was paused already."))
    if name == "resume":
        return ((ok, f"Queue {queue} resumed.") if acts.resume(queue)
                else (warn, f"Queue {queue} was not paused."))
    if name == "retry_all_dead":
        return ok, f"{acts.retry_all_dead(queue)} dead job(s) of {queue} moved back to pending."
    if name == "purge_dead":
        return ok, f"{acts.purge_dead(queue)} dead job(s) of {queue} purged."
    if name == "repeat_run_now":
        try:
            job_id = acts.run_repeat_now(queue, target)
        except LookupError as err:
            return warn, f"{err}; nothing changed."
        except ValueError as err:
            return messages.ERROR, f"Schedule {target}: {err}"
        return ok, f"Schedule {target} ran now as job {job_id} (its next run is unchanged)."
    if name == "repeat_remove":
        try:
            removed = acts.remove_repeat(queue, target)
        except ValueError as err:
            return messages.ERROR, f"Schedule {target}: {err}"
        return ((ok, f"Schedule {target} removed.") if removed
                else (warn, f"No schedule {target}; nothing changed."))
    raise AssertionError(name)  # ACTIONS and _do list the same names


def _next(request, queue: str) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return set_url(queue, "pending")


def _back(request, queue: str):
    return HttpResponseRedirect(_next(request, queue))
