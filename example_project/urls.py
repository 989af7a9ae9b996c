from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # /echomq/metrics: every queue's gauges for Prometheus (docs/observability.md);
    # the admin's user (view permission) or ECHOMQ["METRICS_TOKEN"] gets in.
    path("echomq/", include("echomq_django.urls")),
]
