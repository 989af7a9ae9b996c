"""The dashboard while the EchoMQ server does not answer (docs/admin.md,
"When the server does not answer").

A page whose reads fail for a reason that passes on its own
(:func:`~echomq_django.connection.resilience.passing`: a refused or dropped
connection, a timeout, a cluster no node of which answers, or the server's
own ``LOADING``, ``BUSY``, ``MASTERDOWN``, ``READONLY``, ``OOM``, ...)
answers 503 with a page that names the server (without its password) and
the error, instead of a 500 with a traceback:

- a GET page keeps its live bar: its refresh asks for the same page every
  couple of seconds and, at the first answer that is not such a 503, loads
  the page again (``live.js``), so the dashboard comes back by itself;
- a live refresh (``?fragment=1``) answers 503 with the header
  ``X-EchoMQ-Unavailable: 1``; the page keeps what it showed and its stamp
  says the server is not answering. Django does not log these (an open tab
  would log, and mail ADMINS, every 2 s); the page loads are logged as usual;
- an action (POST) says it may or may not have been carried out when the
  connection failed (it can drop after the server did it), and that nothing
  was done when the server refused it (``OOM``, ``READONLY``, ``BUSY``, ...:
  a script refused before its first write changes nothing).

A refused password (redis-py's AuthenticationError) does not pass on its
own: like any other server error (``WRONGTYPE`` on a key someone else wrote,
a script error) it is a fault to see, and is raised (a 500).
"""

from __future__ import annotations

import functools

import redis
from django.template.response import TemplateResponse
from redis.exceptions import AuthenticationError

from ..connection import describe_setting
from ..connection.resilience import SERVER_ERRORS, passing

__all__ = ["answer_outages", "RETRY_AFTER_S"]

#: The Retry-After of a 503 (s): the live refresh's interval.
RETRY_AFTER_S = 2


def answer_outages(view):
    """Wrap a :class:`~echomq_django.admin.site.QueueAdmin` view method: a
    passing server failure while it runs or renders answers 503 (see the
    module doc); anything else propagates."""

    @functools.wraps(view)
    def wrapped(model_admin, request, *args, **kwargs):
        try:
            response = view(model_admin, request, *args, **kwargs)
            if isinstance(response, TemplateResponse):
                response.render()  # a read made while rendering fails here
            return response
        except SERVER_ERRORS as err:
            if isinstance(err, AuthenticationError) or not passing(err):
                raise
            return unavailable(request, model_admin, err, kwargs.get("queue"))

    return wrapped


def unavailable(request, model_admin, err: BaseException,
                queue: str | None = None) -> TemplateResponse:
    """The 503 answer for ``request`` (a page of ``queue``, or None) when the
    server failed with ``err``, a failure that passes."""
    from .dispatch import next_url
    from .views import REFRESH_MS, here_url

    posted = request.method == "POST"
    opts = model_admin.model._meta
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": opts,
        "app_label": opts.app_label,
        "title": "EchoMQ server not answering",
        "server": describe_setting(),
        "error": f"{type(err).__name__}: {err}",
        # The server answered, and refused before writing anything.
        "refused": isinstance(err, redis.ResponseError),
        "posted": posted,
        "back": next_url(request, queue) if posted else here_url(request),
        "refresh_ms": REFRESH_MS,
        "refresh_s": REFRESH_MS // 1000,
        "fragment_template": "admin/echomq_django/_unavailable.html",
    }
    fragment = not posted and request.GET.get("fragment")
    template = ("admin/echomq_django/_unavailable.html" if fragment
                else "admin/echomq_django/unavailable.html")
    response = TemplateResponse(request, template, context, status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    response["X-EchoMQ-Unavailable"] = "1"
    if fragment:
        # Django's log_response skips a response marked as logged.
        response._has_been_logged = True
    return response
