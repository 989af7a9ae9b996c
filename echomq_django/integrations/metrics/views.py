"""The metrics view: the queues' gauges in Prometheus's text format.

Mounted by ``echomq_django.urls`` at ``metrics`` (``path("echomq/",
include("echomq_django.urls"))`` serves ``/echomq/metrics``). A request is
let in when it carries ``Authorization: Bearer <ECHOMQ["METRICS_TOKEN"]>``
(compared in constant time) or comes from a logged-in user with the
``echomq_django.view_queue`` permission; otherwise 401 (no credentials) or
403. GET only. A server that cannot be reached answers 503.
"""

from __future__ import annotations

import hmac
import logging

from django.http import HttpResponse
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from ...conf import get_config
from ...connection import get_connection
from ...connection.resilience import SERVER_ERRORS
from .queues import QueueCollector

__all__ = ["metrics"]

log = logging.getLogger("echomq.metrics")


def _allowed(request) -> bool | None:
    """True: let in; False: refused (403); None: no credentials (401)."""
    token = get_config().metrics_token
    header = request.headers.get("Authorization", "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() == "bearer":   # the scheme is case-insensitive (RFC 7235)
        given = credentials.strip().encode()
        return bool(token) and hmac.compare_digest(given, token.encode())
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    return user.has_perm("echomq_django.view_queue")


@require_safe
def metrics(request) -> HttpResponse:
    """Every queue's gauges (docs/observability.md, "Queue metrics")."""
    allowed = _allowed(request)
    if not allowed:
        response = HttpResponse("forbidden\n" if allowed is False else "unauthorized\n",
                                status=403 if allowed is False else 401,
                                content_type="text/plain")
        if allowed is None:
            response["WWW-Authenticate"] = 'Bearer realm="echomq"'
        return response
    registry = CollectorRegistry(auto_describe=False)
    try:
        # (A cluster's client connects as it is built.)
        registry.register(QueueCollector(get_connection(), get_config().queues))
        body = generate_latest(registry)
    except SERVER_ERRORS as err:
        log.warning("metrics: the EchoMQ server could not be read (%s)", err)
        return HttpResponse(f"the EchoMQ server could not be read: {err}\n", status=503,
                            content_type="text/plain")
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
