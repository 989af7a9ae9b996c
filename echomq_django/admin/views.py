"""The admin dashboard's pages: the overview, one set browser for every set,
a queue's lanes, and the job detail (docs/admin.md). The actions' views are
:mod:`.dispatch`.

They are mounted by :class:`echomq_django.admin.site.QueueAdmin` inside the admin
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

from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from .. import rules
from ..conf import get_config
from ..connection import get_connection
from . import reads
from .history import history_url
from .reads.search import (SEARCH_WINDOW, SEARCHABLE, Filters, SearchPage, check_filters,
                           search_page)
from .charts import latency_chart, throughput_chart
from .present import (UTC, arguments, fmt_ms, lane_label, limits, rel, schedule_histogram,
                      span)

#: How often the pages refresh themselves (ms); the template hands it to live.js.
REFRESH_MS = 2000


# -- plumbing -----------------------------------------------------------------------


def require_view(request, model_admin) -> None:
    if not model_admin.has_view_permission(request):
        raise PermissionDenied


def queue_or_404(queue: str) -> str:
    try:
        return rules.check_queue_name(queue)
    except ValueError:
        raise Http404(f"no queue {queue!r}") from None


def here_url(request) -> str:
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
        "here": here_url(request),
        "can_change": model_admin.has_change_permission(request),
        "history": history_url(request),
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


def lane_url(queue: str, lane: str | None) -> str:
    """The pending page of one lane (the ungrouped lane: the pending page)."""
    url = set_url(queue, "pending")
    return f"{url}?{urlencode({'lane': lane})}" if lane else url


def lanes_url(queue: str) -> str:
    return reverse("admin:echomq_django_lanes", args=[queue])


def _tab_url(queue: str, name: str) -> str:
    return lanes_url(queue) if name == "lanes" else set_url(queue, name)


def _queue_head(queue: str, head: reads.QueueHead, current: str) -> dict:
    """The context of the head every queue page shares
    (``_queue_head.html``): the status line, the limits and the tabs."""
    # Staff may open any queue by name; one that is not configured, not served
    # and holds nothing is a typo or a queue gone, not an empty queue.
    unknown = head.holds_nothing and not head.served and queue not in get_config().queues
    return {
        "head": head,
        "unknown": unknown,
        "paused_for": rel(head.paused_at_ms, head.now_ms) if head.paused_at_ms else "",
        "limits": limits(head.limits),
        "tabs": [{"name": t, "count": head.counts[t], "url": _tab_url(queue, t),
                  "current": t == current} for t in reads.TABS],
        "now": fmt_ms(head.now_ms),
    }


def job_url(queue: str, job_id: str) -> str:
    return reverse("admin:echomq_django_job", args=[queue, job_id])


# -- pages ------------------------------------------------------------------------


def overview(request, model_admin):
    """Every queue's counts, paused flag, activity chart and schedule
    histogram, and the live runechomq processes. ``?queue=<name>`` opens a
    queue that is neither configured nor served (its pending page)."""
    require_view(request, model_admin)
    wanted = request.GET.get("queue", "").strip()
    if wanted:
        try:
            rules.check_queue_name(wanted)
        except ValueError as err:
            messages.error(request, str(err))
            return HttpResponseRedirect(request.path)
        return HttpResponseRedirect(set_url(wanted, "pending"))
    data = reads.overview(get_connection(), get_config().queues)
    first_minute = data.now_ms // 60_000 - reads.HISTORY_MINUTES + 1
    queues = [{
        "q": q,
        "throughput": throughput_chart(q.done, q.failed, q.died, first_minute),
        "latency": latency_chart(q.latency_ms, first_minute),
        "histogram": schedule_histogram(q),
        "paused_for": rel(q.paused_at_ms, data.now_ms) if q.paused else "",
        "limits": limits(q.limits),
        "lanes_url": lanes_url(q.name),
    } for q in data.queues]
    workers = [{
        "w": w,
        "heartbeat_age": span(data.now_ms - w.heartbeat_ms) if w.heartbeat_ms else "",
        "up_for": span(data.now_ms - w.started_at_ms) if w.started_at_ms else "",
    } for w in data.workers]
    return _render(request, model_admin, "admin/echomq_django/overview.html",
                   "admin/echomq_django/_overview.html", "EchoMQ queues", {
                       "data": data, "queues": queues, "workers": workers,
                       "now": fmt_ms(data.now_ms), "sets": reads.SETS,
                   })


def _int_param(request, name: str, default: int, high: int) -> int:
    try:
        value = int(request.GET.get(name, default))
    except ValueError:
        return default
    return min(max(value, 1), high)


def _pager(base: str, query: dict, page: int, data) -> dict:
    def at(number):
        return f"{base}?{urlencode({**query, 'page': number})}"

    return {
        "prev": at(page - 1) if page > 1 else "",
        "next": at(page + 1) if page < data.pages else "",
        "first": at(1) if page > 1 else "",
        "last": at(data.pages) if page < data.pages else "",
        "from": data.first_index + 1 if data.rows else 0,
        "to": data.first_index + len(data.rows),
    }


def set_view(request, model_admin, queue: str, set_name: str):
    """One page of one set (the same view and template for all five).
    ``?page=N`` pages by rank; ``?id=<job id>`` opens that job's detail;
    on pending, ``?lane=<group>`` shows that lane (default: the ungrouped
    lane)."""
    require_view(request, model_admin)
    queue = queue_or_404(queue)
    if set_name not in reads.SETS:
        raise Http404(f"no set {set_name!r}")
    conn = get_connection()
    wanted = request.GET.get("id", "").strip()
    if wanted:
        if reads.job_exists(conn, queue, wanted):
            return HttpResponseRedirect(job_url(queue, wanted))
        messages.error(request, f"No job {wanted} in queue {queue} (never existed, or expired).")
        return HttpResponseRedirect(request.path)
    wanted_set = request.GET.get("state", "").strip()
    if wanted_set and wanted_set != set_name and wanted_set in SEARCHABLE:
        # The filter bar's "state": the same search on another set.
        query = request.GET.copy()
        for name in ("state", "from", "page"):
            query.pop(name, None)
        encoded = query.urlencode()
        return HttpResponseRedirect(set_url(queue, wanted_set) + (f"?{encoded}" if encoded else ""))
    try:
        filters = check_filters(request.GET.get("function", ""), request.GET.get("lane", ""),
                                request.GET.get("text", ""))
    except ValueError:
        raise Http404("no such lane, or a filter over 200 characters") from None
    lane = filters.lane if set_name == "pending" else None
    page = _int_param(request, "page", 1, 10**9)
    per_page = _int_param(request, "per_page", reads.PAGE_SIZE, reads.MAX_PAGE_SIZE)
    searching = set_name in SEARCHABLE and (filters.function or filters.text
                                            or (filters.lane and set_name != "pending"))
    if searching:
        start = _int_param(request, "from", 1, 10**12) - 1
        data = search_page(conn, queue, set_name, Filters(
            filters.function, None if set_name == "pending" else filters.lane, filters.text),
            start, per_page, lane=lane)
    else:
        data = reads.set_page(conn, queue, set_name, page, per_page, lane=lane)
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
                "next_utc": fmt_ms(r.next_run_ms, UTC),
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
                "args": arguments(r.payload),
                # A branded id may wrap between its time and its counter.
                "id_head": r.job_id[:13], "id_tail": r.job_id[13:],
                "url": job_url(queue, r.job_id),
                "lane_url": lane_url(queue, r.group) if r.group else "",
            })
    choices = [{"name": name, "label": lane_label(name), "count": count,
                "url": lane_url(queue, name), "current": name == (lane or "")}
               for name, count in data.lane_choices]
    return _render(request, model_admin, "admin/echomq_django/set.html",
                   "admin/echomq_django/_set.html", f"{queue}: {set_name}", {
                       **_queue_head(queue, data.head, set_name),
                       "queue": queue, "set_name": set_name, "data": data, "rows": rows,
                       "pager": _pager(request.path, {"lane": lane} if lane else {}, page, data),
                       **_search_context(request, queue, set_name, filters, data),
                       "lane": lane, "lane_label": lane_label(lane), "lane_choices": choices,
                       "more_lanes": data.head.counts["lanes"] - len(choices),
                       "ungrouped_listed": any(c["name"] == "" for c in choices),
                       "lanes_url": lanes_url(queue),
                   })


#: How each searchable set is ordered, for "searched the first 1,000 of ...".
ORDER = {"pending": "in claim order", "schedule": "soonest run-at first",
         "active": "earliest lease deadline first", "dead": "newest first"}


def _search_context(request, queue: str, set_name: str, filters: Filters, data) -> dict:
    """The filter bar's values, what a search searched, the links to search
    on and to search the archive for the same."""
    if set_name not in SEARCHABLE:
        return {"searchable": False}
    context = {"searchable": True, "filters": filters, "search": None,
               "search_window": f"{SEARCH_WINDOW:,}",
               "states": [(s, s == set_name) for s in SEARCHABLE]}
    if isinstance(data, SearchPage):
        query = request.GET.copy()
        query.pop("fragment", None)
        query["from"] = str((data.next_start or 0) + 1)
        where = f"lane {lane_label(data.lane)}" if set_name == "pending" else set_name
        if not data.examined:
            searched = f"Searched nothing: {where} has {data.total:,} jobs, none from job {data.start + 1:,} on"
        elif data.start == 0:
            first = "newest" if set_name == "dead" else "first"
            searched = (f"Searched the {first} {data.examined:,} of {data.total:,} jobs in {where} "
                        f"({ORDER[set_name]})")
        else:
            searched = (f"Searched jobs {data.start + 1:,}–{data.start + data.examined:,} of "
                        f"{data.total:,} in {where} ({ORDER[set_name]})")
        context["search"] = {
            "page": data, "searched": searched, "matches": len(data.rows),
            "what": data.filters.describe(),
            "next": f"{request.path}?{query.urlencode()}" if data.next_start is not None else "",
            "window": SEARCH_WINDOW, "clear": request.path + (
                f"?{urlencode({'lane': filters.lane})}" if set_name == "pending"
                and filters.lane else ""),
        }
    history = history_url(request)
    if history and filters.active:
        query = {"queue__exact": queue}
        if filters.lane:
            query["lane__exact"] = filters.lane
        if set_name == "dead":
            query["state__exact"] = "dead"
        words = " ".join(w for w in (filters.function, filters.text) if w)
        if words:
            query["q"] = words
        context["archive_search"] = f"{history}?{urlencode(query)}"
    return context


def lanes_view(request, model_admin, queue: str):
    """One page of a queue's lanes, busiest first (``?page=N``), each with
    its jobs waiting, running jobs, state and a link to its pending jobs."""
    require_view(request, model_admin)
    queue = queue_or_404(queue)
    page = _int_param(request, "page", 1, 10**9)
    per_page = _int_param(request, "per_page", reads.LANE_PAGE_SIZE, reads.MAX_LANE_PAGE_SIZE)
    data = reads.lanes_page(get_connection(), queue, page, per_page)
    now = data.now_ms
    rows = [{
        "l": lane,
        "label": lane_label(lane.name),
        "url": lane_url(queue, lane.name),
        "due": fmt_ms(lane.due_ms),
        "due_rel": rel(lane.due_ms, now),
        "due_past": lane.due_ms is not None and lane.due_ms <= now,
    } for lane in data.rows]
    return _render(request, model_admin, "admin/echomq_django/lanes.html",
                   "admin/echomq_django/_lanes.html", f"{queue}: lanes", {
                       **_queue_head(queue, data.head, "lanes"),
                       "queue": queue, "data": data, "rows": rows,
                       "pager": _pager(request.path, {}, page, data),
                   })
