"""URLs of the test project: the Django admin, which mounts the EchoMQ dashboard,
and EchoMQ's own URLs (the metrics view)."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [path("admin/", admin.site.urls), path("echomq/", include("echomq_django.urls"))]
