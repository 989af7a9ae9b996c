"""EchoMQ's URLs outside the admin: ``path("echomq/", include("echomq_django.urls"))``
serves the Prometheus metrics at ``/echomq/metrics`` (docs/observability.md)."""

from django.urls import path


def _metrics(request):
    # Imported on the first scrape: prometheus_client is not loaded by
    # processes that never serve the view.
    from .integrations.metrics.views import metrics

    return metrics(request)


app_name = "echomq"
urlpatterns = [path("metrics", _metrics, name="metrics")]
