"""The archive's pages in the admin: "EchoMQ > Job records", the history of
jobs that ended (``ECHOMQ["ARCHIVE"]``; docs/admin.md, "History").

The archive is a normal model (:class:`~echomq_django.models.JobRecord`), so
its pages are Django's own changelist and detail page: filtered by queue,
state, function, lane and finish time (with a date hierarchy), searched by
job id, function and argument text; the detail page shows each attempt's
error (class, message, traceback). Read-only for everyone: records are
written by the archiver and deleted by its retention, never by hand.
Permission: ``echomq_django.view_jobrecord``. Each queue's live pages link
here (:func:`history_url`).
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join

from ..models import JobRecord

__all__ = ["JobRecordAdmin", "history_url"]


def history_url(request) -> str:
    """The records' changelist URL when ``request.user`` may view records
    (``echomq_django.view_jobrecord``), else ``""``; a queue's history is
    this with ``?queue__exact=<queue>``."""
    if not request.user.has_perm("echomq_django.view_jobrecord"):
        return ""
    try:
        return reverse("admin:echomq_django_jobrecord_changelist")
    except NoReverseMatch:   # the model is not registered on this admin site
        return ""


def _pretty(value) -> str:
    return format_html("<pre class=\"emq-json\">{}</pre>",
                       json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True))


@admin.register(JobRecord)
class JobRecordAdmin(admin.ModelAdmin):
    """The archive's changelist and read-only detail page."""

    list_display = ("job_id", "queue", "state", "function", "lane", "attempts", "finished_at",
                    "worker")
    # No sidebar list of lanes: a project with a lane per chat has thousands
    # (each a link, and a DISTINCT over the whole table). A lane is searched
    # by its exact name (below) or linked to as ?lane__exact= from the live
    # pages (lookup_allowed).
    list_filter = ("queue", "state", "function", ("finished_at", admin.DateFieldListFilter))
    date_hierarchy = "finished_at"
    # A job id is matched exactly (ids are unique), a function by part, and
    # the arguments by any text in their JSON.
    search_fields = ("=job_id", "=lane", "function", "args", "kwargs")

    def lookup_allowed(self, lookup, value, request=None):
        """``lane`` and ``lane__exact`` as query parameters, beside Django's
        list_filter lookups."""
        if lookup in ("lane", "lane__exact"):
            return True
        return super().lookup_allowed(lookup, value, request)
    search_help_text = "Search by job id (exact), function, or any text of the arguments."
    list_per_page = 50
    show_full_result_count = False   # no COUNT(*) of a big archive per page
    fieldsets = (
        (None, {"fields": ("job_id", "queue", "lane", "state", "reason", "function")}),
        ("Arguments and result", {"fields": ("arguments", "keyword_arguments", "result_value")}),
        ("Attempts", {"fields": ("attempts", "worker", "attempt_errors")}),
        ("Times (UTC, server clock)", {"fields": ("enqueued_at", "started_at", "finished_at",
                                                  "archived_at")}),
    )
    readonly_fields = ("job_id", "queue", "lane", "state", "reason", "function", "arguments",
                       "keyword_arguments", "result_value", "attempts", "worker",
                       "attempt_errors", "enqueued_at", "started_at", "finished_at",
                       "archived_at")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="args")
    def arguments(self, obj):
        return _pretty(obj.args)

    @admin.display(description="kwargs")
    def keyword_arguments(self, obj):
        return _pretty(obj.kwargs)

    @admin.display(description="result")
    def result_value(self, obj):
        return _pretty(obj.result) if obj.result is not None else "-"

    @admin.display(description="errors, one per failed attempt")
    def attempt_errors(self, obj):
        if not obj.errors:
            return "none"
        rows = format_html_join(
            "", "<tr class=\"emq-attempt\" data-attempt=\"{}\"><td>{}</td><td><code>{}</code>"
                "</td><td>{}</td><td><details><summary>traceback</summary>"
                "<pre class=\"emq-traceback\">{}</pre></details></td></tr>",
            ((e.get("attempt"), e.get("attempt"), e.get("class") or "-", e.get("message", ""),
              e.get("traceback", "")) for e in obj.errors))
        return format_html("<table class=\"emq-errors\"><thead><tr><th>attempt</th>"
                           "<th>class</th><th>message</th><th>traceback</th></tr></thead>"
                           "<tbody>{}</tbody></table>", rows)
